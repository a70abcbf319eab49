package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Delivery;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Consumer priorities (x-priority on basic.consume): a higher-priority consumer gets every
 * message while it has prefetch room; lower ones get the rest; equal priorities round-robin.
 * Same in RabbitMQ 3.10 and 3.13/4.x.
 */
class ConsumerPriorityTest extends BrokerTest {

  private static List<String> bodies(List<Delivery> ds) {
    List<String> out = new ArrayList<>();
    for (Delivery d : ds) out.add(Amqp.text(d.getBody()));
    return out;
  }

  private static List<String> messages(int from, int to) {
    List<String> out = new ArrayList<>();
    for (int i = from; i < to; i++) out.add("m" + i);
    return out;
  }

  private void publish(String q, int from, int to) throws Exception {
    for (String m : messages(from, to)) Amqp.publish(ch, "", q, m);
  }

  @Test
  void theHigherPriorityConsumerGetsMessagesWhileItHasPrefetchRoom() throws Exception {
    String q = declareQueue();
    Channel highCh = conn.createChannel();
    highCh.basicQos(3);
    Deliveries high = Deliveries.consume(highCh, q, false, Map.of("x-priority", 10));
    Channel lowCh = conn.createChannel();
    Deliveries low = Deliveries.consume(lowCh, q, false, Map.of("x-priority", -1));

    publish(q, 0, 10);

    assertEquals(messages(0, 3), bodies(high.next(3)), "high fills its prefetch first");
    assertEquals(messages(3, 10), bodies(low.next(7)), "low gets what high has no room for");
    high.assertNoneWithin(200);

    highCh.basicAck(0, true);
    publish(q, 10, 13);

    assertEquals(messages(10, 13), bodies(high.next(3)), "room again: high before low");
    low.assertNoneWithin(200);
  }

  @Test
  void aConsumerWithoutPriorityRanksAsZero() throws Exception {
    String q = declareQueue();
    Channel negCh = conn.createChannel();
    Deliveries negative = Deliveries.consume(negCh, q, true, Map.of("x-priority", -5));
    Channel defCh = conn.createChannel();
    Deliveries byDefault = Deliveries.consume(defCh, q, true);

    publish(q, 0, 5);

    assertEquals(messages(0, 5), bodies(byDefault.next(5)));
    negative.assertNoneWithin(200);
  }

  @Test
  void equalPrioritiesRoundRobin() throws Exception {
    String q = declareQueue();
    Channel aCh = conn.createChannel(), bCh = conn.createChannel();
    Deliveries a = Deliveries.consume(aCh, q, true, Map.of("x-priority", 5));
    Deliveries b = Deliveries.consume(bCh, q, true, Map.of("x-priority", 5));

    publish(q, 0, 6);

    assertEquals(List.of("m0", "m2", "m4"), bodies(a.next(3)));
    assertEquals(List.of("m1", "m3", "m5"), bodies(b.next(3)));
  }
}
