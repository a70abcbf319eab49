package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.rabbitmq.client.Connection;
import com.rabbitmq.client.LongString;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The server-properties the Java client exposes through Connection.getServerProperties():
 * product, version and platform strings, and RabbitMQ's capability table (consumer priorities
 * included).
 */
class ServerPropertiesTest extends BrokerTest {

  private static final List<String> CAPABILITIES = List.of(
      "publisher_confirms", "exchange_exchange_bindings", "basic.nack",
      "consumer_cancel_notify", "connection.blocked", "consumer_priorities",
      "authentication_failure_close", "per_consumer_qos", "direct_reply_to");

  @Test
  void productVersionAndPlatformAreStrings() {
    Map<String, Object> props = conn.getServerProperties();
    for (String key : List.of("product", "version", "platform")) {
      Object v = props.get(key);
      assertInstanceOf(LongString.class, v, key + " in " + props);
      assertFalse(v.toString().isBlank(), key);
    }
  }

  @Test
  void capabilitiesAdvertiseWhatRabbitMqAdvertises() {
    @SuppressWarnings("unchecked")
    Map<String, Object> caps = (Map<String, Object>) conn.getServerProperties().get("capabilities");
    for (String c : CAPABILITIES) assertEquals(Boolean.TRUE, caps.get(c), c + " in " + caps);
  }

  /**
   * Configured server properties (Warren's --server-property, RabbitMQ's server_properties)
   * replace the broker's own; the capabilities stay. Starts a Warren of its own (WARREN_BIN).
   */
  @Test
  void configuredPropertiesReplaceTheBrokersOwnAndKeepTheCapabilities() throws Exception {
    assumeTrue(OwnWarren.binary() != null, "needs WARREN_BIN to start a configured Warren");
    try (OwnWarren configured = new OwnWarren("--bind", "127.0.0.1",
        "--server-property", "product=AcmeMQ", "--server-property", "version=9.9.9",
        "--server-property", "cluster_name=acme")) {
      Connection c = configured.factory().newConnection();
      try {
        Map<String, Object> props = c.getServerProperties();
        assertEquals("AcmeMQ", props.get("product").toString());
        assertEquals("9.9.9", props.get("version").toString());
        assertEquals("acme", props.get("cluster_name").toString());
        assertFalse(props.get("platform").toString().isBlank(), "unconfigured ones stay");
        @SuppressWarnings("unchecked")
        Map<String, Object> caps = (Map<String, Object>) props.get("capabilities");
        for (String cap : CAPABILITIES) assertEquals(Boolean.TRUE, caps.get(cap), cap);
      } finally {
        Amqp.closeQuietly(c);
      }
    }
  }
}
