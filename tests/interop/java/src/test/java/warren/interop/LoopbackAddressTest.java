package warren.interop;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.Address;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import java.net.ConnectException;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * guest is loopback-only, and loopback means IPv4 127.0.0.0/8, IPv6 ::1 and the IPv4-mapped
 * ::ffff:127.0.0.1 that a dual-stack listener reports for an IPv4 client. The default
 * listener is dual-stack, so one port answers on both families.
 *
 * <p>The broker must be on its default listener: with WARREN_BIN set these tests start a
 * Warren of their own without --bind (test.sh starts its broker with --bind 127.0.0.1);
 * otherwise they use the broker at AMQP_URL (RabbitMQ listens on [::] and 0.0.0.0).
 */
class LoopbackAddressTest {
  private static OwnWarren own;
  private static ConnectionFactory guest;

  @BeforeAll
  static void brokerOnItsDefaultListener() throws Exception {
    if (OwnWarren.binary() != null) {
      own = new OwnWarren();
      guest = own.factory();
    } else {
      guest = Amqp.factory();
      guest.setUsername("guest");
      guest.setPassword("guest");
    }
  }

  @AfterAll
  static void stopOwnBroker() throws Exception {
    if (own != null) own.close();
  }

  private static void connectAsGuestVia(String host) throws Exception {
    Connection c;
    try {
      c = guest.newConnection(List.of(new Address(host, guest.getPort())));
    } catch (ConnectException e) {
      throw new AssertionError("nothing listens on [" + host + "]:" + guest.getPort()
          + "; is the broker on its default listener? (set WARREN_BIN to test a Warren of"
          + " this suite's own)", e);
    }
    try {
      assertTrue(c.createChannel().isOpen());
    } finally {
      Amqp.closeQuietly(c);
    }
  }

  @Test
  void guestConnectsOverIpv6Loopback() throws Exception {
    connectAsGuestVia("::1");
  }

  /** Through a dual-stack listener the broker sees this peer as ::ffff:127.0.0.1. */
  @Test
  void guestConnectsOverIpv4Loopback() throws Exception {
    connectAsGuestVia("127.0.0.1");
  }

  /** Java turns this literal into an IPv4 address; the broker sees what it sees above. */
  @Test
  void guestConnectsViaTheIpv4MappedLoopbackLiteral() throws Exception {
    connectAsGuestVia("::ffff:127.0.0.1");
  }
}
