package consumer_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
)

// receiving is a Source that passes through to a real one and counts the
// Receive calls in progress, and the most at once.
type receiving struct {
	consumer.Source
	mu         sync.Mutex
	now, most  int
	reachedAll chan struct{}
	once       sync.Once
	want       int
}

func (r *receiving) Receive(ctx context.Context) (consumer.Delivery, error) {
	r.mu.Lock()
	r.now++
	r.most = max(r.most, r.now)
	if r.now == r.want {
		r.once.Do(func() { close(r.reachedAll) })
	}
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.now--; r.mu.Unlock() }()
	return r.Source.Receive(ctx)
}

// TestReceivers: Run receives with Config.Concurrency goroutines in
// ModeTransactional, and with Config.Receivers in ModeStoreThenProcess,
// DefaultReceivers(Concurrency) when it is not set. The queue is empty
// after the first message, so every receiver ends up waiting in Receive.
func TestReceivers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      consumer.Mode
		receivers int
		want      int
	}{
		{"transactional", consumer.ModeTransactional, 0, 2},
		{"store-then-process, default", consumer.ModeStoreThenProcess, 0, consumer.DefaultReceivers(2)},
		{"store-then-process, set", consumer.ModeStoreThenProcess, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, settled := setup(t)
			src := &receiving{Source: cfg.Source, reachedAll: make(chan struct{}), want: tc.want}
			cfg.Source, cfg.Mode, cfg.Concurrency, cfg.Receivers = src, tc.mode, 2, tc.receivers
			cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
			stop := start(t, cfg)
			select {
			case <-settled:
			case <-time.After(20 * time.Second):
				t.Fatal("the message was not settled within 20s")
			}
			select {
			case <-src.reachedAll:
			case <-time.After(5 * time.Second):
			}
			// Let any receiver beyond the expected count start too.
			time.Sleep(100 * time.Millisecond)
			if err := stop(); err != nil {
				t.Fatalf("Run = %v", err)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if src.most != tc.want {
				t.Errorf("%d Receive calls at once, want %d", src.most, tc.want)
			}
		})
	}
}

// prefetching is a real Source whose prefetch reads n.
type prefetching struct {
	consumer.Source
	n int
}

func (p prefetching) Prefetch() int { return p.n }

// TestPrefetchWarning: New warns when the source's prefetch is below what
// the consumer takes at once (OrderHeld with an order key, Receivers in
// store-then-process, else Concurrency × BatchSize), naming both and the
// prefetch to set; it says nothing at or above it, for an unbounded
// prefetch, or for a source that does not tell (the adapters in broker/
// all do: the embedded JetStream source here reports its default, 1000).
func TestPrefetchWarning(t *testing.T) {
	base, a, _ := setup(t)
	if got := a.Prefetch(); got != 1000 {
		t.Fatalf("jetstream Prefetch() = %d, want its default 1000", got)
	}
	for _, tc := range []struct {
		name                   string
		mode                   consumer.Mode
		concurrency, batch, rc int
		source                 consumer.Source
		want                   string // "" for no warning
	}{
		{"store-then-process below its receivers", consumer.ModeStoreThenProcess, 2, 0, 0, prefetching{a, 4},
			"the source's prefetch is 4, below the 8 deliveries this consumer takes at once (Receivers 8): the rest wait for a delivery; set the source's prefetch to at least 8, better 16"},
		{"store-then-process at its receivers", consumer.ModeStoreThenProcess, 2, 0, 3, prefetching{a, 3}, ""},
		{"transactional batches below", consumer.ModeTransactional, 2, 4, 0, prefetching{a, 7},
			"the source's prefetch is 7, below the 8 deliveries this consumer takes at once (Concurrency 2 × BatchSize 4)"},
		{"transactional at its handlers", consumer.ModeTransactional, 4, 0, 0, prefetching{a, 4}, ""},
		{"unbounded", consumer.ModeStoreThenProcess, 4, 0, 0, prefetching{a, 0}, ""},
		{"order below what it holds", consumer.ModeTransactional, 2, 4, 0, prefetching{a, 31},
			"the source's prefetch is 31, below the 32 deliveries this consumer takes at once (OrderHeld(2, 4), held for their keys)"},
		{"order at what it holds", consumer.ModeStoreThenProcess, 2, 0, 0, prefetching{a, 16}, ""},
		{"the adapter's own", consumer.ModeStoreThenProcess, 4, 0, 0, a, ""},
		{"a source that does not tell", consumer.ModeStoreThenProcess, 4, 0, 0, struct{ consumer.Source }{a}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := base
			cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
			cfg.Source, cfg.Mode, cfg.Concurrency, cfg.BatchSize, cfg.Receivers = tc.source, tc.mode, tc.concurrency, tc.batch, tc.rc
			cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
			if strings.HasPrefix(tc.name, "order") {
				cfg.OrderKeyFunc = func(inboxkit.Message) string { return "k" }
			}
			if _, err := consumer.New(cfg); err != nil {
				t.Fatal(err)
			}
			switch got := log.String(); {
			case tc.want == "" && got != "":
				t.Fatalf("logged %q, want nothing", got)
			case tc.want != "" && (!strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.want)):
				t.Fatalf("logged %q, want a warning with %q", got, tc.want)
			}
		})
	}
}
