package consumer_test

import (
	"context"
	"database/sql"
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
