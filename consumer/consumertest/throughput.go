package consumertest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// ThroughputConfig configures Throughput.
type ThroughputConfig struct {
	// Messages is the number of events published and processed. Defaults to 2000.
	Messages int
	// Concurrency is the consumer's concurrency. Defaults to 1.
	Concurrency int
	// OrderKeys, when above 0, gives event i the order key
	// "key-<i mod OrderKeys>" (header orderKey) and runs the consumer with
	// an OrderKeyFunc reading it. Defaults to 0: no order.
	OrderKeys int
	// Queue is the (fresh, empty) queue to use. Required.
	Queue string
	// NewSource opens a Source on a queue. Required.
	NewSource func(ctx context.Context, queue string) (consumer.Source, error)
	// Publisher publishes the events and dead letters. Required.
	Publisher dlq.Publisher
	// DB and Dialect hold the inbox and the business table; the caller gives
	// a fresh, empty database or schema. Required.
	DB      *sql.DB
	Dialect inbox.Dialect
}

// ThroughputResult is one measurement.
type ThroughputResult struct {
	Messages  int
	Published time.Duration // publishing all messages (with broker confirms)
	Consumed  time.Duration // from consumer start until the last is processed
	// PerSecond is Messages / Consumed: receive, inbox transaction with one
	// business row, commit, acknowledge.
	PerSecond float64
}

// Throughput publishes cfg.Messages events to cfg.Queue (8 publishers in
// parallel), then runs a consumer with the inbox and the suite's business
// handler until every event is processed, and reports the rate. It checks
// that there is exactly one PROCESSED row per event.
func Throughput(ctx context.Context, cfg ThroughputConfig) (ThroughputResult, error) {
	if cfg.Messages == 0 {
		cfg.Messages = 2000
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	res := ThroughputResult{Messages: cfg.Messages}
	store, err := inbox.New(cfg.DB, cfg.Dialect, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		return res, err
	}
	if err := store.Migrate(ctx); err != nil {
		return res, err
	}
	if err := CreateBusinessTable(ctx, cfg.DB); err != nil {
		return res, err
	}
	body := Event{Amount: 1}.Body()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var perr error
	var once sync.Once
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Messages {
					return
				}
				id := fmt.Sprintf("bench-%07d", i)
				h := map[string]string{"eventId": id, "correlationId": "bench"}
				if cfg.OrderKeys > 0 {
					h["orderKey"] = fmt.Sprintf("key-%d", i%cfg.OrderKeys)
				}
				if err := cfg.Publisher.Publish(ctx, cfg.Queue, h, body); err != nil {
					once.Do(func() { perr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if perr != nil {
		return res, fmt.Errorf("publish: %w", perr)
	}
	res.Published = time.Since(start)

	src, err := cfg.NewSource(ctx, cfg.Queue)
	if err != nil {
		return res, err
	}
	var processed atomic.Int64
	done := make(chan struct{})
	var doneOnce sync.Once
	var failures atomic.Int64
	var orderKey consumer.OrderKeyFunc
	if cfg.OrderKeys > 0 {
		orderKey = func(m inboxkit.Message) string { return m.Header("orderKey") }
	}
	c, err := consumer.New(consumer.Config{
		Name: "inboxbench", Source: src, Store: store, Handler: Handler(cfg.Dialect, nil), OrderKeyFunc: orderKey,
		DeadLetter: cfg.Publisher, DeadLetterQueue: cfg.Queue + ".dlq", Concurrency: cfg.Concurrency,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: consumer.ObserveSettled(func(s consumer.Settled) {
			if s.Err != nil || s.Result.Outcome != inboxkit.OutcomeProcessed {
				failures.Add(1)
			}
			if s.Result.Outcome == inboxkit.OutcomeProcessed && processed.Add(1) == int64(cfg.Messages) {
				doneOnce.Do(func() { close(done) })
			}
		}),
	})
	if err != nil {
		return res, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start = time.Now()
	go func() { runErr <- c.Run(rctx) }()
	select {
	case <-done:
		res.Consumed = time.Since(start)
	case err := <-runErr:
		return res, fmt.Errorf("consumer stopped after %d of %d: %v", processed.Load(), cfg.Messages, err)
	case <-ctx.Done():
		return res, fmt.Errorf("after %d of %d processed: %w", processed.Load(), cfg.Messages, ctx.Err())
	}
	cancel()
	if err := <-runErr; err != nil {
		return res, err
	}
	res.PerSecond = float64(cfg.Messages) / res.Consumed.Seconds()
	counts, err := store.CountByStatus(ctx)
	if err != nil {
		return res, err
	}
	if counts[inboxkit.StatusProcessed] != cfg.Messages || failures.Load() != 0 {
		return res, fmt.Errorf("inbox rows %v and %d failed settlements, want %d PROCESSED and none failed", counts, failures.Load(), cfg.Messages)
	}
	return res, nil
}
