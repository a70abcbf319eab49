package warren.interop;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * queue.unbind and exchange.unbind of a binding, queue or exchange that does not exist answer
 * unbind-ok, never 404 (RabbitMQ 3.x: rabbit_db_binding only reports absent, not missing,
 * resources on delete). Same in RabbitMQ 3.10 and 3.13.
 */
class UnbindTest extends BrokerTest {

  @Test
  void queueUnbindOfAMissingBindingIsOk() throws Exception {
    ch.queueUnbind(declareQueue(), declareExchange("direct"), "never-bound");
    assertTrue(ch.isOpen());
  }

  @Test
  void queueUnbindOfAMissingQueueIsOk() throws Exception {
    ch.queueUnbind(names.queue(), declareExchange("direct"), "k");
    assertTrue(ch.isOpen());
  }

  @Test
  void queueUnbindFromAMissingExchangeIsOk() throws Exception {
    ch.queueUnbind(declareQueue(), names.exchange(), "k");
    assertTrue(ch.isOpen());
  }

  @Test
  void exchangeUnbindOfAMissingBindingIsOk() throws Exception {
    ch.exchangeUnbind(declareExchange("direct"), declareExchange("direct"), "never-bound");
    assertTrue(ch.isOpen());
  }

  @Test
  void exchangeUnbindWithAMissingSourceIsOk() throws Exception {
    ch.exchangeUnbind(declareExchange("direct"), names.exchange(), "k");
    assertTrue(ch.isOpen());
  }

  @Test
  void exchangeUnbindWithAMissingDestinationIsOk() throws Exception {
    ch.exchangeUnbind(names.exchange(), declareExchange("direct"), "k");
    assertTrue(ch.isOpen());
  }
}
