package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import com.rabbitmq.client.GetResponse;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The channel's last declared queue as the meaning of an empty queue name in queue.bind,
 * basic.consume, queue.purge, queue.delete and basic.get, and of an empty routing key in
 * queue.bind then (rabbit_channel:expand_shortcuts). Same in RabbitMQ 3.10 and 3.13/4.x.
 */
class LastDeclaredQueueTest extends BrokerTest {

  private String declare() throws Exception {
    return names.trackQueue(ch.queueDeclare(names.queue(), false, false, false, null).getQueue());
  }

  @Test
  void bindWithEmptyQueueAndKeyBindsTheLastDeclaredQueueByItsName() throws Exception {
    String x = declareExchange("direct");
    String q = declare();

    ch.queueBind("", x, "");

    Amqp.publish(ch, x, q, "by name");
    Amqp.publish(ch, x, "", "by empty key");
    assertEquals(List.of("by name"), Amqp.drain(ch, q));
  }

  @Test
  void getAndPurgeWithAnEmptyNameUseTheLastDeclaredQueue() throws Exception {
    String q = declare();
    for (String m : List.of("a", "b", "c")) Amqp.publish(ch, "", q, m);
    Amqp.awaitMessageCount(conn, q, 3);

    GetResponse r = ch.basicGet("", true);
    assertNotNull(r);
    assertEquals("a", Amqp.text(r.getBody()));
    assertEquals(2, ch.queuePurge("").getMessageCount());
    assertEquals(0, Amqp.messageCount(conn, q));
  }

  @Test
  void consumeWithAnEmptyNameUsesTheLastDeclaredQueue() throws Exception {
    String q = declare();
    Deliveries d = Deliveries.consume(ch, "", true);
    Amqp.publish(ch, "", q, "m");
    assertEquals("m", Amqp.text(d.next().getBody()));
  }

  @Test
  void deleteWithAnEmptyNameDeletesTheLastDeclaredQueue() throws Exception {
    String q = declare();
    ch.queueDelete("");
    assertFalse(Amqp.queueExists(conn, q));
  }

  @Test
  void theShorthandFollowsAServerNamedQueue() throws Exception {
    String q = names.trackQueue(ch.queueDeclare().getQueue());
    Amqp.publish(ch, "", q, "m");
    Amqp.awaitMessageCount(conn, q, 1);
    assertEquals("m", Amqp.text(ch.basicGet("", true).getBody()));
  }

  @Test
  void anEmptyNameWithNoQueueDeclaredOnTheChannelIs404() {
    Amqp.assertClose(404, "NOT_FOUND - no previously declared queue",
        Amqp.channelError(() -> ch.basicGet("", true)));
  }
}
