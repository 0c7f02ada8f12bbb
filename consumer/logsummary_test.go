package consumer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// jsonLines decodes the JSON log lines written to buf.
func jsonLines(t *testing.T, buf *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if s == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, m)
	}
	return out
}

// switchPublisher publishes with one of two real publishers.
type switchPublisher struct {
	mu  sync.Mutex
	now dlq.Publisher
}

func (s *switchPublisher) set(p dlq.Publisher) { s.mu.Lock(); s.now = p; s.mu.Unlock() }

func (s *switchPublisher) Publish(ctx context.Context, dest string, h map[string]string, b []byte) error {
	s.mu.Lock()
	p := s.now
	s.mu.Unlock()
	return p.Publish(ctx, dest, h, b)
}

// An outage (here: the dead-letter queue unreachable, so a poison message
// is handed back on every redelivery) is logged once when it starts and
// once when it ends, whatever the number of redeliveries; per-message lines
// are at debug level, and a summary at info counts what happened.
func TestOutageLoggedOnceAtStartAndEnd(t *testing.T) {
	cfg, a, settled := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A connection to a second server, closed: its Publish fails.
	srv2, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	broken, err := jetstream.Open(ctx, jetstream.Config{URL: srv2.URL(), Stream: "OTHER", Subject: "other"})
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	dead := &switchPublisher{now: broken}
	cfg.DeadLetter = dead
	cfg.SummaryInterval = time.Hour // no repeated outage line in this test
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error {
		return classify.Poison("MALFORMED_PAYLOAD", nil)
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	handedBack := 0
	for handedBack < 5 {
		select {
		case s := <-settled:
			if s.Err == nil {
				t.Fatalf("settled without error during the outage: %+v", s)
			}
			handedBack++
		case <-ctx.Done():
			t.Fatal("no settlement")
		}
	}
	dead.set(a)
	for {
		s := <-settled
		if s.Err == nil {
			if s.Action != inboxkit.ActionDeadLetter {
				t.Fatalf("after the outage: %s", s.Action)
			}
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var summary map[string]any
	for _, l := range jsonLines(t, &logs) {
		msg, level := l["msg"].(string), l["level"].(string)
		count[level+" "+msg]++
		if msg == "summary" {
			summary = l
		}
	}
	if count["ERROR outage: intake stopped until the database and the dead-letter queue answer; the deliveries in hand are handed back"] != 1 || count["INFO outage over"] != 1 {
		t.Errorf("want one outage line at the start and one at the end, got %v", count)
	}
	for k, n := range count {
		if strings.HasPrefix(k, "ERROR") && n > 1 {
			t.Errorf("%d lines %q", n, k)
		}
	}
	if count["WARN settled"] != 1 || count["DEBUG settled"] < 5 {
		t.Errorf("want the handed-back settlements at debug and the dead letter at warn: %v", count)
	}
	// Hand-backs are counted apart: settled is the one dead letter.
	if summary == nil || summary["dead_lettered"] != 1.0 || summary["settled"] != 1.0 || summary["handed_back"].(float64) < 5 {
		t.Errorf("summary at the end: %v", summary)
	}
}

// A delivery the inbox could not take (database closed) logs no empty
// outcome field.
func TestNoEmptyOutcomeInLogs(t *testing.T) {
	cfg, a, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := dbtest.New(t, dbtest.SQLite)
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db.DB.Close()
	cfg.Store = store
	cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Handle(ctx, d)
	if s.Err == nil || s.Result.Outcome != "" {
		t.Fatalf("want a runtime error without outcome, got %+v", s)
	}
	for _, l := range jsonLines(t, &logs) {
		if v, ok := l["outcome"]; ok && v == "" {
			t.Errorf("log line with an empty outcome: %v", l)
		}
	}
}
