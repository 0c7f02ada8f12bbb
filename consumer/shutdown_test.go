package consumer_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Issue 11.8: with a hung database connection the drain never ended. Now
// Run logs "draining 1 deliveries", abandons the delivery after
// ShutdownTimeout, logs its event id, returns ErrShutdownTimeout, and the
// delivery was not acknowledged: the broker delivers it again.
func TestShutdownTimeoutAbandonsHungDelivery(t *testing.T) {
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jetstream.Config{URL: srv.URL(), Stream: "INVOICES", Subject: "invoices"}
	src, err := jetstream.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Publish(ctx, "invoices", map[string]string{"eventId": "E-1"}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	db := dbtest.New(t, dbtest.Postgres)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	pool, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	store, err := inbox.New(pool, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	var once sync.Once
	cfg := consumer.Config{Name: "shutdown-test", Source: src, Store: store, DeadLetter: src, DeadLetterQueue: "dlq.invoices"}
	cfg.Handler = func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		once.Do(func() { close(entered) })
		proxy.Hang()
		_, err := tx.ExecContext(ctx, "SELECT 1") // never answered
		return err
	}
	cfg.ShutdownTimeout = 500 * time.Millisecond
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	stop() // SIGTERM
	select {
	case err := <-done:
		if !errors.Is(err, consumer.ErrShutdownTimeout) || !strings.Contains(err.Error(), "E-1") {
			t.Fatalf("Run = %v, want ErrShutdownTimeout naming E-1", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return 20s after ctx was cancelled with a hung database connection\n%s", logs)
	}
	for _, want := range []string{"draining 1 deliveries", "delivery abandoned", "event_id=E-1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	// Not acknowledged: the broker delivers E-1 again.
	again, err := jetstream.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	d, err := again.Receive(ctx)
	if err != nil {
		t.Fatalf("E-1 did not come again: %v", err)
	}
	if id := d.Message().Header("eventId"); id != "E-1" {
		t.Fatalf("got %q, want E-1 again", id)
	}
}
