package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Delivery;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * basic.qos with global=true: one unacked-message limit shared by all consumers on the
 * channel; no-ack consumers are not limited; deliveries stay fair across queues. Same in
 * RabbitMQ 3.10 and 3.13/4.x (classic queues).
 */
class GlobalPrefetchTest extends BrokerTest {

  private String queueWith(int messages) throws Exception {
    String q = declareQueue();
    for (int i = 0; i < messages; i++) Amqp.publish(ch, "", q, q + "#" + i);
    return q;
  }

  @Test
  void oneLimitIsSharedByAllConsumersOnTheChannel() throws Exception {
    String q1 = queueWith(5), q2 = queueWith(5);
    Channel c = conn.createChannel();
    c.basicQos(3, true);
    Deliveries d1 = Deliveries.consume(c, q1, false);
    List<Delivery> first = d1.next(3);

    Deliveries d2 = Deliveries.consume(c, q2, false);
    d2.assertNoneWithin(300);
    d1.assertNoneWithin(0);

    c.basicAck(first.get(0).getEnvelope().getDeliveryTag(), false);
    Thread.sleep(300);
    assertEquals(1, d1.takeAll().size() + d2.takeAll().size(), "one ack frees one slot");
  }

  @Test
  void perConsumerAndGlobalLimitsBothApply() throws Exception {
    String q1 = queueWith(5), q2 = queueWith(5);
    Channel c = conn.createChannel();
    c.basicQos(2, false);
    c.basicQos(3, true);
    Deliveries d1 = Deliveries.consume(c, q1, false);
    d1.next(2);
    d1.assertNoneWithin(200);

    Deliveries d2 = Deliveries.consume(c, q2, false);
    d2.next(1);
    d2.assertNoneWithin(300);
  }

  @Test
  void noAckDeliveriesDoNotCountAgainstTheLimit() throws Exception {
    String unlimited = queueWith(20), limited = queueWith(5);
    Channel c = conn.createChannel();
    c.basicQos(2, true);

    Deliveries noAck = Deliveries.consume(c, unlimited, true);
    assertEquals(20, noAck.next(20).size(), "a no-ack consumer is not held to 2");

    Deliveries acked = Deliveries.consume(c, limited, false);
    assertEquals(2, acked.next(2).size(), "the 20 no-ack deliveries used none of the 2 slots");
    acked.assertNoneWithin(200);
  }

  /**
   * RabbitMQ's limiter answers can_send with "no" for every consumer on the channel while the
   * limit is reached, no-ack ones included (rabbit_limiter, handle_call can_send); they go on
   * when an ack frees room.
   */
  @Test
  void aFullLimitHoldsBackNoAckConsumersOnTheChannelUntilAnAck() throws Exception {
    String limited = queueWith(1), unlimited = queueWith(5);
    Channel c = conn.createChannel();
    c.basicQos(1, true);
    Deliveries acked = Deliveries.consume(c, limited, false);
    long tag = acked.next().getEnvelope().getDeliveryTag();

    Deliveries noAck = Deliveries.consume(c, unlimited, true);
    noAck.assertNoneWithin(300);

    c.basicAck(tag, false);
    assertEquals(5, noAck.next(5).size());
  }

  @Test
  void deliveriesStayFairAcrossQueuesOnOneChannel() throws Exception {
    int perQueue = 100, taken = 60;
    String q1 = queueWith(perQueue), q2 = queueWith(perQueue);
    Channel c = conn.createChannel();
    c.basicQos(1, true);
    Map<String, AtomicInteger> perSource = new ConcurrentHashMap<>();
    CountDownLatch done = new CountDownLatch(taken);
    for (String q : List.of(q1, q2)) {
      perSource.put(q, new AtomicInteger());
      c.basicConsume(q, false, (tag, d) -> {
        if (done.getCount() > 0) {
          perSource.get(q).incrementAndGet();
          done.countDown();
          c.basicAck(d.getEnvelope().getDeliveryTag(), false);
        }
      }, tag -> {});
    }

    assertTrue(done.await(Amqp.TIMEOUT_MS, TimeUnit.MILLISECONDS), "deliveries keep flowing");
    for (String q : List.of(q1, q2)) {
      int n = perSource.get(q).get();
      assertTrue(n >= taken / 5, q + " got only " + n + " of " + taken + ": " + perSource);
    }
  }
}
