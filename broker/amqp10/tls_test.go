package amqp10_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
)

// tlsProxy terminates TLS on a loopback port with a fresh self-signed
// certificate for 127.0.0.1 and forwards to target; it returns the address
// and a pool trusting the certificate.
func tlsProxy(t *testing.T, target string) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	proxyOn(t, ln, target)
	return ln.Addr().String(), pool
}

// TestTLS: amqp10s:// speaks TLS (here to a loopback TLS proxy in front of
// the plugin) and refuses a certificate it does not trust.
func TestTLS(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	addr, pool := tlsProxy(t, "127.0.0.1:5672")
	a := open(t, amqp10.Config{URL: "amqp10s://guest:guest@" + addr, Queue: q, TLSConfig: &tls.Config{RootCAs: pool}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-tls"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receive(t, a)
	if d.Message().Header("eventId") != "ev-tls" {
		t.Errorf("got %q", d.Message().Header("eventId"))
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := amqp10.Open(ctx, amqp10.Config{URL: "amqp10s://guest:guest@" + addr})
	if err == nil || !strings.Contains(err.Error(), "TLS") || strings.Contains(err.Error(), "guest:guest") {
		t.Errorf("untrusted certificate: %v, want a TLS error with the URL redacted", err)
	}
}

// TestMissingQueue: receiving from a queue that does not exist is a clear
// error naming it, at Open.
func TestMissingQueue(t *testing.T) {
	declarer(t) // RabbitMQ up
	q := consumertest.QueueName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := amqp10.Open(ctx, amqp10.Config{URL: rabbitURL, Queue: q})
	if err == nil {
		a.Close()
		t.Fatalf("Open on missing queue %s succeeded", q)
	}
	if !strings.Contains(err.Error(), q) || !strings.Contains(err.Error(), "create the queue first") {
		t.Errorf("error %q does not name the queue", err)
	}
	t.Logf("missing queue: %v", err)
}
