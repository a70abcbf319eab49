package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.AuthenticationFailureException;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.LongString;
import com.rabbitmq.client.PossibleAuthenticationFailureException;
import com.rabbitmq.client.SaslMechanism;
import com.rabbitmq.client.impl.LongStringHelper;
import com.rabbitmq.client.impl.Method;
import java.io.IOException;
import java.net.SocketTimeoutException;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Connection negotiation: authentication failures (403 for a client that advertises
 * authentication_failure_close, as the Java client does; a dropped socket otherwise), the
 * PLAIN responses RabbitMQ refuses, the 4096-byte frame limit before tune-ok and the
 * heartbeat frame that must be empty.
 */
class ConnectionNegotiationTest {
  private static final String LOGIN_REFUSED =
      "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see"
          + " the broker logfile.";

  /** A PLAIN mechanism that sends {@code response} as is. */
  private static ConnectionFactory plainResponse(String response) {
    ConnectionFactory f = Amqp.factory();
    f.setSaslConfig(mechanisms -> new SaslMechanism() {
      @Override
      public String getName() {
        return "PLAIN";
      }

      @Override
      public LongString handleChallenge(LongString challenge, String user, String password) {
        return LongStringHelper.asLongString(response);
      }
    });
    return f;
  }

  @Test
  void aWrongPasswordIs403WithRabbitMqsText() {
    ConnectionFactory f = Amqp.factory();
    f.setPassword("not-" + Amqp.password());
    AuthenticationFailureException e =
        assertThrows(AuthenticationFailureException.class, f::newConnection);
    assertEquals(LOGIN_REFUSED, e.getMessage());
  }

  @Test
  void anEmptyPasswordIsRefused() {
    ConnectionFactory f = Amqp.factory();
    f.setPassword("");
    AuthenticationFailureException e =
        assertThrows(AuthenticationFailureException.class, f::newConnection);
    assertEquals(LOGIN_REFUSED, e.getMessage());
  }

  @Test
  void theCorrectPlainResponseIsAccepted() throws Exception {
    Amqp.closeQuietly(
        plainResponse("\0" + Amqp.user() + "\0" + Amqp.password()).newConnection());
  }

  /**
   * RabbitMQ's PLAIN takes no authzid: the response is a syntax error and the socket is
   * dropped (after its 3 s silent-close delay), which the client reports as a possible
   * authentication failure.
   */
  @Test
  void aPlainAuthzidOtherThanTheUserIsRefused() {
    ConnectionFactory f =
        plainResponse("someone-else\0" + Amqp.user() + "\0" + Amqp.password());
    assertThrows(PossibleAuthenticationFailureException.class, f::newConnection);
  }

  @Test
  void trailingDataAfterThePlainPasswordIsRefused() {
    ConnectionFactory f =
        plainResponse("\0" + Amqp.user() + "\0" + Amqp.password() + "\0extra");
    assertThrows(PossibleAuthenticationFailureException.class, f::newConnection);
  }

  @Test
  void withoutTheCapabilityAnAuthenticationFailureDropsTheSocket() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.start();
      raw.send(0, RawAmqp.startOk(RawAmqp.clientProperties(false),
          RawAmqp.plain(Amqp.user(), "not-" + Amqp.password())));

      IOException end = assertThrows(IOException.class, raw::readFrame,
          "expected the socket to be closed without a connection.close");
      assertTrue(!(end instanceof SocketTimeoutException), "the broker kept the socket: " + end);
    }
  }

  @Test
  void withTheCapabilityAnAuthenticationFailureIsAClose403() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.start();
      raw.send(0, RawAmqp.startOk(RawAmqp.clientProperties(true),
          RawAmqp.plain(Amqp.user(), "not-" + Amqp.password())));

      Amqp.assertClose(403, LOGIN_REFUSED, raw.expect(AMQP.Connection.Close.class));
    }
  }

  /**
   * Before tune-ok the frame limit is 4096 bytes: a bigger start-ok is a frame error. The
   * broker never tunes; it may say connection.close 501 first, then closes the socket
   * (RabbitMQ says nothing and resets the socket after its 3 s silent-close delay).
   */
  @Test
  void aFrameOver4096BytesBeforeTuneOkIsAFrameError() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.start();
      Map<String, Object> props = RawAmqp.clientProperties(true);
      props.put("padding", "x".repeat(5000));
      raw.send(0, RawAmqp.startOk(props, RawAmqp.plain(Amqp.user(), Amqp.password())));

      Method reply;
      try {
        reply = raw.readMethod();
      } catch (SocketTimeoutException kept) {
        throw new AssertionError("the broker neither tuned nor closed the connection", kept);
      } catch (IOException closedWithoutAWord) {
        return;
      }
      assertInstanceOf(AMQP.Connection.Close.class, reply, "instead of tune");
      AMQP.Connection.Close close = (AMQP.Connection.Close) reply;
      assertEquals(501, close.getReplyCode(), close.getReplyText());
      assertTrue(close.getReplyText().startsWith("FRAME_ERROR"), close.getReplyText());
    }
  }

  /** A whole frame of exactly 4096 bytes (header and frame-end included) is fine. */
  @Test
  void aFrameOf4096BytesBeforeTuneOkIsAccepted() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.start();
      Map<String, Object> props = RawAmqp.clientProperties(true);
      LongString response = RawAmqp.plain(Amqp.user(), Amqp.password());
      props.put("padding", "");
      int unpadded = RawAmqp.encode(0, RawAmqp.startOk(props, response)).length;
      props.put("padding", "x".repeat(4096 - unpadded));
      byte[] frame = RawAmqp.encode(0, RawAmqp.startOk(props, response));
      assertEquals(4096, frame.length);

      raw.sendTogether(frame);

      raw.expect(AMQP.Connection.Tune.class);
    }
  }

  @Test
  void aHeartbeatFrameWithAPayloadIs501() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.open();

      raw.sendTogether(RawAmqp.frame(AMQP.FRAME_HEARTBEAT, 0, new byte[] {1}));

      AMQP.Connection.Close close = raw.expect(AMQP.Connection.Close.class);
      assertEquals(501, close.getReplyCode(), close.getReplyText());
      assertTrue(close.getReplyText().startsWith("FRAME_ERROR"), close.getReplyText());
    }
  }
}
