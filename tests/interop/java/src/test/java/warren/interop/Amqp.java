package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.ShutdownSignalException;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * The broker under test and the small things every test does with it: connect, make unique
 * names, expect a channel or connection error, read a queue.
 *
 * <p>The broker is named by env AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F); the
 * Java client takes the vhost from the URI path, so "/%2F" is the default vhost "/".
 */
final class Amqp {
  static final String URL =
      System.getenv().getOrDefault("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F");

  /** How long a test waits for something the broker should do at once. */
  static final int TIMEOUT_MS = 5_000;

  private Amqp() {}

  static ConnectionFactory factory() {
    ConnectionFactory f = new ConnectionFactory();
    try {
      f.setUri(URL);
    } catch (Exception e) {
      throw new IllegalArgumentException("bad AMQP_URL " + URL, e);
    }
    f.setAutomaticRecoveryEnabled(false);
    f.setTopologyRecoveryEnabled(false);
    f.setConnectionTimeout(TIMEOUT_MS);
    f.setHandshakeTimeout(TIMEOUT_MS * 2);
    f.setShutdownTimeout(TIMEOUT_MS);
    // A broker that never answers fails the test instead of hanging the suite.
    f.setChannelRpcTimeout(TIMEOUT_MS * 2);
    return f;
  }

  static Connection connect() throws Exception {
    return factory().newConnection("warren-interop-java");
  }

  /** The user, password and vhost of AMQP_URL, as the Java client reads them. */
  static String user() {
    return factory().getUsername();
  }

  static String password() {
    return factory().getPassword();
  }

  static String vhost() {
    return factory().getVirtualHost();
  }

  static String host() {
    return URI.create(URL).getHost();
  }

  static int port() {
    int p = URI.create(URL).getPort();
    return p == -1 ? 5672 : p;
  }

