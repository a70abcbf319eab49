package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.GetResponse;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Acks in a transaction (rabbit_channel): an ack/nack/reject of an unknown or already settled
 * tag is 406 at once, not at commit; tx.rollback puts uncommitted acks back among the unacked
 * messages (not into the queue); basic.recover leaves uncommitted acks to the commit. Same in
 * RabbitMQ 3.10 and 3.13/4.x.
 */
class TransactionTest extends BrokerTest {

  private String queueWith(String... bodies) throws Exception {
    String q = declareQueue();
    for (String b : bodies) Amqp.publish(ch, "", q, b);
    return q;
  }

  private GetResponse get(String q) throws Exception {
    GetResponse r = ch.basicGet(q, false);
    assertNotNull(r, "expected a message in " + q);
    return r;
  }

  @Test
  void ackOfAnUnknownTagIs406AtOnce() throws Exception {
    ch.txSelect();
    ch.basicAck(99, false);
    Amqp.assertClose(406, "PRECONDITION_FAILED - unknown delivery tag 99",
        Amqp.awaitChannelClose(ch));
  }

  @Test
  void secondAckOfTheSameTagIs406BeforeCommit() throws Exception {
    String q = queueWith("m");
    long tag = get(q).getEnvelope().getDeliveryTag();
    ch.txSelect();
    ch.basicAck(tag, false);
    ch.basicAck(tag, false);
    Amqp.assertClose(406, "PRECONDITION_FAILED - unknown delivery tag " + tag,
        Amqp.awaitChannelClose(ch));
  }

  @Test
  void nackOfAnUnknownTagIs406AtOnce() throws Exception {
    ch.txSelect();
    ch.basicNack(5, false, true);
    Amqp.assertClose(406, "PRECONDITION_FAILED - unknown delivery tag 5",
        Amqp.awaitChannelClose(ch));
  }

  @Test
  void rejectOfAnAckedTagIs406AtOnce() throws Exception {
    String q = queueWith("m");
    long tag = get(q).getEnvelope().getDeliveryTag();
    ch.txSelect();
    ch.basicAck(tag, false);
    ch.basicReject(tag, true);
    Amqp.assertClose(406, "PRECONDITION_FAILED - unknown delivery tag " + tag,
        Amqp.awaitChannelClose(ch));
  }

  @Test
  void rollbackMakesUncommittedAcksUnackedAgain() throws Exception {
    String q = queueWith("m");
    long tag = get(q).getEnvelope().getDeliveryTag();
    ch.txSelect();
    ch.basicAck(tag, false);
    ch.txRollback();

    assertEquals(0, Amqp.messageCount(conn, q), "rollback does not requeue");
    ch.basicAck(tag, false);
    ch.txCommit();
    assertTrue(ch.isOpen(), "the tag was unacked again, so acking it is fine");

    ch.close();
    assertEquals(0, Amqp.messageCount(conn, q), "the committed ack settled the message");
  }

  @Test
  void aRolledBackAckLeavesTheMessageToBeRequeuedOnClose() throws Exception {
    String q = queueWith("m");
    long tag = get(q).getEnvelope().getDeliveryTag();
    ch.txSelect();
    ch.basicAck(tag, false);
    ch.txRollback();

    ch.close();

    ch = conn.createChannel();
    GetResponse again = get(q);
    assertEquals("m", Amqp.text(again.getBody()));
    assertTrue(again.getEnvelope().isRedeliver());
  }

  @Test
  void recoverDoesNotRequeueAnUncommittedAckAndCommitSettlesIt() throws Exception {
    String q = queueWith("m1", "m2");
    long tag1 = get(q).getEnvelope().getDeliveryTag();
    get(q);
    ch.txSelect();
    ch.basicAck(tag1, false);

    ch.basicRecover(true);

    GetResponse redelivered = get(q);
    assertEquals("m2", Amqp.text(redelivered.getBody()), "only the unacked message returns");
    assertTrue(redelivered.getEnvelope().isRedeliver());
    assertNull(ch.basicGet(q, false), "m1's ack is pending in the transaction");

    ch.txCommit();
    ch.close();
    ch = conn.createChannel();
    assertEquals(List.of("m2"), Amqp.drain(ch, q), "m1 was settled by the commit");
  }
}
