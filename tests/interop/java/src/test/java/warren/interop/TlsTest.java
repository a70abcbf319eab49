package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultSaslConfig;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.PossibleAuthenticationFailureException;
import java.io.InputStream;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * AMQPS with RabbitMQ's Java client: useSslProtocol with the test CA, and SASL EXTERNAL with a
 * client certificate logging in as the certificate's common name. Starts Warrens of its own
 * (WARREN_BIN) with certificates made by ../py/tls_certs.py (openssl).
 */
class TlsTest {
  @TempDir static Path certs;

  @BeforeAll
  static void makeCertificates() throws Exception {
    assumeTrue(OwnWarren.binary() != null, "needs WARREN_BIN to start Warrens with TLS");
    Process p = new ProcessBuilder("python3", "../py/tls_certs.py", certs.toString())
        .inheritIO().start();
    assertEquals(0, p.waitFor(), "tls_certs.py");
  }

  private static int freePort() throws Exception {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  private static Certificate certificate(String name) throws Exception {
    try (InputStream in = Files.newInputStream(certs.resolve(name))) {
      return CertificateFactory.getInstance("X.509").generateCertificate(in);
    }
  }

  private static PrivateKey key(String name) throws Exception {
    String pem = Files.readString(certs.resolve(name), StandardCharsets.US_ASCII)
        .replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
    return KeyFactory.getInstance("EC")
        .generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem)));
  }

  /** Trusts the test CA; presents the client certificate when {@code withClientCert}. */
  private static SSLContext context(boolean withClientCert) throws Exception {
    KeyStore trust = KeyStore.getInstance("PKCS12");
    trust.load(null, null);
    trust.setCertificateEntry("ca", certificate("ca.pem"));
    TrustManagerFactory tmf =
        TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    tmf.init(trust);
    KeyManagerFactory kmf = null;
    if (withClientCert) {
      KeyStore keys = KeyStore.getInstance("PKCS12");
      keys.load(null, null);
      keys.setKeyEntry("client", key("client.key"), new char[0],
          new Certificate[] {certificate("client.pem")});
      kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
      kmf.init(keys, new char[0]);
    }
    SSLContext ctx = SSLContext.getInstance("TLS");
    ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
    return ctx;
  }

  private static OwnWarren warren(int amqpsPort, String... args) throws Exception {
    String[] all = new String[args.length + 8];
    String[] tls = {"--bind", "127.0.0.1", "--amqps-port", String.valueOf(amqpsPort),
        "--tls-cert-file", certs.resolve("server.pem").toString(),
        "--tls-key-file", certs.resolve("server.key").toString()};
    System.arraycopy(tls, 0, all, 0, tls.length);
    System.arraycopy(args, 0, all, tls.length, args.length);
    return new OwnWarren(all);
  }

  private static void roundTrip(Connection c) throws Exception {
    Channel ch = c.createChannel();
    String q = ch.queueDeclare().getQueue();
    ch.basicPublish("", q, null, "over tls".getBytes(StandardCharsets.UTF_8));
    GetResponse got = null;
    for (int i = 0; i < 50 && got == null; i++) {
      got = ch.basicGet(q, true);
      if (got == null) Thread.sleep(50);
    }
    assertEquals("over tls", new String(got.getBody(), StandardCharsets.UTF_8));
  }

  @Test
  void publishesAndGetsOverTlsWithAPassword() throws Exception {
    int amqpsPort = freePort();
    try (OwnWarren w = warren(amqpsPort)) {
      ConnectionFactory f = w.factory();
      f.setPort(amqpsPort);
      f.useSslProtocol(context(false));
      f.enableHostnameVerification();
      f.setHost("localhost");
      try (Connection c = f.newConnection()) {
        roundTrip(c);
      }
    }
  }

  @Test
  void externalLogsInAsTheCertificatesCommonName() throws Exception {
    int amqpsPort = freePort();
    try (OwnWarren w = warren(amqpsPort, "--tls-verify-peer",
        "--tls-ca-file", certs.resolve("ca.pem").toString(),
        "--tls-cert-login-from", "common_name", "--user", "tls-client:unused-password")) {
      ConnectionFactory f = w.factory();
      f.setPort(amqpsPort);
      f.useSslProtocol(context(true));
      f.setSaslConfig(DefaultSaslConfig.EXTERNAL);
      try (Connection c = f.newConnection()) {
        roundTrip(c);
      }
      // Without a certificate EXTERNAL is not offered: the login fails.
      f.useSslProtocol(context(false));
      assertThrows(Exception.class, f::newConnection);
    }
  }

  @Test
  void externalForAUserThatDoesNotExistIsRefused() throws Exception {
    int amqpsPort = freePort();
    try (OwnWarren w = warren(amqpsPort, "--tls-verify-peer",
        "--tls-ca-file", certs.resolve("ca.pem").toString())) {
      ConnectionFactory f = w.factory();
      f.setPort(amqpsPort);
      f.useSslProtocol(context(true));
      f.setSaslConfig(DefaultSaslConfig.EXTERNAL);
      assertThrows(PossibleAuthenticationFailureException.class, f::newConnection);
    }
  }
}
