package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Exchange-to-exchange bindings: deleting an exchange removes every binding where it is the
 * source or the destination, and an auto-delete exchange whose last binding goes (an e2e
 * binding included) is deleted too, cascading. Same in RabbitMQ 3.10 and 3.13/4.x.
 */
class ExchangeBindingTest extends BrokerTest {

  private String fanout(boolean autoDelete) throws Exception {
    return declareExchange("fanout", autoDelete);
  }

  @Test
  void deletingTheDestinationExchangeRemovesTheBindingsToAndFromIt() throws Exception {
    String source = fanout(false), destination = fanout(false), q = declareQueue();
    ch.exchangeBind(destination, source, "");
    ch.queueBind(q, destination, "");
    Amqp.publish(ch, source, "", "before");
    assertEquals(List.of("before"), Amqp.drain(ch, q));

    ch.exchangeDelete(destination);
    ch.exchangeDeclare(destination, "fanout", false, false, null);

    Amqp.publish(ch, source, "", "through the old e2e binding");
    Amqp.publish(ch, destination, "", "through the old queue binding");
    assertEquals(List.of(), Amqp.drain(ch, q), "a re-declared exchange starts with no bindings");
  }

  @Test
  void deletingTheSourceExchangeRemovesItsE2eBindings() throws Exception {
    String source = fanout(false), destination = fanout(false), q = declareQueue();
    ch.exchangeBind(destination, source, "");
    ch.queueBind(q, destination, "");

    ch.exchangeDelete(source);
    ch.exchangeDeclare(source, "fanout", false, false, null);

    Amqp.publish(ch, source, "", "m");
    assertEquals(List.of(), Amqp.drain(ch, q));
  }

  @Test
  void anAutoDeleteExchangeGoesWithItsLastE2eBinding() throws Exception {
    String source = fanout(true), destination = fanout(false);
    ch.exchangeBind(destination, source, "");
    assertTrue(Amqp.exchangeExists(conn, source));

    ch.exchangeUnbind(destination, source, "");

    assertFalse(Amqp.exchangeExists(conn, source), "auto-delete source without bindings");
    assertTrue(Amqp.exchangeExists(conn, destination));
  }

  @Test
  void anAutoDeleteExchangeGoesWhenItsDestinationExchangeIsDeleted() throws Exception {
    String source = fanout(true), destination = fanout(false);
    ch.exchangeBind(destination, source, "");

    ch.exchangeDelete(destination);

    assertFalse(Amqp.exchangeExists(conn, source));
  }

  @Test
  void autoDeleteCascadesThroughAChainOfExchanges() throws Exception {
    String top = fanout(true), middle = fanout(true), q = declareQueue();
    ch.exchangeBind(middle, top, "");
    ch.queueBind(q, middle, "");

    ch.queueDelete(q);

    assertFalse(Amqp.exchangeExists(conn, middle), "lost its only (queue) binding");
    assertFalse(Amqp.exchangeExists(conn, top), "lost its only binding when middle went");
  }

  @Test
  void anAutoDeleteExchangeThatNeverHadABindingStays() throws Exception {
    String x = fanout(true);
    assertTrue(Amqp.exchangeExists(conn, x));
  }
}
