package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// e2eRun is one contender consuming one loaded queue.
type e2eRun struct {
	AMQP     string // RabbitMQ URL (Watermill)
	Broker   e2eBroker
	DB       dbKind
	Queue    string
	Schema   *schema
	Handlers int
	Batch    int // inboxkit batch size; 0 or 1: single-message mode
	// EffectsInTx: consumer.Config.EffectsInTx (batches without savepoints,
	// a single delivery through Store.ProcessInTx).
	EffectsInTx bool
	Mode        consumer.Mode
	Distinct    int // events; store-then-process is done when its workers processed them all
	Prefetch    int
	Expect      int
}

// tally counts settled deliveries and says when all are in.
type tally struct {
	processed, duplicates, other atomic.Int64
	// stored counts store-then-process receipts (inboxkit.OutcomeStored):
	// there a delivery is settled when stored, processed by a worker
	// later, and done is when every delivery is received (stored or a
	// duplicate) and distinct events are processed.
	stored   atomic.Int64
	distinct int64
	last     atomic.Int64 // unix nanos of the last settlement
	expect   int64
	done     chan struct{}
	once     sync.Once
}

func newTally(expect int) *tally { return &tally{expect: int64(expect), done: make(chan struct{})} }

func (t *tally) add(c *atomic.Int64) {
	c.Add(1)
	t.last.Store(time.Now().UnixNano())
	all := t.processed.Load()+t.duplicates.Load() >= t.expect
	if t.distinct > 0 {
		all = t.processed.Load() >= t.distinct && t.stored.Load()+t.duplicates.Load() >= t.expect
	}
	if all {
		t.once.Do(func() { close(t.done) })
	}
}

// wait returns when every expected delivery settled, or an error when
// nothing settled for stall, or ctx ends.
func (t *tally) wait(ctx context.Context, stall time.Duration) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seen, since := int64(-1), time.Now()
	for {
		select {
		case <-t.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			n := t.processed.Load() + t.duplicates.Load() + t.other.Load() + t.stored.Load()
			if n != seen {
				seen, since = n, time.Now()
			} else if time.Since(since) > stall {
				return fmt.Errorf("stalled at %d of %d settled (processed %d, duplicates %d, other %d)", n, t.expect, t.processed.Load(), t.duplicates.Load(), t.other.Load())
			}
		}
	}
}

// letter is the business part every contender does per new event.
type invoice struct {
	InvoiceNo  string `json:"invoiceNo"`
	CustomerNo string `json:"customerNo"`
}

func decodeInvoice(body []byte) (invoice, error) {
	var v invoice
	if err := json.Unmarshal(body, &v); err != nil {
		return v, err
	}
	if v.InvoiceNo == "" || v.CustomerNo == "" {
		return v, errors.New("invoiceNo and customerNo are required")
	}
	return v, nil
}

// runInboxkit consumes with inboxkit's consumer (r.Mode; the default is
// transactional), the rabbitmq adapter as source and dead-letter
// publisher, and a handler writing one letter.
func runInboxkit(ctx context.Context, r e2eRun) (*tally, time.Duration, error) {
	store, err := openStore(ctx, r.Schema, r.DB, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		return nil, 0, err
	}
	src, err := r.Broker.adapter(ctx, r.Queue, r.Prefetch)
	if err != nil {
		return nil, 0, err
	}
	defer src.Close()
	t := newTally(r.Expect)
	if r.Mode == consumer.ModeStoreThenProcess {
		t.distinct = int64(r.Distinct)
	}
	cfg := consumer.Config{
		Name: "shipping-letters", Source: src, Store: store, DeadLetter: src, DeadLetterQueue: r.Queue + ".dlq",
		Concurrency: r.Handlers, Logger: quiet, SummaryInterval: -1, Mode: r.Mode,
		Handler: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			inv, err := decodeInvoice(m.Body)
			if err != nil {
				return classify.Poison("MALFORMED_PAYLOAD", err)
			}
			_, err = tx.ExecContext(ctx, r.DB.insertLetter, m.ID, inv.InvoiceNo, inv.CustomerNo)
			return err
		},
		Observer: consumer.ObserveSettled(func(s consumer.Settled) {
			switch s.Result.Outcome {
			case inboxkit.OutcomeProcessed:
				t.add(&t.processed)
			case inboxkit.OutcomeDuplicate:
				t.add(&t.duplicates)
			case inboxkit.OutcomeStored:
				t.add(&t.stored)
			default:
				t.add(&t.other)
			}
		}),
	}
	cfg.EffectsInTx = r.EffectsInTx
	if r.Batch > 1 {
		cfg.BatchSize = r.Batch
	}
	c, err := consumer.New(cfg)
	if err != nil {
		return nil, 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	werr := t.wait(ctx, 30*time.Second)
	elapsed := time.Duration(t.last.Load() - began.UnixNano())
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) && werr == nil {
		werr = err
	}
	return t, elapsed, werr
}

// rawInbox is the raw twin's inbox write: the columns inboxkit writes on
// its happy path, one row per event, the primary key detecting the resend.
const rawInbox = `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS)
VALUES ($1, 'shipping-letters', 'PROCESSED', $2, now(), now(), now(), 1)`

// runRaw is the hand-written twin: the broker's client and database/sql,
// no library: per delivery BEGIN, INSERT the inbox row (a duplicate key
// means a resend: ROLLBACK, ack), INSERT the letter, COMMIT, ack. No
// attempt counting, no classification, no dead letters: the floor a
// library adds its cost to. A delivery is counted after its ack or nack
// was sent, so that the channel is closed (stopConsuming) only once the
// last one is: an ack on a channel being closed makes RabbitMQ close the
// whole connection (channel_error), which the next consumer run shares.
func runRaw(ctx context.Context, r e2eRun) (*tally, time.Duration, error) {
	// The same table as inboxkit's, so the index work is the same.
	if _, err := openStore(ctx, r.Schema, r.DB, inbox.Config{}); err != nil {
		return nil, 0, err
	}
	t := newTally(r.Expect)
	began := time.Now()
	deliveries, stopConsuming, err := r.Broker.raw(ctx, r.Queue, r.Prefetch)
	if err != nil {
		return nil, 0, err
	}
	db := r.Schema.DB
	handle := func(d rawMsg) error {
		inv, err := decodeInvoice(d.body)
		if err != nil || d.id == "" {
			err := d.nack(false)
			t.add(&t.other)
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, r.DB.rawInbox, d.id, d.corr); err != nil {
			_ = tx.Rollback()
			if r.DB.isDuplicate(err) {
				err := d.ack()
				t.add(&t.duplicates)
				return err
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, r.DB.insertLetter, d.id, inv.InvoiceNo, inv.CustomerNo); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		err = d.ack()
		t.add(&t.processed)
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, r.Handlers)
	for range r.Handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				if err := handle(d); err != nil {
					_ = d.nack(true)
					t.add(&t.other)
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	werr := t.wait(ctx, 30*time.Second)
	elapsed := time.Duration(t.last.Load() - began.UnixNano())
	stopConsuming()
	wg.Wait()
	if werr != nil {
		select {
		case err := <-errs:
			werr = fmt.Errorf("%w (first handler error: %v)", werr, err)
		default:
		}
	}
	return t, elapsed, werr
}
