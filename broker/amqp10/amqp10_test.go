package amqp10_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
)

// rawConn opens a go-amqp connection to the plugin, playing a JMS producer
// or consumer.
func rawConn(t *testing.T) *amqp.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://127.0.0.1:5672", &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("guest", "guest")})
	if err != nil {
		t.Fatalf("dial RabbitMQ's AMQP 1.0 plugin: %v (enable it: rabbitmq-plugins enable rabbitmq_amqp1_0)", err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func receive(t *testing.T, src consumer.Source) consumer.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := src.Receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return d
}

// TestJMSMapping: messages as a JMS producer over AMQP sends them (a
// TextMessage as an amqp-value string, a BytesMessage as a data section,
// JMS properties as application properties) read as inboxkit messages.
func TestJMSMapping(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := rawConn(t).NewSender(ctx, "/amq/queue/"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*amqp.Message{
		{ // TextMessage
			Header:                &amqp.MessageHeader{Durable: true},
			Properties:            &amqp.MessageProperties{MessageID: "ID:jms-1", CorrelationID: "order-42"},
			ApplicationProperties: map[string]any{"eventId": "ev-1", "priorityClass": int32(7), "flag": true},
			Value:                 `{"invoiceNo":"INV-1"}`,
		},
		{ // BytesMessage: one data section (RabbitMQ 3.10's plugin
			// reverses the order of several)
			Properties:            &amqp.MessageProperties{MessageID: uint64(99)},
			ApplicationProperties: map[string]any{"eventId": "ev-2"},
			Data:                  [][]byte{[]byte(`{"invoiceNo":"INV-2"}`)},
		},
		{ // MapMessage-like amqp-value map
			ApplicationProperties: map[string]any{"eventId": "ev-3"},
			Value:                 map[string]any{"invoiceNo": "INV-3"},
		},
	}
	for _, m := range msgs {
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	src := open(t, amqp10.Config{Queue: q, Prefetch: 1})
	want := []struct {
		id, corr, brokerID, body string
		extra                    map[string]string
	}{
		{"ev-1", "order-42", "ID:jms-1", `{"invoiceNo":"INV-1"}`, map[string]string{"priorityClass": "7", "flag": "true"}},
		{"ev-2", "", "99", `{"invoiceNo":"INV-2"}`, nil},
		{"ev-3", "", "", `{"invoiceNo":"INV-3"}`, nil},
	}
	for i, w := range want {
		d := receive(t, src)
		m := d.Message()
		if m.Header("eventId") != w.id || m.Header("correlation-id") != w.corr || m.BrokerMessageID != w.brokerID || string(m.Body) != w.body {
			t.Errorf("message %d: eventId=%q correlation-id=%q BrokerMessageID=%q body=%q; want %q %q %q %q",
				i, m.Header("eventId"), m.Header("correlation-id"), m.BrokerMessageID, m.Body, w.id, w.corr, w.brokerID, w.body)
		}
		for k, v := range w.extra {
			if m.Header(k) != v {
				t.Errorf("message %d: header %s=%q, want %q", i, k, m.Header(k), v)
			}
		}
		if m.Destination != q || m.Redelivered || m.DeliveryCount != 0 {
			t.Errorf("message %d: Destination=%q Redelivered=%v DeliveryCount=%d; want %q false 0", i, m.Destination, m.Redelivered, m.DeliveryCount, q)
		}
		if i == 0 {
			// Handed back: it comes again, flagged redelivered.
			if err := d.Requeue(ctx, 0); err != nil {
				t.Fatalf("requeue: %v", err)
			}
			again := receive(t, src)
			if am := again.Message(); am.Header("eventId") != "ev-1" || !am.Redelivered {
				t.Errorf("after Requeue: eventId=%q Redelivered=%v; want ev-1 true", am.Header("eventId"), am.Redelivered)
			}
			d = again
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
		if err := d.Ack(ctx); !errors.Is(err, amqp10.ErrSettled) {
			t.Errorf("second Ack: %v, want ErrSettled", err)
		}
	}
}

// TestPublish: what Publish sends, read by a plain AMQP 1.0 receiver (a JMS
// consumer would see the same): correlation-id property, application
// properties, a durable message with a message-id and a data body. Publish
// declares a missing queue durable, and reaches an existing quorum queue
// (which refuses the declaring address).
func TestPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c091, err := amqp091.Dial(rabbit091)
	if err != nil {
		t.Fatalf("RabbitMQ over AMQP 0-9-1: %v", err)
	}
	t.Cleanup(func() { c091.Close() }) // after the queues are deleted
	ch, err := c091.Channel()
	if err != nil {
		t.Fatal(err)
	}
	fresh := consumertest.QueueName(t.Name() + "/fresh")
	quorum := consumertest.QueueName(t.Name() + "/quorum")
	if _, err := ch.QueueDeclare(quorum, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(fresh, false, false, false)
		_, _ = ch.QueueDelete(quorum, false, false, false)
	})
	pub := open(t, amqp10.Config{})
	for _, q := range []string{fresh, quorum} {
		if err := pub.Publish(ctx, q, map[string]string{"eventId": "ev-9", "correlation-id": "order-9", "x-tenant": "acme"}, []byte("payload")); err != nil {
			t.Fatalf("publish to %s: %v", q, err)
		}
		rcv, err := rawConn(t).NewReceiver(ctx, "/amq/queue/"+q, &amqp.ReceiverOptions{Credit: 1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive from %s: %v", q, err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		if m.Properties == nil || m.Properties.CorrelationID != "order-9" || m.Properties.MessageID == nil {
			t.Errorf("%s: properties %+v, want correlation-id order-9 and a message-id", q, m.Properties)
		}
		if m.ApplicationProperties["eventId"] != "ev-9" || m.ApplicationProperties["x-tenant"] != "acme" || m.ApplicationProperties["correlation-id"] != nil {
			t.Errorf("%s: application properties %v", q, m.ApplicationProperties)
		}
		if m.Header == nil || !m.Header.Durable || string(m.GetData()) != "payload" {
			t.Errorf("%s: header %+v body %q, want durable and payload", q, m.Header, m.GetData())
		}
	}
	// The fresh queue was declared durable: a durable redeclare matches.
	if _, err := ch.QueueDeclare(fresh, true, false, false, false, nil); err != nil {
		t.Errorf("queue %s created by Publish is not a durable classic queue: %v", fresh, err)
	}
}

// TestPasswordNeverPrinted: errors and logs show the URL with the password
// replaced (url.URL.Redacted), also for one- and two-letter passwords,
// which must not mask anything else.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, pw := range []string{"p", "pw", "s3cr3t-Pa55"} {
		t.Run(pw, func(t *testing.T) {
			t.Parallel()
			passwordNeverPrinted(t, pw)
		})
	}
}

// passwordNeverPrinted is TestPasswordNeverPrinted with one password.
func passwordNeverPrinted(t *testing.T, pw string) {
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	cases := []amqp10.Config{
		{URL: "amqp10://guest:" + pw + "@127.0.0.1:5672"},               // wrong password
		{URL: "amqp10://guest:" + pw + "@127.0.0.1:1"},                  // nothing listens
		{URL: "amqp10://guest:" + pw + "@127.0.0.1:5672?bogus=1"},       // bad parameter
		{URL: "amqp10://guest:" + pw + "@127.0.0.1:5672?requeue=maybe"}, // bad value
		{URL: "stomp://guest:" + pw + "@127.0.0.1:5672"},                // wrong scheme
		{URL: "amqp10://guest:" + pw + "@127.0.0.1:5672", Prefetch: -1}, // bad field
	}
	for _, cfg := range cases {
		cfg.Logger = logger
		cfg.DialTimeout = 5 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := amqp10.Open(ctx, cfg)
		cancel()
		if err == nil {
			a.Close()
			t.Fatalf("Open(%s) succeeded", strings.ReplaceAll(cfg.URL, pw, "xxxxx"))
		}
		msg := err.Error()
		if strings.Contains(msg, "guest:"+pw+"@") || (len(pw) > 2 && strings.Contains(msg, pw)) {
			t.Errorf("password %q printed: %s", pw, msg)
		}
		if strings.Contains(msg, "127.0.0.1") && !strings.Contains(msg, "guest:xxxxx@127.0.0.1") {
			t.Errorf("URL in error not redacted as url.URL.Redacted does: %s", msg)
		}
		if strings.Contains(msg, "xxxxxuest") || strings.Contains(msg, "amqxxxxx") {
			t.Errorf("masking touched more than the password: %s", msg)
		}
	}
	if strings.Contains(logs.String(), ":"+pw+"@") {
		t.Errorf("password %q in logs: %s", pw, logs.String())
	}
}

func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  amqp10.Config
		want string
	}{
		{amqp10.Config{TrustDeliveryCount: true, RequeueModified: true}, "TrustDeliveryCount"},
		{amqp10.Config{URL: rabbitURL + "?requeue=modified", TrustDeliveryCount: true}, "TrustDeliveryCount"},
		{amqp10.Config{Addressing: "jms"}, "Addressing"},
		{amqp10.Config{URL: "amqp10://"}, "no host"},
		{amqp10.Config{URL: "amqp://guest:guest@127.0.0.1:5672/?prefetch=x"}, "prefetch"},
		{amqp10.Config{URL: rabbitURL + "?allow-presettled=maybe"}, "allow-presettled"},
		{amqp10.Config{URL: rabbitURL + "?single-active-consumer=maybe"}, "single-active-consumer=\"maybe\": use true or false"},
		{amqp10.Config{URL: rabbitURL + "?profile=websphere"}, "Profile"},
		{amqp10.Config{URL: rabbitURL + "?profile=ibmmq&addressing=rabbitmq"}, "plain"},
		{amqp10.Config{Profile: amqp10.ProfileIBMMQ, ContainerID: "billing-consumer-1"}, "ContainerID"},
	} {
		_, err := amqp10.Open(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// lockedBuffer is a log sink safe for the adapter's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proxy is a loopback TCP proxy whose connections the test can cut, and
// that records what clients send when asked to (see newRecorder).
type proxy struct {
	ln     net.Listener
	record bool
	mu     sync.Mutex
	conns  []net.Conn
	sent   []*lockedBuffer // per connection, with record: client to target
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	return proxyOn(t, listen(t), target)
}

// listen listens on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// proxyOn forwards the connections accepted on ln (plain or TLS) to target.
func proxyOn(t *testing.T, ln net.Listener, target string) *proxy {
	t.Helper()
	return startProxy(t, &proxy{ln: ln}, target)
}

func startProxy(t *testing.T, p *proxy, target string) *proxy {
	t.Helper()
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			var toTarget io.Writer = u
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			if p.record {
				sent := &lockedBuffer{}
				p.sent = append(p.sent, sent)
				toTarget = io.MultiWriter(u, sent)
			}
			p.mu.Unlock()
			go func() { _, _ = io.Copy(toTarget, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() { p.ln.Close(); p.cut() })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// cut closes every proxied connection; new ones are still accepted.
func (p *proxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	return n
}

// TestReconnect: the connection is cut (a loopback proxy) while a delivery
// is in hand: its Ack fails, the adapter reconnects by itself, the message
// comes again flagged redelivered, and Publish works on the new connection.
func TestReconnect(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	p := newProxy(t, "127.0.0.1:5672")
	var logs lockedBuffer
	cfg := amqp10.Config{URL: "amqp10://guest:guest@" + p.addr(), Queue: q, Prefetch: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	a := open(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-r"}, []byte("one")); err != nil {
		t.Fatal(err)
	}
	d := receive(t, a)
	if n := p.cut(); n == 0 {
		t.Fatal("no proxied connection to cut")
	}
	// The redelivery comes on the new connection, so the old one is known
	// dead by then, and the delivery from it cannot be settled.
	again := receive(t, a)
	if err := d.Ack(ctx); err == nil {
		t.Error("Ack of a delivery from a cut connection succeeded")
	}
	if m := again.Message(); m.Header("eventId") != "ev-r" || !m.Redelivered {
		t.Errorf("after the cut: eventId=%q Redelivered=%v, want ev-r true", m.Header("eventId"), m.Redelivered)
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatalf("ack after reconnect: %v", err)
	}
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-s"}, []byte("two")); err != nil {
		t.Fatalf("publish after reconnect: %v", err)
	}
	if d := receive(t, a); d.Message().Header("eventId") != "ev-s" {
		t.Errorf("got %q, want ev-s", d.Message().Header("eventId"))
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close() // the log is complete
	if !strings.Contains(logs.String(), "reconnected") || strings.Contains(logs.String(), "guest:guest@") {
		t.Errorf("log should tell the reconnect with a redacted URL:\n%s", logs.String())
	}
}

// TestDelayedRequeue: Requeue with a delay returns at once and the message
// comes again, redelivered, after being held.
func TestDelayedRequeue(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	a := open(t, amqp10.Config{Queue: q})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-d"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receive(t, a)
	if err := d.Requeue(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := receive(t, a)
	if m := again.Message(); m.Header("eventId") != "ev-d" || !m.Redelivered {
		t.Errorf("eventId=%q Redelivered=%v, want ev-d true", m.Header("eventId"), m.Redelivered)
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRequeueModifiedOnRabbitMQ records the plugin's refusal of the
// modified outcome: the session ends, the adapter reconnects, and the
// message comes again (nothing is lost, but the feature is unusable there).
func TestRequeueModifiedOnRabbitMQ(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	a := open(t, amqp10.Config{Queue: q, RequeueModified: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-m"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receive(t, a)
	_ = d.Requeue(ctx, 0) // written; the plugin answers by ending the session
	again := receive(t, a)
	if m := again.Message(); m.Header("eventId") != "ev-m" || !m.Redelivered {
		t.Errorf("eventId=%q Redelivered=%v, want ev-m true", m.Header("eventId"), m.Redelivered)
	}
	if err := again.Ack(ctx); err != nil {
		t.Logf("ack after modified: %v (the session may end only now)", err)
	}
}
