package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/consumer"
)

const systemURL = "nats://127.0.0.1:4222"

const startHint = "NATS JetStream is not reachable at 127.0.0.1:4222; start it with: " +
	"start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- " +
	"-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"

func randID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// names is a stream and subject unique to one test.
type names struct {
	stream, subject string
}

// testNames returns unique names on the server at url and deletes every
// stream named by the returned func when the test ends.
func testNames(t *testing.T, url string) (names, func(string) string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("%s: %v", startHint, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := randID()
	n := names{stream: "INBOXKIT_TEST_" + id, subject: "inboxkit.test." + id + ".in"}
	streams := []string{n.stream}
	t.Cleanup(func() {
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range streams {
			if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("delete stream %s: %v", s, err)
			}
		}
	})
	return n, func(suffix string) string {
		s := n.stream + "_" + suffix
		streams = append(streams, s)
		return s
	}
}

func open(t *testing.T, cfg Config) *Adapter {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = systemURL
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open (%s): %v", startHint, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func receive(t *testing.T, a *Adapter, within time.Duration) consumer.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d, err := a.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return d
}

func expectNothing(t *testing.T, a *Adapter, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if d, err := a.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive = %v, %v; want nothing (deadline exceeded)", d, err)
	}
}

func publish(t *testing.T, a *Adapter, subject string, headers map[string]string, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Publish(ctx, subject, headers, []byte(body)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// servers runs body against the machine's NATS server and an embedded one.
func servers(t *testing.T, body func(t *testing.T, url string)) {
	t.Run("system", func(t *testing.T) {
		t.Parallel()
		body(t, systemURL)
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		e, err := embedded.Start(t.TempDir())
		if err != nil {
			t.Fatalf("embedded.Start: %v", err)
		}
		t.Cleanup(e.Shutdown)
		body(t, e.URL())
	})
}

func TestRoundTrip(t *testing.T) {
	servers(t, func(t *testing.T, url string) {
		n, _ := testNames(t, url)
		a := open(t, Config{URL: url, Stream: n.stream, Subject: n.subject})
		publish(t, a, n.subject, map[string]string{"event-id": "E-1", "correlation-id": "C-1"}, `{"n":1}`)

		d := receive(t, a, 5*time.Second)
		m := d.Message()
		if string(m.Body) != `{"n":1}` || m.Header("event-id") != "E-1" || m.Header("correlation-id") != "C-1" {
			t.Errorf("message = %+v", m)
		}
		if m.Destination != n.subject || m.BrokerMessageID != "1" || m.Redelivered || m.DeliveryCount != 1 {
			t.Errorf("Destination=%q BrokerMessageID=%q Redelivered=%v DeliveryCount=%d; want %q, 1, false, 1",
				m.Destination, m.BrokerMessageID, m.Redelivered, m.DeliveryCount, n.subject)
		}
		if err := d.Ack(context.Background()); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		if err := d.Ack(context.Background()); !errors.Is(err, ErrSettled) {
			t.Errorf("second Ack = %v, want ErrSettled", err)
		}
		expectNothing(t, a, 300*time.Millisecond)
	})
}

func TestRedeliveryAfterClose(t *testing.T) {
	servers(t, func(t *testing.T, url string) {
		n, _ := testNames(t, url)
		cfg := Config{URL: url, Stream: n.stream, Subject: n.subject, AckWait: time.Second}
		first := open(t, cfg)
		publish(t, first, n.subject, map[string]string{"event-id": "E-1"}, "x")
		d := receive(t, first, 5*time.Second)
		if err := first.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := d.Ack(context.Background()); err == nil {
			t.Error("Ack after Close succeeded; want an error")
		}
		if _, err := first.Receive(context.Background()); !errors.Is(err, consumer.ErrClosed) {
			t.Errorf("Receive after Close = %v, want ErrClosed", err)
		}

		// Close naked it: it comes again at once, counted.
		second := open(t, cfg)
		d = receive(t, second, 5*time.Second)
		if m := d.Message(); !m.Redelivered || m.DeliveryCount != 2 || m.Header("event-id") != "E-1" {
			t.Errorf("after Close: Redelivered=%v DeliveryCount=%d event-id=%q; want true, 2, E-1", m.Redelivered, m.DeliveryCount, m.Header("event-id"))
		}

		// A crash (connection gone, no nak): it comes again after AckWait.
		second.nc.Close()
		third := open(t, cfg)
		m := receive(t, third, 10*time.Second).Message()
		if !m.Redelivered || m.DeliveryCount != 3 {
			t.Errorf("after crash: Redelivered=%v DeliveryCount=%d; want true, 3", m.Redelivered, m.DeliveryCount)
		}
	})
}

// TestPublishedAfterCloseIsAFirstDelivery: a message published once Close
// has returned goes to the next reader as a first delivery, although the
// closed adapter had a pull request still waiting on the server (a Receive
// that gave up, PollWait a minute): the server delivers to a pull request
// only while its inbox has interest, and Close returns after the server
// dropped that interest. Before, Close cancelled the pull and closed the
// connection without waiting for the server, which could hand the message
// to the dead request: it came back after AckWait, redelivered, and not
// vouched for as first.
func TestPublishedAfterCloseIsAFirstDelivery(t *testing.T) {
	servers(t, func(t *testing.T, url string) {
		n, _ := testNames(t, url)
		cfg := Config{URL: url, Stream: n.stream, Subject: n.subject, AckWait: time.Minute, PollWait: time.Minute}
		pub := open(t, Config{URL: url})
		for i := range 20 {
			a := open(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			if _, err := a.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: Receive on an empty queue = %v, want its deadline", i, err)
			}
			cancel()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			publish(t, pub, n.subject, map[string]string{"event-id": fmt.Sprint("E-", i)}, "x")
			b := open(t, cfg)
			d := receive(t, b, 10*time.Second)
			if m := d.Message(); !m.FirstDelivery || m.DeliveryCount != 1 || m.Header("event-id") != fmt.Sprint("E-", i) {
				t.Fatalf("round %d: FirstDelivery=%v DeliveryCount=%d event-id=%q; want true, 1, E-%d", i, m.FirstDelivery, m.DeliveryCount, m.Header("event-id"), i)
			}
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	n, _ := testNames(t, systemURL)
	a := open(t, Config{Stream: n.stream, Subject: n.subject})
	publish(t, a, n.subject, nil, "x")

	d := receive(t, a, 5*time.Second)
	if err := d.Requeue(context.Background(), 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	d = receive(t, a, 5*time.Second)
	if m := d.Message(); !m.Redelivered || m.DeliveryCount != 2 {
		t.Errorf("after Requeue(0): Redelivered=%v DeliveryCount=%d; want true, 2", m.Redelivered, m.DeliveryCount)
	}
	const delay = 500 * time.Millisecond
	start := time.Now()
	if err := d.Requeue(context.Background(), delay); err != nil {
		t.Fatalf("Requeue(delay): %v", err)
	}
	d = receive(t, a, 5*time.Second)
	if waited := time.Since(start); waited < delay {
		t.Errorf("redelivered after %v, before the delay %v", waited, delay)
	}
	if m := d.Message(); m.DeliveryCount != 3 {
		t.Errorf("after Requeue(delay): DeliveryCount=%d; want 3", m.DeliveryCount)
	}
	if err := d.Ack(context.Background()); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	expectNothing(t, a, 300*time.Millisecond)
}

func TestPublish(t *testing.T) {
	t.Parallel()
	n, stream := testNames(t, systemURL)
	dlqStream := stream("DLQ")
	dlqSubject := "inboxkit.test." + randID() + ".dlq"
	a := open(t, Config{}) // publisher only
	if _, err := a.Receive(context.Background()); !errors.Is(err, ErrNoSubject) {
		t.Errorf("Receive on publisher-only adapter = %v, want ErrNoSubject", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	strict := open(t, Config{NoStreamCreation: true})
	if err := strict.Publish(ctx, dlqSubject, nil, []byte("lost")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("Publish with NoStreamCreation to a subject no stream captures = %v; want ErrNoStreamResponse", err)
	}
	// By default Publish creates the subject's stream.
	created := "inboxkit.test." + randID() + ".created"
	createdStream := StreamName(created)
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.js.DeleteStream(dctx, createdStream)
	})
	publish(t, a, created, nil, "kept")
	if d, err := a.Depth(ctx, created); err != nil || d != 1 {
		t.Errorf("Depth of the created stream's subject = %d, %v; want 1", d, err)
	}
	if cs, err := a.js.Stream(ctx, createdStream); err != nil || cs.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Errorf("stream %s made by Publish: %v (want work-queue retention)", createdStream, err)
	}
	for range 2 { // idempotent
		if err := a.EnsureStream(ctx, dlqStream, dlqSubject); err != nil {
			t.Fatalf("EnsureStream: %v", err)
		}
	}
	publish(t, a, dlqSubject, map[string]string{"reason": "POISON"}, "dead")

	// A second subject is added to the existing stream; a covered one is not.
	other := strings.TrimSuffix(dlqSubject, ".dlq") + ".reject"
	if err := a.EnsureStream(ctx, dlqStream, other, dlqSubject); err != nil {
		t.Fatalf("EnsureStream adding a subject: %v", err)
	}
	publish(t, a, other, nil, "rejected")

	s, err := a.js.Stream(ctx, dlqStream)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.State.Msgs != 2 || info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Storage != jetstream.FileStorage {
		t.Errorf("DLQ stream: %d messages, %v, %v; want 2, work-queue, file", info.State.Msgs, info.Config.Retention, info.Config.Storage)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get("reason") != "POISON" || string(raw.Data) != "dead" {
		t.Errorf("stored message = %v %q", raw.Header, raw.Data)
	}
	_ = n

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, dlqSubject, nil, nil); !errors.Is(err, consumer.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestReconnect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := embedded.Start(dir)
	if err != nil {
		t.Fatalf("embedded.Start: %v", err)
	}
	t.Cleanup(e.Shutdown)

	n := names{stream: "RECONNECT", subject: "inboxkit.reconnect"}
	a := open(t, Config{URL: e.URL(), Stream: n.stream, Subject: n.subject, AckWait: 2 * time.Second, Reconnect: inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond}})
	publish(t, a, n.subject, nil, "one")
	if err := receive(t, a, 5*time.Second).Ack(context.Background()); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	pending := receiveAfter(t, a, n.subject, "two")

	e.Shutdown()
	if err := pending.Ack(context.Background()); err == nil {
		t.Error("Ack while the server is down succeeded; want an error")
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}

	// "two" was never acknowledged: it comes again after AckWait; "three" is new.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if err := a.Publish(ctx, n.subject, nil, []byte("three")); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("Publish after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := map[string]int{}
	for range 2 {
		d, err := a.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after restart: %v (got %v)", err, got)
		}
		m := d.Message()
		got[string(m.Body)] = m.DeliveryCount
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack after restart: %v", err)
		}
	}
	if got["two"] != 2 || got["three"] != 1 {
		t.Errorf("after restart got body→DeliveryCount %v, want two→2, three→1", got)
	}
}

func receiveAfter(t *testing.T, a *Adapter, subject, body string) consumer.Delivery {
	t.Helper()
	publish(t, a, subject, nil, body)
	return receive(t, a, 5*time.Second)
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	n, _ := testNames(t, systemURL)
	a := open(t, Config{Stream: n.stream, Subject: n.subject})
	const producers, perProducer, receivers = 4, 50, 4
	const total = producers * perProducer

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pub sync.WaitGroup
	for p := range producers {
		pub.Go(func() {
			for i := range perProducer {
				if err := a.Publish(ctx, n.subject, map[string]string{"event-id": fmt.Sprintf("E-%d-%d", p, i)}, nil); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	seen := make(map[string]int)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var recv sync.WaitGroup
	for range receivers {
		recv.Go(func() {
			for {
				d, err := a.Receive(rctx)
				if err != nil {
					return
				}
				if err := d.Ack(rctx); err != nil {
					t.Errorf("Ack: %v", err)
				}
				mu.Lock()
				seen[d.Message().Header("event-id")]++
				if len(seen) == total {
					rcancel()
				}
				mu.Unlock()
			}
		})
	}
	pub.Wait()
	recv.Wait()
	if len(seen) != total {
		t.Fatalf("received %d distinct messages, want %d", len(seen), total)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s received %d times", id, c)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if got := StreamName("invoice.events-2*"); got != "INBOXKIT_INVOICE_EVENTS_2_" {
		t.Errorf("StreamName = %q", got)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Prefetch: -2}, "Config.Prefetch"},
		{Config{Reconnect: inboxkit.Backoff{Initial: time.Second, Max: time.Millisecond}}, "Config.Reconnect.Max"},
		{Config{Stream: "A.B"}, "Config.Stream"},
		{Config{Durable: "x.y"}, "Config.Durable"},
		{Config{AckWait: -time.Second}, "Config.AckWait"},
		{Config{PollWait: time.Millisecond}, "Config.PollWait"},
		{Config{URL: "nats://u:s3cr3t@127.0.0.1:bad"}, "Config.URL"},
		{Config{Replicas: 6}, "Config.Replicas"},
	} {
		_, err := Open(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%+v) = %v, want an error naming %s without the password", tc.cfg, err, tc.field)
		}
	}
	for _, u := range []string{"nats://u:s3cr3t@127.0.0.1:1", "nats://u:s3cr3t@127.0.0.1:1,127.0.0.1:2,nats://v:s3cr3t@127.0.0.1:3"} {
		_, err := Open(context.Background(), Config{URL: u, DialTimeout: time.Second})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "invalid") {
			t.Errorf("Open to closed ports (%s) = %v; want a connect error without the password", redact(u), err)
		}
	}
}

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.*", "a.>", false},
		{"a.>", "a.>", true},
		{">", "x", true},
		{"a.b.c", "a.b", false},
	} {
		if got := subjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

// TestReplicasOnASingleServer: Config.Replicas above 1 is for a JetStream
// cluster; a single server refuses the stream, and Open says what to do
// (issue 29.1). A count JetStream cannot keep is refused before connecting.
func TestReplicasOnASingleServer(t *testing.T) {
	t.Parallel()
	n, _ := testNames(t, systemURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Open(ctx, Config{URL: systemURL, Stream: n.stream, Subject: n.subject, Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "with 3 replicas") || !strings.Contains(err.Error(), "connect to a cluster") {
		t.Errorf("Open with Replicas 3 on a single server: %v; want the stream refused, naming the fix", err)
	}
}
