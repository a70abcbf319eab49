package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.GetResponse;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * Sender-selected distribution: the CC and BCC headers (arrays of strings) add routing keys to
 * a publish; BCC is removed before delivery. Same in RabbitMQ 3.10 and 3.13/4.x.
 */
class SenderSelectedDistributionTest extends BrokerTest {

  private static AMQP.BasicProperties headers(Map<String, Object> headers) {
    return new AMQP.BasicProperties.Builder().headers(headers).build();
  }

  @Test
  void ccAndBccKeysAlsoRouteTheMessageThroughADirectExchange() throws Exception {
    String x = declareExchange("direct");
    String main = names.queue(), cc = names.queue(), bcc = names.queue(), other = names.queue();
    for (String q : List.of(main, cc, bcc, other)) {
      ch.queueDeclare(q, false, false, false, null);
      ch.queueBind(q, x, q);
    }

    ch.basicPublish(x, main, headers(Map.of("CC", List.of(cc), "BCC", List.of(bcc))),
        Amqp.utf8("m"));

    for (String q : List.of(main, cc, bcc)) assertEquals(List.of("m"), Amqp.drain(ch, q), q);
    assertEquals(List.of(), Amqp.drain(ch, other));
  }

  @Test
  void bccIsRemovedBeforeDeliveryAndCcIsKept() throws Exception {
    String q1 = declareQueue(), q2 = declareQueue(), q3 = declareQueue();

    ch.basicPublish("", q1,
        headers(Map.of("CC", List.of(q2), "BCC", List.of(q3), "app", "kept")), Amqp.utf8("m"));

    for (String q : List.of(q1, q2, q3)) {
      GetResponse r = ch.basicGet(q, true);
      assertNotNull(r, "the default exchange routes the CC/BCC names too: " + q);
      Map<String, Object> h = r.getProps().getHeaders();
      assertFalse(h.containsKey("BCC"), "BCC must not reach the consumer: " + h);
      assertEquals(List.of(q2), Amqp.strings(h.get("CC")), "CC is delivered as sent");
      assertEquals("kept", h.get("app").toString());
      assertEquals(q1, r.getEnvelope().getRoutingKey(), "the delivery keeps the publish key");
    }
  }

  @Test
  void aQueueMatchedByTheKeyAndByCcGetsOneCopy() throws Exception {
    String x = declareExchange("direct"), q = declareQueue();
    ch.queueBind(q, x, "a");
    ch.queueBind(q, x, "b");

    ch.basicPublish(x, "a", headers(Map.of("CC", List.of("b"), "BCC", List.of("a", "b"))),
        Amqp.utf8("once"));

    assertEquals(List.of("once"), Amqp.drain(ch, q));
  }

  @Test
  void aMandatoryMessageRoutedOnlyByBccIsNotReturned() throws Exception {
    String x = declareExchange("direct"), q = declareQueue();
    ch.queueBind(q, x, "hidden");
    AtomicInteger returned = new AtomicInteger();
    ch.addReturnListener(r -> returned.incrementAndGet());
    ch.confirmSelect();

    ch.basicPublish(x, "nobody", true, headers(Map.of("BCC", List.of("hidden"))),
        Amqp.utf8("m"));
    assertTrue(ch.waitForConfirms(Amqp.TIMEOUT_MS));

    assertEquals(0, returned.get(), "routed through BCC, so not unroutable");
    assertEquals(List.of("m"), Amqp.drain(ch, q));
  }
}
