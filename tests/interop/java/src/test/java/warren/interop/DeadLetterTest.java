package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.GetResponse;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Dead-lettering: RabbitMQ's cycle rule (a message is dropped only when it would come back to
 * a queue through a fully automatic cycle, with no rejection in it), x-death entries keyed by
 * (queue, reason) whose count is incremented and which move to the front when they recur, and
 * the x-first-death-* / x-last-death-* headers.
 */
class DeadLetterTest extends BrokerTest {

  /** A queue that dead-letters through the default exchange to {@code target}. */
  private void declareDeadLettering(String q, String target, Map<String, Object> extra)
      throws Exception {
    Map<String, Object> args = new HashMap<>(extra);
    args.put("x-dead-letter-exchange", "");
    args.put("x-dead-letter-routing-key", target);
    ch.queueDeclare(q, false, false, false, args);
  }

  /** A fanout exchange that routes to {@code queues} (a dead-letter target with observers). */
  private String fanoutTo(String... queues) throws Exception {
    String x = declareExchange("fanout");
    for (String q : queues) ch.queueBind(q, x, "");
    return x;
  }

  @SuppressWarnings("unchecked")
  private static List<Map<String, Object>> xDeath(GetResponse r) {
    return (List<Map<String, Object>>) r.getProps().getHeaders().get("x-death");
  }

  /** Each x-death entry as "queue/reason/count", most recent first. */
  private static List<String> deaths(GetResponse r) {
    List<String> out = new ArrayList<>();
    for (Map<String, Object> d : xDeath(r)) {
      out.add(d.get("queue") + "/" + d.get("reason") + "/" + d.get("count"));
    }
    return out;
  }

  private static String header(GetResponse r, String name) {
    Object v = r.getProps().getHeaders().get(name);
    return v == null ? null : v.toString();
  }

  private GetResponse awaitGet(String q) throws Exception {
    Amqp.awaitMessageCount(conn, q, 1);
    GetResponse r = ch.basicGet(q, false);
    assertNotNull(r, "expected the dead-lettered message in " + q);
    return r;
  }

  @Test
  void aFullyAutomaticCycleIsDroppedButOtherTargetsStillGetTheMessage() throws Exception {
    String q1 = names.queue(), q2 = names.queue(), observer = declareQueue();
    declareDeadLettering(q1, q2, Map.of("x-message-ttl", 20));
    String fanout = fanoutTo(q1, observer);
    ch.queueDeclare(q2, false, false, false,
        Map.of("x-message-ttl", 20, "x-dead-letter-exchange", fanout));

    Amqp.publish(ch, "", q1, "loop");

    GetResponse seen = awaitGet(observer);
    assertEquals(List.of(q2 + "/expired/1", q1 + "/expired/1"), deaths(seen));
    Thread.sleep(300);
    assertEquals(0, Amqp.messageCount(conn, q1), "back to q1 would close an all-expiry cycle");
    assertEquals(0, Amqp.messageCount(conn, q2));
    assertEquals(0, Amqp.messageCount(conn, observer), "the observer got it exactly once");
  }

  /**
   * Drives one message q1 -expired-> q2 -rejected-> q1 -rejected-> q2 -rejected-> q1 and
   * returns it as it finally sits in q1, checking on the way that each hop keeps it (every
   * cycle back to a queue contains a rejection).
   */
  private GetResponse roundTrips(String q1, String q2) throws Exception {
    declareDeadLettering(q1, q2, Map.of());
    declareDeadLettering(q2, q1, Map.of());
    ch.basicPublish("", q1, new AMQP.BasicProperties.Builder().expiration("1").build(),
        Amqp.utf8("m"));
    GetResponse atQ2 = awaitGet(q2);
    assertEquals(List.of(q1 + "/expired/1"), deaths(atQ2));
    assertEquals("1", xDeath(atQ2).get(0).get("original-expiration").toString());
    assertNull(atQ2.getProps().getExpiration(), "the expiration is not carried on");
    ch.basicReject(atQ2.getEnvelope().getDeliveryTag(), false);
    GetResponse atQ1 = awaitGet(q1);
    ch.basicReject(atQ1.getEnvelope().getDeliveryTag(), false);
    atQ2 = awaitGet(q2);
    ch.basicReject(atQ2.getEnvelope().getDeliveryTag(), false);
    return awaitGet(q1);
  }

