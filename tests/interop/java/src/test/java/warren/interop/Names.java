package warren.interop;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import java.util.ArrayList;
import java.util.List;

/**
 * Unique queue and exchange names for one test, deleted afterwards through a fresh connection
 * (the test's own connection may have been closed by the broker).
 */
final class Names {
  private final String topic;
  private final List<String> queues = new ArrayList<>();
  private final List<String> exchanges = new ArrayList<>();

  Names(String topic) {
    this.topic = topic;
  }

  String queue() {
    return track(queues, Amqp.unique(topic + ".q"));
  }

  String exchange() {
    return track(exchanges, Amqp.unique(topic + ".x"));
  }

  /** Tracks a name the broker chose (or one the test built itself) for deletion. */
  String trackQueue(String name) {
    return track(queues, name);
  }

  String trackExchange(String name) {
    return track(exchanges, name);
  }

  private static String track(List<String> list, String name) {
    list.add(name);
    return name;
  }

  /** Deletes everything handed out; a name that is already gone is fine. */
  void deleteAll() throws Exception {
    if (queues.isEmpty() && exchanges.isEmpty()) return;
    Connection conn = Amqp.connect();
    try {
      for (String q : queues) delete(conn, ch -> ch.queueDelete(q));
      for (String x : exchanges) delete(conn, ch -> ch.exchangeDelete(x));
    } finally {
      Amqp.closeQuietly(conn);
    }
  }

  private interface Deletion {
    void apply(Channel ch) throws Exception;
  }

  /** One channel per deletion, so one refused deletion cannot stop the others. */
  private static void delete(Connection conn, Deletion deletion) {
    try {
      Channel ch = conn.createChannel();
      deletion.apply(ch);
      ch.close();
    } catch (Exception ignored) {
      // already gone, or its channel was closed: nothing left to clean
    }
  }
}
