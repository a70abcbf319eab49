package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A queue exclusive to another connection: any declare of it, passive or not, is 405
 * RESOURCE_LOCKED, and that check comes before argument equivalence (406). Same in RabbitMQ
 * 3.10 and 3.13/4.x.
 */
class ExclusiveQueueTest extends BrokerTest {
  private Connection other;
  private Channel otherCh;
  private String q;

  @BeforeEach
  void declareExclusiveOnAnotherConnection() throws Exception {
    other = Amqp.connect();
    otherCh = other.createChannel();
    q = names.queue();
    otherCh.queueDeclare(q, false, true, false, Map.of("x-max-length", 10));
  }

  @AfterEach
  void closeOther() {
    Amqp.closeQuietly(other);
  }

  private String locked() {
    return "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '" + q
        + "' in vhost '/'. It could be originally declared on another connection or the"
        + " exclusive property value does not match that of the original declaration.";
  }

  /** 405 with the start of RabbitMQ's text (the whole text is over 255 bytes; see below). */
  private void assertLocked(AMQP.Channel.Close close) {
    assertEquals(405, close.getReplyCode(), close.getReplyText());
    String start = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '" + q
        + "' in vhost '/'.";
    assertTrue(close.getReplyText().startsWith(start), close.getReplyText());
  }

  @Test
  void passiveDeclareFromAnotherConnectionIs405() {
    assertLocked(Amqp.channelError(() -> ch.queueDeclarePassive(q)));
  }

  @Test
  void declareWithTheSamePropertiesFromAnotherConnectionIs405() {
    assertLocked(Amqp.channelError(
        () -> ch.queueDeclare(q, false, true, false, Map.of("x-max-length", 10))));
  }

  @Test
  void declareWithOtherArgumentsFromAnotherConnectionIs405Not406() {
    assertLocked(Amqp.channelError(
        () -> ch.queueDeclare(q, true, false, true, Map.of("x-max-length", 99))));
  }

  /**
   * A reply text is a shortstr: RabbitMQ cuts one over 255 bytes to 252 and appends "..."
   * (rabbit_binary_generator). The locked-queue text with these queue names is that long.
   */
  @Test
  void theLockedTextIsCutTo255BytesEndingInDotsAsRabbitMqCutsIt() {
    assertTrue(Amqp.utf8(locked()).length > 255, "the test needs a text over 255 bytes");
    Amqp.assertClose(405, locked(), Amqp.channelError(() -> ch.queueDeclarePassive(q)));
  }

  /** The rest of the text differs between 3.10 and 3.13 (the latter names the types). */
  @Test
  void theOwningConnectionStillGetsTheEquivalenceCheck() throws Exception {
    AMQP.Channel.Close close = Amqp.channelError(
        () -> otherCh.queueDeclare(q, false, true, false, Map.of("x-max-length", 99)));
    assertEquals(406, close.getReplyCode(), close.getReplyText());
    String prefix = "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '" + q
        + "' in vhost '/': received ";
    assertTrue(close.getReplyText().startsWith(prefix), close.getReplyText());
    assertEquals(q, other.createChannel().queueDeclarePassive(q).getQueue());
  }
}
