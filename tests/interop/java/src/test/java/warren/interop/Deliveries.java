package warren.interop;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Delivery;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/** A consumer that collects its deliveries so a test can take them in order. */
final class Deliveries {
  final String consumerTag;
  private final BlockingQueue<Delivery> received = new LinkedBlockingQueue<>();

  private Deliveries(Channel ch, String queue, boolean autoAck, Map<String, Object> args)
      throws Exception {
    consumerTag =
        ch.basicConsume(queue, autoAck, args, (tag, d) -> received.add(d), tag -> {});
  }

  static Deliveries consume(Channel ch, String queue, boolean autoAck) throws Exception {
    return new Deliveries(ch, queue, autoAck, Map.of());
  }

  static Deliveries consume(
      Channel ch, String queue, boolean autoAck, Map<String, Object> arguments) throws Exception {
    return new Deliveries(ch, queue, autoAck, arguments);
  }

  /** The next delivery; fails if none comes within the timeout. */
  Delivery next() throws InterruptedException {
    Delivery d = received.poll(Amqp.TIMEOUT_MS, TimeUnit.MILLISECONDS);
    assertNotNull(d, "no delivery within " + Amqp.TIMEOUT_MS + " ms");
    return d;
  }

  /** The next {@code n} deliveries, in order. */
  List<Delivery> next(int n) throws InterruptedException {
    List<Delivery> out = new ArrayList<>();
    for (int i = 0; i < n; i++) out.add(next());
    return out;
  }

  /** Fails if anything is delivered within {@code ms}. */
  void assertNoneWithin(long ms) throws InterruptedException {
    Delivery d = received.poll(ms, TimeUnit.MILLISECONDS);
    assertNull(d, () -> "unexpected delivery " + Amqp.text(d.getBody()));
  }

  /** Everything delivered so far, without waiting. */
  List<Delivery> takeAll() {
    List<Delivery> out = new ArrayList<>();
    received.drainTo(out);
    return out;
  }
}
