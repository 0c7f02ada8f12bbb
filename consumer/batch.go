package consumer

import (
	"context"
	"database/sql"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// BatchObserver is implemented by an Observer that also wants the size of
// every batch of Config.BatchSize > 1 (the deliveries of one database
// transaction in ModeTransactional, the stored entries of one worker
// transaction in ModeStoreThenProcess; package observe keeps a histogram
// of them).
type BatchObserver interface {
	Batch(n int)
}

// batchFunc is the workers' inbox.WorkerConfig.BatchFunc: the Observer's
// Batch when it is a BatchObserver and BatchSize is above 1, else nil.
func batchFunc(cfg Config) func(n int) {
	if o, ok := cfg.Observer.(BatchObserver); ok && cfg.BatchSize > 1 {
		return o.Batch
	}
	return nil
}

// receiveBatch adds to first the deliveries the source has within
// Config.BatchWait, up to Config.BatchSize. A Receive error ends the batch;
// the loop's next Receive reports it if it lasts.
func (c *Consumer) receiveBatch(ctx context.Context, first Delivery) []Delivery {
	batch := []Delivery{first}
	wait, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for len(batch) < c.cfg.BatchSize {
		d, err := c.cfg.Source.Receive(wait)
		if err != nil {
			break
		}
		batch = append(batch, d)
	}
	return batch
}

// batchItem is one delivery of a batch on its way through HandleBatch.
type batchItem struct {
	i     int // index in the deliveries
	d     Delivery
	m     inboxkit.Message
	entry inbox.Entry
	ctx   context.Context // the delivery's (observed) context
	done  func(Settled)
}

// HandleBatch processes deliveries in one inbox transaction
// (inbox.Store.ProcessBatch) and then settles each one exactly as Handle
// settles a delivery with the same inbox result: acknowledgements only
// after the commit (rule 3), a dead letter's publish confirmed before its
// acknowledgement, in-process retries of a transient failure (the store's
// Retry.InProcessRetries) one delivery at a time. The deliveries that need
// nothing but an acknowledgement (processed, duplicate, rejected without a
// RejectQueue) are acknowledged first, together: with one AckBatch when the
// source is a BatchAcker (on RabbitMQ one frame where that is correct).
// When the batch's transaction does not commit, every delivery of it is
// handed back. The same event twice in one batch is processed once: the
// second is a duplicate. An oversize delivery is settled on its own, as by
// Handle. In ModeStoreThenProcess it calls Handle for each delivery (there
// the workers batch). Settled[i] is the settlement of ds[i]. Run calls it
// when Config.BatchSize is above 1 in ModeTransactional.
func (c *Consumer) HandleBatch(ctx context.Context, ds []Delivery) []Settled {
	out := make([]Settled, len(ds))
	if c.cfg.Mode == ModeStoreThenProcess {
		for i, d := range ds {
			out[i] = c.Handle(ctx, d)
		}
		return out
	}
	items := make([]batchItem, 0, len(ds))
	batch := make([]inbox.BatchItem, 0, len(ds))
	for i, d := range ds {
		it := batchItem{i: i, d: d, m: c.Message(d)}
		it.ctx, it.done = c.observe(ctx, it.m)
		it.entry = c.entry(it.m)
		if o, ok := d.(OversizeDelivery); ok {
			if size, _ := o.Oversize(); size > 0 {
				out[i] = c.oversize(it.ctx, o, it.m, it.entry)
				it.done(out[i])
				continue
			}
		}
		items = append(items, it)
		batch = append(batch, inbox.BatchItem{Entry: it.entry, Handler: c.handler(it.ctx, it.m)})
	}
	if len(batch) == 0 {
		return out
	}
	if o, ok := c.cfg.Observer.(BatchObserver); ok {
		o.Batch(len(batch))
	}
	results, err := c.cfg.Store.ProcessBatch(ctx, batch)
	// The deliveries that need nothing but an acknowledgement are
	// acknowledged first and together (ackAll); then the others are settled
	// one by one, with their in-process retries, publishes and requeues.
	plain := make([]bool, len(items))
	var acks []int
	for k, it := range items {
		if err != nil {
			break // not committed: all handed back
		}
		s := Settled{Message: it.m, Result: results[k]}
		if a, ok := c.plainAck(s); ok {
			s.Action = a
			out[it.i] = s
			plain[k] = true
			acks = append(acks, k)
		}
	}
	c.ackAll(ctx, items, acks, out)
	for k, it := range items {
		if plain[k] {
			continue
		}
		s := Settled{Message: it.m, Err: err}
		if err == nil {
			s.Result = results[k]
			if c.cfg.Store.Config().Retry.InProcessRetries != 0 {
				s.Result, s.Err = c.retry(it.ctx, it.entry, batch[k].Handler, s.Result, nil)
			}
		}
		out[it.i] = c.settle(it.ctx, it.d, it.entry, s)
		it.done(out[it.i])
	}
	return out
}

// ackAll acknowledges the items at idx, whose settlements in out carry
// their action, and finishes them as ack does: with one AckBatch when the
// source is a BatchAcker, else one Ack each.
func (c *Consumer) ackAll(ctx context.Context, items []batchItem, idx []int, out []Settled) {
	ba, ok := c.cfg.Source.(BatchAcker)
	if !ok || len(idx) < 2 {
		for _, k := range idx {
			it := items[k]
			out[it.i] = c.ack(it.ctx, it.d, out[it.i], out[it.i].Action)
			it.done(out[it.i])
		}
		return
	}
	ds := make([]Delivery, len(idx))
	for j, k := range idx {
		failpoint.Hit(failpoint.AfterCommitBeforeAck) // once per delivery, as ack
		ds[j] = items[k].d
	}
	errs := ba.AckBatch(ctx, ds)
	for j, k := range idx {
		it := items[k]
		out[it.i] = c.acked(out[it.i], errs[j])
		it.done(out[it.i])
	}
}

// handler is the inbox handler of m: Config.Handler with the delivery's
// context (which carries its observation) and m.
func (c *Consumer) handler(ctx context.Context, m inboxkit.Message) inbox.Handler {
	return func(_ context.Context, tx *sql.Tx) error { return c.cfg.Handler(ctx, tx, m) }
}