  static String unique(String topic) {
    return "interop.java." + topic + "." + UUID.randomUUID().toString().substring(0, 12);
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static String text(byte[] body) {
    return new String(body, StandardCharsets.UTF_8);
  }

  /** A header array (the client decodes strings as LongString) as Java strings. */
  static List<String> strings(Object headerArray) {
    List<String> out = new ArrayList<>();
    for (Object o : (List<?>) headerArray) out.add(o.toString());
    return out;
  }

  static void closeQuietly(Connection c) {
    if (c == null) return;
    try {
      if (c.isOpen()) c.close(TIMEOUT_MS);
    } catch (Exception ignored) {
      // cleanup only: the test has already passed or failed
    }
  }

  /** An operation that may throw, for {@link #channelError} and {@link #connectionError}. */
  @FunctionalInterface
  interface Op {
    void run() throws Exception;
  }

  /**
   * Runs {@code op}, which must fail with a channel close, and returns that close (reply code
   * and text as the broker sent them).
   */
  static AMQP.Channel.Close channelError(Op op) {
    ShutdownSignalException sse = shutdownOf(op);
    assertFalse(sse.isHardError(), "expected a channel error, got a connection error: " + sse);
    return (AMQP.Channel.Close) sse.getReason();
  }

  /** Runs {@code op}, which must fail with a connection close, and returns that close. */
  static AMQP.Connection.Close connectionError(Op op) {
    ShutdownSignalException sse = shutdownOf(op);
    assertTrue(sse.isHardError(), "expected a connection error, got a channel error: " + sse);
    return (AMQP.Connection.Close) sse.getReason();
  }

  private static ShutdownSignalException shutdownOf(Op op) {
    try {
      op.run();
    } catch (Throwable t) {
      for (Throwable c = t; c != null; c = c.getCause()) {
        if (c instanceof ShutdownSignalException sse && sse.getReason() != null) return sse;
      }
      throw new AssertionError("expected the broker to close the channel, got " + t, t);
    }
    return fail("expected the broker to close the channel, but the operation succeeded");
  }

  /** Waits for the broker to close {@code ch} (after an asynchronous method such as publish). */
  static AMQP.Channel.Close awaitChannelClose(Channel ch) throws Exception {
    CompletableFuture<ShutdownSignalException> closed = new CompletableFuture<>();
    ch.addShutdownListener(closed::complete);
    if (!ch.isOpen()) closed.complete(ch.getCloseReason());
    ShutdownSignalException sse = closed.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    assertFalse(sse.isHardError(), "expected a channel error, got a connection error: " + sse);
    return (AMQP.Channel.Close) sse.getReason();
  }

  /**
   * A reply text as RabbitMQ sends it: a shortstr, so a text over 255 bytes is cut to 252 and
   * ends in "..." (rabbit_binary_generator:amqp_exception_explanation).
   */
  static String replyText(String full) {
    byte[] b = utf8(full);
    if (b.length <= 255) return full;
    return new String(b, 0, 252, StandardCharsets.UTF_8) + "...";
  }

  static void assertClose(int code, String text, AMQP.Channel.Close close) {
    assertEquals(code, close.getReplyCode(), () -> "reply code; text was: " + close.getReplyText());
    assertEquals(replyText(text), close.getReplyText());
  }

  static void assertClose(int code, String text, AMQP.Connection.Close close) {
    assertEquals(code, close.getReplyCode(), () -> "reply code; text was: " + close.getReplyText());
    assertEquals(replyText(text), close.getReplyText());
  }

  /** The number of ready messages in {@code queue}, asked on a channel of its own. */
  static int messageCount(Connection conn, String queue) throws Exception {
    Channel probe = conn.createChannel();
    try {
      return probe.queueDeclarePassive(queue).getMessageCount();
    } finally {
      if (probe.isOpen()) probe.close();
    }
  }

  /** True if {@code queue} exists (passive declare on a channel of its own). */
  static boolean queueExists(Connection conn, String queue) throws Exception {
    return exists(conn, probe -> probe.queueDeclarePassive(queue));
  }

  /** True if {@code exchange} exists (passive declare on a channel of its own). */
  static boolean exchangeExists(Connection conn, String exchange) throws Exception {
    return exists(conn, probe -> probe.exchangeDeclarePassive(exchange));
  }

  private interface PassiveDeclare {
    void apply(Channel probe) throws Exception;
  }

  private static boolean exists(Connection conn, PassiveDeclare declare) throws Exception {
    Channel probe = conn.createChannel();
    AMQP.Channel.Close close;
    try {
      declare.apply(probe);
      probe.close();
      return true;
    } catch (IOException e) {
      close = (AMQP.Channel.Close) ((ShutdownSignalException) e.getCause()).getReason();
    }
    assertEquals(404, close.getReplyCode(), close.getReplyText());
    return false;
  }

  /** Takes every ready message off {@code queue} with basic.get (auto-ack), in order. */
  static List<String> drain(Channel ch, String queue) throws Exception {
    List<String> bodies = new ArrayList<>();
    for (GetResponse r; (r = ch.basicGet(queue, true)) != null; ) bodies.add(text(r.getBody()));
    return bodies;
  }

  static void publish(Channel ch, String exchange, String routingKey, String body)
      throws Exception {
    ch.basicPublish(exchange, routingKey, null, utf8(body));
  }

  /** Polls {@code condition} until it holds or the timeout passes; returns its last value. */
  static boolean eventually(BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(TIMEOUT_MS);
    while (System.nanoTime() < deadline) {
      if (condition.getAsBoolean()) return true;
      Thread.sleep(20);
    }
    return condition.getAsBoolean();
  }

  /** Waits until {@code queue} holds exactly {@code count} ready messages, or fails. */
  static void awaitMessageCount(Connection conn, String queue, int count) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(TIMEOUT_MS);
    int last;
    while ((last = messageCount(conn, queue)) != count && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
    assertEquals(count, last, "ready messages in " + queue);
  }
}
