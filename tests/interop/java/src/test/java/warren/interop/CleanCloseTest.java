package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.impl.AMQImpl;
import com.rabbitmq.client.impl.DefaultExceptionHandler;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/**
 * Clean close: after close-ok, sent or received, the broker lets the client's remaining bytes
 * drain and ends the TCP connection with a FIN, so no client sees a reset or EPIPE; frames
 * that arrive in the same segment as connection.open are processed at once.
 *
 * <p>The three FIN tests fail against RabbitMQ (3.10.8, and 3.13/4.x alike): its default
 * tcp_listen_options set {linger, {true, 0}}, so it ends every connection with a reset; the
 * Java client then reports "Connection reset" after a broker-initiated close. The issue asks
 * Warren to do better here.
 */
class CleanCloseTest {

  /** Records what the Java client's I/O loop reports as unexpected (a reset would land here). */
  private static final class Recorder extends DefaultExceptionHandler {
    final List<Throwable> driverErrors = new CopyOnWriteArrayList<>();

    @Override
    public void handleUnexpectedConnectionDriverException(Connection conn, Throwable e) {
      driverErrors.add(e);
    }
  }

  @Test
  void aClientCloseEndsWithoutAnIoError() throws Exception {
    Recorder recorder = new Recorder();
    ConnectionFactory f = Amqp.factory();
    f.setExceptionHandler(recorder);
    Connection conn = f.newConnection();
    Channel ch = conn.createChannel();
    String q = ch.queueDeclare().getQueue();
    Amqp.publish(ch, "", q, "m");
    ch.basicGet(q, false);

    conn.close();

    Thread.sleep(200);
    assertEquals(List.of(), recorder.driverErrors);
    assertTrue(conn.getCloseReason().isInitiatedByApplication());
    assertEquals(200, ((AMQP.Connection.Close) conn.getCloseReason().getReason()).getReplyCode());
  }

  @Test
  void aBrokerCloseEndsWithoutAnIoErrorOnTheClient() throws Exception {
    Recorder recorder = new Recorder();
    ConnectionFactory f = Amqp.factory();
    f.setExceptionHandler(recorder);
    Connection conn = f.newConnection();
    Channel ch = conn.createChannel();

    AMQP.Connection.Close close = Amqp.connectionError(
        () -> ch.exchangeDeclare(Amqp.unique("clean"), "no-such-type"));

    assertEquals(503, close.getReplyCode(), close.getReplyText());
    Thread.sleep(300);
    assertFalse(conn.isOpen());
    assertEquals(List.of(), recorder.driverErrors, "the client saw a reset or broken pipe");
  }

  @Test
  void bytesSentRightAfterConnectionCloseAreDrainedAndTheSocketEndsWithAFin() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.open();

      raw.sendTogether(
          RawAmqp.encode(0, new AMQImpl.Connection.Close(200, "bye", 0, 0)),
          RawAmqp.heartbeat(), RawAmqp.heartbeat(), RawAmqp.heartbeat());
      raw.expect(AMQP.Connection.CloseOk.class);
      raw.sendTogether(RawAmqp.heartbeat());
      raw.shutdownOutput();

      assertNull(raw.readUntilClosed(), "expected EOF, not a reset");
    }
  }

  @Test
  void afterABrokerCloseTheClientsCloseOkAndLaterBytesEndInAFin() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.open();
      // channel 1 opened twice is a connection error (504 CHANNEL_ERROR)
      raw.sendTogether(
          RawAmqp.encode(1, new AMQImpl.Channel.Open("")),
          RawAmqp.encode(1, new AMQImpl.Channel.Open("")));
      raw.expect(AMQP.Channel.OpenOk.class);
      AMQP.Connection.Close close = raw.expect(AMQP.Connection.Close.class);
      assertEquals(504, close.getReplyCode(), close.getReplyText());

      raw.sendTogether(RawAmqp.encode(0, new AMQImpl.Connection.CloseOk()),
          RawAmqp.heartbeat(), RawAmqp.heartbeat());
      Thread.sleep(100);
      raw.shutdownOutput();

      assertNull(raw.readUntilClosed(), "expected EOF, not a reset");
    }
  }

  @Test
  void framesInTheSameSegmentAsConnectionOpenAreProcessedAtOnce() throws Exception {
    try (RawAmqp raw = new RawAmqp()) {
      raw.start();
      raw.send(0, RawAmqp.startOk(RawAmqp.clientProperties(true),
          RawAmqp.plain(Amqp.user(), Amqp.password())));
      AMQP.Connection.Tune tune = raw.expect(AMQP.Connection.Tune.class);
      raw.socket.setSoTimeout(1_000);
      AMQImpl.Connection.TuneOk tuneOk =
          new AMQImpl.Connection.TuneOk(tune.getChannelMax(), tune.getFrameMax(), 0);
      AMQImpl.Queue.Declare serverNamedExclusiveDeclare =
          new AMQImpl.Queue.Declare(0, "", false, false, true, true, false, null);

      raw.sendTogether(
          RawAmqp.encode(0, tuneOk),
          RawAmqp.encode(0, new AMQImpl.Connection.Open(Amqp.vhost(), "", false)),
          RawAmqp.encode(1, new AMQImpl.Channel.Open("")),
          RawAmqp.encode(1, serverNamedExclusiveDeclare));
      // a broker that only looks at buffered frames on its next read would wait here

      raw.expect(AMQP.Connection.OpenOk.class);
      raw.expect(AMQP.Channel.OpenOk.class);
      assertTrue(raw.expect(AMQP.Queue.DeclareOk.class).getQueue().startsWith("amq.gen-"));
    }
  }
}
