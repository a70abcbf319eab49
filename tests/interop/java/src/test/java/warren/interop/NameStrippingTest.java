package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * CR and LF are stripped from exchange and queue names, as rabbit_channel:strip_cr_lf does
 * in queue.declare/delete/bind/unbind and exchange.declare/delete/bind/unbind. Same in
 * RabbitMQ 3.10 and 3.13/4.x.
 */
class NameStrippingTest extends BrokerTest {

  @Test
  void queueDeclareStripsCrAndLfFromTheName() throws Exception {
    String q = names.queue();
    String dirty = q.substring(0, 5) + "\r\n" + q.substring(5) + "\n";

    String declared = ch.queueDeclare(dirty, false, false, false, null).getQueue();

    assertEquals(q, declared, "declare-ok carries the stripped name");
    assertTrue(Amqp.queueExists(conn, q));
    Amqp.publish(ch, "", q, "m");
    assertEquals(List.of("m"), Amqp.drain(ch, q));
  }

  @Test
  void passiveDeclareAndDeleteStripTheNameToo() throws Exception {
    String q = declareQueue();

    assertEquals(q, ch.queueDeclarePassive("\r" + q + "\n").getQueue());
    ch.queueDelete(q + "\r\n");

    assertFalse(Amqp.queueExists(conn, q));
  }

  @Test
  void exchangeDeclareBindAndDeleteStripCrAndLf() throws Exception {
    String x = names.exchange(), q = declareQueue();
    ch.exchangeDeclare(x + "\r\n", "fanout", false, false, null);
    assertTrue(Amqp.exchangeExists(conn, x));

    ch.queueBind("\n" + q, "\r" + x, "");
    Amqp.publish(ch, x, "", "m");
    assertEquals(List.of("m"), Amqp.drain(ch, q));

    ch.exchangeDelete("\n" + x + "\r");
    assertFalse(Amqp.exchangeExists(conn, x));
  }

  @Test
  void exchangeBindStripsBothNames() throws Exception {
    String source = declareExchange("fanout"), destination = declareExchange("fanout");
    String q = declareQueue();
    ch.queueBind(q, destination, "");

    ch.exchangeBind(destination + "\n", "\r" + source, "");
    Amqp.publish(ch, source, "", "m");
    assertEquals(List.of("m"), Amqp.drain(ch, q));

    ch.exchangeUnbind("\r\n" + destination, source + "\r\n", "");
    Amqp.publish(ch, source, "", "after unbind");
    assertEquals(List.of(), Amqp.drain(ch, q));
  }
}
