package warren.interop;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.LongString;
import com.rabbitmq.client.impl.AMQImpl;
import com.rabbitmq.client.impl.Frame;
import com.rabbitmq.client.impl.LongStringHelper;
import com.rabbitmq.client.impl.Method;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

/**
 * A hand-driven AMQP 0-9-1 connection over a plain socket, for what the Java client will not
 * send on its own (an oversized pre-tune frame, a heartbeat with a payload, a start-ok without
 * capabilities, frames pipelined behind connection.open or connection.close). Frames and
 * methods are encoded and decoded by the Java client's own codec (com.rabbitmq.client.impl).
 */
final class RawAmqp implements AutoCloseable {
  static final byte[] PROTOCOL_HEADER = {'A', 'M', 'Q', 'P', 0, 0, 9, 1};

  final Socket socket;
  private final DataInputStream in;
  private final DataOutputStream out;

  RawAmqp() throws IOException {
    socket = new Socket();
    socket.connect(new InetSocketAddress(Amqp.host(), Amqp.port()), Amqp.TIMEOUT_MS);
    socket.setSoTimeout(Amqp.TIMEOUT_MS);
    socket.setTcpNoDelay(true);
    in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
    out = new DataOutputStream(socket.getOutputStream());
  }

  /** Client properties as the Java client sends them, with or without capabilities. */
  static Map<String, Object> clientProperties(boolean authenticationFailureClose) {
    Map<String, Object> props = new HashMap<>();
    props.put("product", "warren-interop-java raw");
    if (authenticationFailureClose) {
      props.put("capabilities", Map.of("authentication_failure_close", true));
    }
    return props;
  }

  static LongString plain(String user, String password) {
    return LongStringHelper.asLongString("\0" + user + "\0" + password);
  }

  static Method startOk(Map<String, Object> clientProperties, LongString response) {
    return new AMQImpl.Connection.StartOk(clientProperties, "PLAIN", response, "en_US");
  }

  /** The bytes of one method frame, so several can go out in a single write. */
  static byte[] encode(int channel, Method method) throws IOException {
    return encode(method.toFrame(channel));
  }

  static byte[] encode(Frame frame) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    frame.writeTo(new DataOutputStream(bytes));
    return bytes.toByteArray();
  }

  /** A frame built byte by byte: type, channel, size, payload, frame-end. */
  static byte[] frame(int type, int channel, byte[] payload) {
    ByteBuffer b = ByteBuffer.allocate(8 + payload.length);
    b.put((byte) type).putShort((short) channel).putInt(payload.length).put(payload);
    b.put((byte) AMQP.FRAME_END);
    return b.array();
  }

  static byte[] heartbeat() {
    return frame(AMQP.FRAME_HEARTBEAT, 0, new byte[0]);
  }

  /** Writes all {@code chunks} with one write call (one TCP segment when small). */
  void sendTogether(byte[]... chunks) throws IOException {
    ByteArrayOutputStream all = new ByteArrayOutputStream();
    for (byte[] c : chunks) all.write(c);
    out.write(all.toByteArray());
    out.flush();
  }

  void send(int channel, Method method) throws IOException {
    sendTogether(encode(channel, method));
  }

  /**
   * The next frame; EOFException when the broker has closed the socket, SocketTimeoutException
   * when nothing came within the socket timeout.
   */
  Frame readFrame() throws IOException {
    Frame f = Frame.readFrom(in, () -> Integer.MAX_VALUE);
    // The client's codec reports a read timeout as null (its heartbeat logic wants that).
    if (f == null) {
      throw new SocketTimeoutException("no frame within " + socket.getSoTimeout() + " ms");
    }
    return f;
  }

  /** The next method, skipping heartbeats. */
  Method readMethod() throws IOException {
    while (true) {
      Frame f = readFrame();
      if (f.getType() == AMQP.FRAME_HEARTBEAT) continue;
      if (f.getType() != AMQP.FRAME_METHOD) {
        throw new IOException("expected a method frame, got " + f);
      }
      return AMQImpl.readMethodFrom(f.getInputStream());
    }
  }

  <M> M expect(Class<M> type) throws IOException {
    Method m = readMethod();
    if (!type.isInstance(m)) {
      throw new AssertionError("expected " + type.getSimpleName() + ", got " + m);
    }
    return type.cast(m);
  }

  /** Sends the protocol header and returns the broker's connection.start. */
  AMQP.Connection.Start start() throws IOException {
    out.write(PROTOCOL_HEADER);
    out.flush();
    return expect(AMQP.Connection.Start.class);
  }

  /**
   * The whole handshake as the URL's user, up to open-ok, with no heartbeats; the broker's
   * tune is returned.
   */
  AMQP.Connection.Tune open() throws IOException {
    start();
    send(0, startOk(clientProperties(true), plain(Amqp.user(), Amqp.password())));
    AMQP.Connection.Tune tune = expect(AMQP.Connection.Tune.class);
    send(0, new AMQImpl.Connection.TuneOk(tune.getChannelMax(), tune.getFrameMax(), 0));
    send(0, new AMQImpl.Connection.Open(Amqp.vhost(), "", false));
    expect(AMQP.Connection.OpenOk.class);
    return tune;
  }

  /**
   * Reads until the broker closes the socket and returns what ended the stream: null for a
   * clean EOF (FIN), else the exception (a reset shows up as "Connection reset"). Frames read
   * on the way are ignored.
   */
  IOException readUntilClosed() {
    try {
      while (true) readFrame();
    } catch (EOFException eof) {
      return null;
    } catch (IOException e) {
      return e;
    }
  }

  void shutdownOutput() throws IOException {
    socket.shutdownOutput();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