  @Test
  void aCycleWithARejectionIsKeptAndXDeathCountsPerQueueAndReason() throws Exception {
    String q1 = names.queue(), q2 = names.queue();
    GetResponse atQ1 = roundTrips(q1, q2);

    List<String> deaths = deaths(atQ1);
    assertEquals(q2 + "/rejected/2", deaths.get(0), "the newest death comes first");
    assertEquals(Set.of(q2 + "/rejected/2", q1 + "/rejected/1", q1 + "/expired/1"),
        new HashSet<>(deaths), "one entry per (queue, reason)");
    Map<String, Object> newest = xDeath(atQ1).get(0);
    assertEquals("", newest.get("exchange").toString());
    assertEquals(List.of(q2), Amqp.strings(newest.get("routing-keys")));
    assertInstanceOf(Date.class, newest.get("time"));
    assertEquals(q1, header(atQ1, "x-first-death-queue"));
    assertEquals("expired", header(atQ1, "x-first-death-reason"));
    assertEquals("", header(atQ1, "x-first-death-exchange"));
  }

  /**
   * Fails against RabbitMQ 3.10.8: its x-death update (rabbit_dead_letter,
   * group_by_queue_and_reason) reverses the older entries on every death, so only the newest
   * is reliably in place; 3.13 (message_containers_deaths_v2) and 4.x keep them by recency.
   */
  @Test
  void xDeathEntriesAreOrderedByRecencyWithARecurringOneMovedToTheFront() throws Exception {
    String q1 = names.queue(), q2 = names.queue();
    GetResponse atQ1 = roundTrips(q1, q2);

    assertEquals(List.of(q2 + "/rejected/2", q1 + "/rejected/1", q1 + "/expired/1"),
        deaths(atQ1));
  }

  /**
   * Fails against RabbitMQ 3.10.8: x-last-death-queue/-reason/-exchange were added in 3.13
   * (mc:record_death); 3.10 sets only x-first-death-*.
   */
  @Test
  void lastDeathHeadersNameTheNewestDeath() throws Exception {
    String q1 = names.queue(), q2 = names.queue();
    GetResponse atQ1 = roundTrips(q1, q2);

    assertEquals(q2, header(atQ1, "x-last-death-queue"));
    assertEquals("rejected", header(atQ1, "x-last-death-reason"));
    assertEquals("", header(atQ1, "x-last-death-exchange"));
    assertEquals(q1, header(atQ1, "x-first-death-queue"), "the first death stays");
  }

  @Test
  void aRejectedMessageComingBackToItsOwnQueueIsKept() throws Exception {
    String q = names.queue();
    declareDeadLettering(q, q, Map.of());
    Amqp.publish(ch, "", q, "m");

    GetResponse first = awaitGet(q);
    ch.basicReject(first.getEnvelope().getDeliveryTag(), false);
    GetResponse second = awaitGet(q);
    ch.basicReject(second.getEnvelope().getDeliveryTag(), false);
    GetResponse third = awaitGet(q);

    assertEquals(List.of(q + "/rejected/2"), deaths(third));
    ch.basicAck(third.getEnvelope().getDeliveryTag(), false);
  }

  @Test
  void anExpiryBackIntoTheSameQueueIsDropped() throws Exception {
    String q = names.queue(), observer = declareQueue(), fanout = fanoutTo(observer);
    ch.queueDeclare(q, false, false, false,
        Map.of("x-message-ttl", 20, "x-dead-letter-exchange", fanout));
    ch.queueBind(q, fanout, "");

    Amqp.publish(ch, "", q, "m");

    GetResponse seen = awaitGet(observer);
    assertEquals(List.of(q + "/expired/1"), deaths(seen));
    Thread.sleep(300);
    assertEquals(0, Amqp.messageCount(conn, q), "q -> q by expiry alone is a cycle");
    assertEquals(0, Amqp.messageCount(conn, observer));
  }
}
