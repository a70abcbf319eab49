package warren.interop;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

/**
 * Base of the tests that talk to the broker through the Java client: one connection and one
 * channel per test, unique names from {@link #names}, everything closed and deleted after the
 * test. (src/test/resources/junit-platform.properties gives every test 30 s at most.)
 */
abstract class BrokerTest {
  protected Connection conn;
  protected Channel ch;
  protected final Names names = new Names(getClass().getSimpleName());

  @BeforeEach
  void openConnection() throws Exception {
    conn = Amqp.connect();
    ch = conn.createChannel();
  }

  /** A new queue (not durable, not exclusive) with a unique name, deleted after the test. */
  protected String declareQueue() throws Exception {
    return declareQueue(null);
  }

  protected String declareQueue(Map<String, Object> arguments) throws Exception {
    String q = names.queue();
    ch.queueDeclare(q, false, false, false, arguments);
    return q;
  }

  /** A new non-durable exchange of {@code type} with a unique name, deleted after the test. */
  protected String declareExchange(String type) throws Exception {
    return declareExchange(type, false);
  }

  protected String declareExchange(String type, boolean autoDelete) throws Exception {
    String x = names.exchange();
    ch.exchangeDeclare(x, type, false, autoDelete, null);
    return x;
  }

  @AfterEach
  void closeAndCleanUp() throws Exception {
    Amqp.closeQuietly(conn);
    names.deleteAll();
  }
}
