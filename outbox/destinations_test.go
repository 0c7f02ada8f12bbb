package outbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
	"github.com/inboxkit/inboxkit/outbox"
)

// TestHTTPDestination posts to a real HTTP server: the message id is the
// Idempotency-Key of every attempt, a 503 is tried again after its
// Retry-After, a 400 parks the message at once with the answer, a redirect
// is refused.
func TestHTTPDestination(t *testing.T) {
	type call struct{ key, body, ctype, corr, cause, custom string }
	var mu sync.Mutex
	var calls []call
	busy := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, call{r.Header.Get("Idempotency-Key"), string(b), r.Header.Get("Content-Type"), r.Header.Get("X-Correlation-ID"), r.Header.Get("X-Causation-ID"), r.Header.Get("X-Letter-Type")})
		first := busy > 0 && r.URL.Path == "/letters"
		if first {
			busy--
		}
		mu.Unlock()
		switch {
		case r.Method != http.MethodPost:
			w.WriteHeader(http.StatusMethodNotAllowed)
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/letters", http.StatusMovedPermanently)
		case r.URL.Path == "/bad":
			http.Error(w, `{"error":"customer unknown"}`, http.StatusBadRequest)
		case first:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	st, _ := setup(t, dbtest.SQLite)
	ctx := inboxkit.ContextWithMessage(context.Background(), inboxkit.Message{ID: "evt-1", CorrelationID: "order-1"})
	ids := add(t, ctx, st,
		outbox.Message{ID: "letter-1", Destination: srv.URL + "/letters", Headers: map[string]string{"Content-Type": "application/json", "X-Letter-Type": "reminder"}, Body: []byte(`{"n":1}`)},
		outbox.Message{Destination: srv.URL + "/bad", Body: []byte("x")},
		outbox.Message{Destination: srv.URL + "/moved", Body: []byte("y")},
	)
	relay := newRelay(t, st, outbox.RelayConfig{Retry: fastRetry(5)})
	runRelays(t, func() bool {
		return countStatus(t, st, outbox.StatusSent) == 1 && countStatus(t, st, outbox.StatusParked) == 2
	}, relay)
	mu.Lock()
	defer mu.Unlock()
	var letters []call
	for _, c := range calls {
		if c.key == "letter-1" {
			letters = append(letters, c)
		}
	}
	if len(letters) != 2 || letters[1] != (call{"letter-1", `{"n":1}`, "application/json", "order-1", "evt-1", "reminder"}) {
		t.Errorf("calls of letter-1: %+v: want a 503, then the same request again", letters)
	}
	rows := list(t, st, outbox.ListOptions{Statuses: all})
	for _, r := range rows {
		switch r.ID {
		case ids[0]:
			if r.Status != outbox.StatusSent || r.Attempts != 2 {
				t.Errorf("letter-1: %s after %d attempts, want SENT after 2", r.Status, r.Attempts)
			}
		case ids[1]:
			if r.Status != outbox.StatusParked || r.Attempts != 1 || !strings.Contains(r.LastError, "400 Bad Request") || !strings.Contains(r.LastError, "customer unknown") {
				t.Errorf("400: %+v: want parked at once with the answer", r)
			}
		case ids[2]:
			if r.Status != outbox.StatusParked || !strings.Contains(r.LastError, "redirect") {
				t.Errorf("301: %+v: want parked, saying it is a redirect", r)
			}
		}
	}
}

// adapter is what the test needs of a broker adapter.
type adapter interface {
	consumer.Source
	dlq.Publisher
}

// brokers are the machine's brokers, one adapter each: open returns a
// source of queue, or a publisher for queue "".
var brokers = []struct {
	name string
	open func(ctx context.Context, queue string) (adapter, error)
}{
	{"stomp", func(ctx context.Context, q string) (adapter, error) {
		return stomp.Open(ctx, stomp.Config{URL: "stomp://127.0.0.1:61613", Queue: q})
	}},
	{"rabbitmq", func(ctx context.Context, q string) (adapter, error) {
		return rabbitmq.Open(ctx, rabbitmq.Config{URL: rabbittest.URL, Queue: q})
	}},
	{"jetstream", func(ctx context.Context, q string) (adapter, error) {
		cfg := jetstream.Config{URL: "nats://127.0.0.1:4222", Subject: q, PollWait: time.Second}
		if q != "" {
			cfg.Durable = "outbox-test"
		}
		return jetstream.Open(ctx, cfg)
	}},
	{"amqp10", func(ctx context.Context, q string) (adapter, error) {
		return amqp10.Open(ctx, amqp10.Config{URL: "amqp10://guest:guest@127.0.0.1:5672", Queue: q})
	}},
}

