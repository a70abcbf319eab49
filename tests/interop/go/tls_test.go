// AMQPS with amqp091-go: DialTLS with the server certificate checked against a test CA, and
// DialTLS_ExternalAuth logging in as the client certificate's user. The test starts a Warren
// of its own (WARREN_BIN) with certificates made here with crypto/x509.
package interop

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type testPKI struct {
	dir       string
	caPool    *x509.CertPool
	clientTLS tls.Certificate
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue makes a certificate for template signed by parent (self-signed when parent is nil).
func issue(t *testing.T, template *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func makePKI(t *testing.T) testPKI {
	dir := t.TempDir()
	ca, caKey := issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Warren Go Test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil, nil)
	server, serverKey := issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, ca, caKey)
	client, clientKey := issue(t, &x509.Certificate{
		Subject:     pkix.Name{Country: []string{"GB"}, Organization: []string{"Warren Tests"}, CommonName: "go-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, ca, caKey)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(dir, "server.pem"), "CERTIFICATE", server.Raw)
	serverKeyDER, _ := x509.MarshalPKCS8PrivateKey(serverKey)
	writePEM(t, filepath.Join(dir, "server.key"), "PRIVATE KEY", serverKeyDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{dir: dir, caPool: pool, clientTLS: tls.Certificate{Certificate: [][]byte{client.Raw}, PrivateKey: clientKey}}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startTLSWarren runs WARREN_BIN with an AMQPS listener and returns its AMQPS port.
func startTLSWarren(t *testing.T, pki testPKI, args ...string) int {
	bin := os.Getenv("WARREN_BIN")
	if bin == "" {
		t.Skip("needs WARREN_BIN: starts a Warren of its own")
	}
	amqpPort, amqpsPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, append([]string{"server", "--bind", "127.0.0.1",
		"--amqp-port", fmt.Sprint(amqpPort), "--amqps-port", fmt.Sprint(amqpsPort),
		"--data-dir", filepath.Join(pki.dir, "data"),
		// No HTTP listeners: their default ports may be taken on a shared machine.
		"--management-port", "0", "--prometheus-port", "0",
		"--management-tls-port", "0", "--prometheus-tls-port", "0",
		"--tls-cert-file", filepath.Join(pki.dir, "server.pem"),
		"--tls-key-file", filepath.Join(pki.dir, "server.key")}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", amqpsPort)); err == nil {
			c.Close()
			return amqpsPort
		}
		if time.Now().After(deadline) {
			t.Fatal("Warren did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func roundTripOver(t *testing.T, c *amqp.Connection) {
	t.Helper()
	ch := channel(t, c)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
	if err := ch.Publish("", q.Name, false, false, amqp.Publishing{Body: []byte("over tls")}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i := 0; i < 50; i++ {
		m, ok, err := ch.Get(q.Name, true)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if ok {
			if string(m.Body) != "over tls" {
				t.Fatalf("got %q", m.Body)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("message not delivered")
}

func TestDialTLSWithPlainLogin(t *testing.T) {
	pki := makePKI(t)
	port := startTLSWarren(t, pki)
	c, err := amqp.DialTLS(fmt.Sprintf("amqps://guest:guest@localhost:%d/", port),
		&tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("DialTLS: %v", err)
	}
	defer c.Close()
	roundTripOver(t, c)
}

func TestDialTLSExternalAuthWithClientCertificate(t *testing.T) {
	pki := makePKI(t)
	port := startTLSWarren(t, pki, "--tls-verify-peer", "--tls-fail-if-no-peer-cert",
		"--tls-ca-file", filepath.Join(pki.dir, "ca.pem"),
		"--tls-cert-login-from", "common_name", "--user", "go-client:unused")
	conf := &tls.Config{RootCAs: pki.caPool, Certificates: []tls.Certificate{pki.clientTLS}, MinVersion: tls.VersionTLS12}
	c, err := amqp.DialTLS_ExternalAuth(fmt.Sprintf("amqps://localhost:%d/", port), conf)
	if err != nil {
		t.Fatalf("DialTLS_ExternalAuth: %v", err)
	}
	defer c.Close()
	roundTripOver(t, c)

	// Without a client certificate the broker refuses the TLS handshake.
	noCert := &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12}
	if c, err := amqp.DialTLS(fmt.Sprintf("amqps://guest:guest@localhost:%d/", port), noCert); err == nil {
		c.Close()
		t.Fatal("a client without a certificate connected under fail_if_no_peer_cert")
	}
}
