package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * x-max-length / x-max-length-bytes also hold when messages go back to the queue (nack,
 * reject, channel or connection close): RabbitMQ requeues to the head and then, under
 * drop-head, drops from the head until the queue fits (dead-lettering with reason maxlen);
 * under reject-publish the requeued messages stay and new publishes are refused. Same in
 * RabbitMQ 3.10 and 3.13/4.x (rabbit_amqqueue_process:requeue_and_run/maybe_drop_head).
 */
class LengthLimitRequeueTest extends BrokerTest {

  private static final long REQUEUE_LANDS_MS = 200;

  private interface Requeue {
    void apply(Channel consumerCh, long tag) throws Exception;
  }

  /** m1, m2 published; m1 taken unacked; m3 published (the queue is full again). */
  private String fullQueueWithOneUnacked(Channel consumerCh, Map<String, Object> args,
      Requeue requeue) throws Exception {
    String q = declareQueue(args);
    Amqp.publish(ch, "", q, "m1");
    Amqp.publish(ch, "", q, "m2");
    Amqp.awaitMessageCount(conn, q, 2);
    GetResponse m1 = consumerCh.basicGet(q, false);
    assertNotNull(m1);
    assertEquals("m1", Amqp.text(m1.getBody()));
    Amqp.publish(ch, "", q, "m3");
    Amqp.awaitMessageCount(conn, q, 2);
    requeue.apply(consumerCh, m1.getEnvelope().getDeliveryTag());
    // The queue count is 2 both before the requeue lands and after a correct one; give the
    // requeue (asynchronous on close in RabbitMQ) time to land before looking.
    Thread.sleep(REQUEUE_LANDS_MS);
    return q;
  }

  private void assertHeadDroppedOnRequeue(Requeue requeue) throws Exception {
    Channel consumerCh = conn.createChannel();
    String q = fullQueueWithOneUnacked(consumerCh, Map.of("x-max-length", 2), requeue);
    Amqp.awaitMessageCount(conn, q, 2);
    assertEquals(List.of("m2", "m3"), Amqp.drain(ch, q),
        "requeued m1 went back to the head and was dropped from there");
  }

  @Test
  void nackWithRequeueKeepsMaxLength() throws Exception {
    assertHeadDroppedOnRequeue((c, tag) -> c.basicNack(tag, false, true));
  }

  @Test
  void rejectWithRequeueKeepsMaxLength() throws Exception {
    assertHeadDroppedOnRequeue((c, tag) -> c.basicReject(tag, true));
  }

  @Test
  void channelCloseKeepsMaxLength() throws Exception {
    assertHeadDroppedOnRequeue((c, tag) -> c.close());
  }

  @Test
  void basicRecoverKeepsMaxLength() throws Exception {
    assertHeadDroppedOnRequeue((c, tag) -> c.basicRecover(true));
  }

  @Test
  void connectionCloseKeepsMaxLength() throws Exception {
    Connection consumerConn = Amqp.connect();
    try {
      Channel consumerCh = consumerConn.createChannel();
      String q = fullQueueWithOneUnacked(consumerCh, Map.of("x-max-length", 2),
          (c, tag) -> consumerConn.close());
      Amqp.awaitMessageCount(conn, q, 2);
      assertEquals(List.of("m2", "m3"), Amqp.drain(ch, q));
    } finally {
      Amqp.closeQuietly(consumerConn);
    }
  }

  @Test
  void nackWithRequeueKeepsMaxLengthBytes() throws Exception {
    Channel consumerCh = conn.createChannel();
    // Bodies are 2 bytes each: two fit in 4 bytes, three do not.
    String q = fullQueueWithOneUnacked(consumerCh, Map.of("x-max-length-bytes", 4),
        (c, tag) -> c.basicNack(tag, false, true));
    Amqp.awaitMessageCount(conn, q, 2);
    assertEquals(List.of("m2", "m3"), Amqp.drain(ch, q));
  }

  @Test
  void aMessageDroppedOnRequeueIsDeadLetteredAsMaxlen() throws Exception {
    String dlq = declareQueue();
    Map<String, Object> args = new HashMap<>();
    args.put("x-max-length", 2);
    args.put("x-dead-letter-exchange", "");
    args.put("x-dead-letter-routing-key", dlq);
    Channel consumerCh = conn.createChannel();
    String q = fullQueueWithOneUnacked(consumerCh, args, (c, tag) -> c.basicNack(tag, false, true));

    Amqp.awaitMessageCount(conn, dlq, 1);
    GetResponse dead = ch.basicGet(dlq, true);
    assertEquals("m1", Amqp.text(dead.getBody()));
    @SuppressWarnings("unchecked")
    List<Map<String, Object>> xDeath =
        (List<Map<String, Object>>) dead.getProps().getHeaders().get("x-death");
    assertEquals("maxlen", xDeath.get(0).get("reason").toString());
    assertEquals(q, xDeath.get(0).get("queue").toString());
    assertEquals(List.of("m2", "m3"), Amqp.drain(ch, q));
  }

  @Test
  void rejectPublishKeepsRequeuedMessagesAndRefusesNewOnes() throws Exception {
    Channel consumerCh = conn.createChannel();
    String q = fullQueueWithOneUnacked(consumerCh,
        Map.of("x-max-length", 2, "x-overflow", "reject-publish"),
        (c, tag) -> c.basicNack(tag, false, true));
    Amqp.awaitMessageCount(conn, q, 3);

    Channel confirmCh = conn.createChannel();
    confirmCh.confirmSelect();
    Amqp.publish(confirmCh, "", q, "m4");
    assertFalse(confirmCh.waitForConfirms(Amqp.TIMEOUT_MS), "a full queue nacks the publish");
    assertEquals(List.of("m1", "m2", "m3"), Amqp.drain(ch, q));
  }
}