// TestRelayPublishesThroughEveryBroker sends through each adapter's
// confirmed publish (STOMP receipt, RabbitMQ publisher confirm, JetStream
// PubAck, AMQP 1.0 accepted) and receives what arrived: the message id in
// eventId (what an inboxkit consumer reads), the key in orderKey, the
// causing event and correlation ids, the key's order.
func TestRelayPublishesThroughEveryBroker(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			queue := fmt.Sprintf("outbox-test-%s-%d", b.name, time.Now().UnixNano())
			switch b.name {
			case "amqp10", "rabbitmq":
				rabbittest.Declare(t, queue) // RabbitMQ's AMQP 1.0 plugin sends only to an existing queue
			case "jetstream":
				t.Cleanup(func() { deleteStream(t, jetstream.StreamName(queue)) })
			}
			pub, err := b.open(ctx, "")
			if err != nil {
				t.Fatalf("%s is not reachable (scripts/activemq start; rabbitmq-server -detached; nats-server -js): %v", b.name, err)
			}
			defer pub.Close()
			st, _ := setup(t, dbtest.SQLite)
			hctx := inboxkit.ContextWithMessage(ctx, inboxkit.Message{ID: "evt-7", CorrelationID: "case-7"})
			var ms []outbox.Message
			for i := 1; i <= 3; i++ {
				ms = append(ms, outbox.Message{Destination: queue, Key: "customer-1", Headers: map[string]string{"type": "LetterRequested"}, Body: []byte(fmt.Sprint(i))})
			}
			ids := add(t, hctx, st, ms...)
			relay := newRelay(t, st, outbox.RelayConfig{Broker: pub})
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 3 }, relay)
			src, err := b.open(ctx, queue)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for i := 0; i < 3; i++ {
				d, err := src.Receive(ctx)
				if err != nil {
					t.Fatalf("receive %d: %v", i, err)
				}
				m := d.Message()
				if m.Header("eventId") != ids[i] || string(m.Body) != fmt.Sprint(i+1) || m.Header("orderKey") != "customer-1" ||
					m.Header("causationId") != "evt-7" || m.Header("correlationId") != "case-7" || m.Header("type") != "LetterRequested" {
					t.Errorf("message %d: body %q headers %v: want eventId %s, the key, causation, correlation and own headers", i, m.Body, m.Headers, ids[i])
				}
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// deleteStream deletes a JetStream stream the publisher created for a
// test's subject.
func deleteStream(t *testing.T, name string) {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Logf("delete stream %s: %v", name, err)
		return
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err == nil {
		err = js.DeleteStream(context.Background(), name)
	}
	if err != nil {
		t.Logf("delete stream %s: %v", name, err)
	}
}

// TestListenWakesTheRelay: on PostgreSQL an Add after a quiet
// NotifyInterval notifies at its transaction's commit, and a relay that
// polls once an hour sends the message at once, however late the commit
// comes; of the Adds of one interval only the first notifies
// (Config.NotifyInterval), and the relay, woken by it, sends them all.
func TestListenWakesTheRelay(t *testing.T) {
	st, db := setup(t, dbtest.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dst := &recorder{}
	relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, PollInterval: time.Hour,
		Wake: postgres.Listen(ctx, db.DSN, st.NotifyChannel(), nil)})
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	waitSent := func(n int, what string) {
		deadline := time.Now().Add(30 * time.Second)
		for len(dst.sent()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages sent: %s", len(dst.sent()), n, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	each, err := outbox.New(db.DB, st.Dialect(), outbox.Config{NotifyInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := each.Add(ctx, tx, outbox.Message{Destination: "q", Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		// Longer than the relay's busy while after a wake-up (100ms): only
		// a notification at the commit, not one before it, wakes it now.
		time.Sleep(150 * time.Millisecond)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		waitSent(i, "the relay was not woken by the commit")
	}
	once, err := outbox.New(db.DB, st.Dialect(), outbox.Config{NotifyInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	burst := make([]outbox.Message, 50)
	for i := range burst {
		burst[i] = outbox.Message{Destination: "q", Body: []byte(fmt.Sprint("burst ", i))}
	}
	add(t, ctx, once, burst...)
	waitSent(53, "a message whose Add did not notify was not found by the relay woken for the first")
	cancel()
	<-done
}

// TestTrailingNotifyWakesTheRelay: an Add within NotifyInterval of the
// last notification sends none at once; its transaction commits after the
// relay woken by that notification went back to its hourly poll. The
// notification at the interval's end (the trailing one) wakes the relay,
// which then sends the message.
func TestTrailingNotifyWakesTheRelay(t *testing.T) {
	st, db := setup(t, dbtest.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const interval = 1500 * time.Millisecond
	s, err := outbox.New(db.DB, st.Dialect(), outbox.Config{NotifyInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	dst := &recorder{}
	relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, PollInterval: time.Hour,
		Wake: postgres.Listen(ctx, db.DSN, st.NotifyChannel(), nil)})
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitSent := func(n int, what string) {
		deadline := time.Now().Add(30 * time.Second)
		for len(dst.sent()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s not sent", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The relay listens before the first Add notifies.
	time.Sleep(200 * time.Millisecond)
	add(t, ctx, s, outbox.Message{Destination: "q", Body: []byte("first")})
	waitSent(1, "the first message (its Add notified)")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, tx, outbox.Message{Destination: "q", Body: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	// Past the relay's busy while (100ms after its last find), well before
	// the interval ends.
	time.Sleep(500 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitSent(2, "the second message (its Add within the interval: the trailing notification)")
}
