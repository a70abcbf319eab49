package warren.interop;

import static org.junit.jupiter.api.Assertions.fail;

import com.rabbitmq.client.ConnectionFactory;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A Warren broker of the test's own, for what depends on how the broker was started (its
 * default listener, configured server properties). Needs the binary in env WARREN_BIN, which
 * test.sh sets; tests skip themselves without it (see {@link #binary()}).
 */
final class OwnWarren implements AutoCloseable {
  final int port;
  private final Path dir;
  private final Process process;

  /** The broker binary, or null when WARREN_BIN is not set. */
  static String binary() {
    return System.getenv("WARREN_BIN");
  }

  /** Starts {@code warren server} on a free port with {@code args} added, and waits for it. */
  OwnWarren(String... args) throws Exception {
    port = freePort();
    dir = Files.createTempDirectory("warren-interop-java-");
    List<String> cmd = new ArrayList<>(List.of(binary(), "server", "--amqp-port",
        String.valueOf(port), "--management-port", "0", "--prometheus-port", "0",
        "--management-tls-port", "0", "--prometheus-tls-port", "0",
        "--data-dir", dir.resolve("data").toString()));
    cmd.addAll(List.of(args));
    process = new ProcessBuilder(cmd).redirectErrorStream(true)
        .redirectOutput(dir.resolve("warren.log").toFile()).start();
    awaitListening();
  }

  private static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  private void awaitListening() throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (true) {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
        return;
      } catch (IOException notYet) {
        if (!process.isAlive() || System.nanoTime() > deadline) {
          fail("Warren did not start: " + Files.readString(dir.resolve("warren.log")));
        }
        Thread.sleep(50);
      }
    }
  }

  /** A factory for guest on this broker, with the suite's timeouts. */
  ConnectionFactory factory() {
    ConnectionFactory f = Amqp.factory();
    f.setHost("127.0.0.1");
    f.setPort(port);
    f.setUsername("guest");
    f.setPassword("guest");
    f.setVirtualHost("/");
    return f;
  }

  @Override
  public void close() throws Exception {
    process.destroy();
    if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly().waitFor();
    try (Stream<Path> files = Files.walk(dir)) {
      for (Path p : files.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
    }
  }
}
