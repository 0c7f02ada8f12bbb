package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// transactional is the engine of ModeTransactional: the handler runs in the
// inbox transaction while the delivery is unacknowledged; the delivery is
// acknowledged after the commit, and after the store published what it
// dead-lettered or rejected.
type transactional struct{ c *Consumer }

func (t transactional) handle(ctx context.Context, d Delivery, m inboxkit.Message, entry inbox.Entry) Settled {
	res, err := t.c.process(ctx, entry, m)
	return t.c.settle(ctx, d, Settled{Message: m, Result: res, Err: err})
}

func (t transactional) batches() bool                          { return t.c.cfg.BatchSize > 1 }
func (t transactional) start(context.Context, *sync.WaitGroup) {}
func (t transactional) workers() []*inbox.Worker               { return nil }

// process runs the handler for m in the inbox transaction, and again in
// process while the failure is transient, as many times as the store's
// Retry.InProcessRetries allows; each try within Config.ProcessTimeout.
func (c *Consumer) process(ctx context.Context, entry inbox.Entry, m inboxkit.Message) (inbox.Result, error) {
	res, err := c.try(ctx, entry, m)
	if c.cfg.Store.Config().Retry.InProcessRetries == 0 {
		return res, err
	}
	return c.retry(ctx, entry, m, res, err)
}

// try is one Store.Process of m within Config.ProcessTimeout: the handler
// and the inbox's statements run under its deadline.
func (c *Consumer) try(ctx context.Context, entry inbox.Entry, m inboxkit.Message) (inbox.Result, error) {
	ctx, cancel := c.cfg.bounded(ctx)
	defer cancel()
	if c.cfg.EffectsInTx {
		return c.store.ProcessInTx(ctx, entry, c.handler(ctx, m))
	}
	return c.store.Process(ctx, entry, c.handler(ctx, m))
}

// retry retries a delivery in process while the failure of the try that
// gave res and err is transient, with the store's Retry.InProcess backoff,
// and returns the last try's result. classify.Do returns at once unless it
// is.
func (c *Consumer) retry(ctx context.Context, entry inbox.Entry, m inboxkit.Message, res inbox.Result, err error) (inbox.Result, error) {
	last := failure(res, err)
	if last == nil {
		return res, err
	}
	// Further tries are not broker redeliveries: nothing to pre-count.
	entry.Redelivered, entry.DeliveryCount, entry.FirstDelivery = false, 0, false
	tried := false // Do's first call reports the try already made
	st := c.cfg.Store.Config()
	_ = classify.Do(ctx, st.Retry, st.ClassifyFunc, func(ctx context.Context) error {
		if tried {
			res, err = c.try(ctx, entry, m)
			last = failure(res, err)
		}
		tried = true
		return last
	})
	return res, err
}

// settle tells the broker what the inbox decided for one delivery of the
// transactional path: s carries the inbox's Result, or in Err the error of
// an inbox that could not record it or publish its letter (the delivery is
// then handed back). The inbox published dead letters and rejections
// already (its ports): what is left is the acknowledgement.
func (c *Consumer) settle(ctx context.Context, d Delivery, s Settled) Settled {
	if a, ok := plainAck(s); ok {
		return c.ack(ctx, d, s, a)
	}
	if s.Err != nil {
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	}
	if s.Result.Outcome != inboxkit.OutcomeRetry {
		s.Err = fmt.Errorf("consumer: unknown outcome %q", s.Result.Outcome)
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	}
	delay := s.Result.RetryAfter
	if delay == 0 {
		delay = c.requeueDelay(max(s.Result.Attempts, 1))
	}
	return c.requeue(ctx, d, s, delay)
}

// plainAck returns the action of a settlement that needs nothing but an
// acknowledgement of the delivery (ok true): every one the inbox recorded
// for good (processed, duplicate, rejected, dead-lettered), or found stored
// for a worker of ModeStoreThenProcess. A retry and a runtime error
// requeue.
func plainAck(s Settled) (a inboxkit.Action, ok bool) {
	if s.Err != nil {
		return "", false
	}
	switch s.Result.Outcome {
	case inboxkit.OutcomeProcessed, inboxkit.OutcomeDuplicate, inboxkit.OutcomeStored:
		return inboxkit.ActionAck, true
	case inboxkit.OutcomeRejected:
		return inboxkit.ActionReject, true
	case inboxkit.OutcomeDeadLetter:
		return inboxkit.ActionDeadLetter, true
	}
	return "", false
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

// handleBatch is HandleBatch in ModeTransactional: one ProcessBatch
// transaction, then each delivery settled as handle settles one with the
// same result; those the inbox recorded for good acknowledged together
// (ackAll), the others one by one with their in-process retries and
// requeues.
func (t transactional) handleBatch(ctx context.Context, ds []Delivery, ms []inboxkit.Message) []Settled {
	c := t.c
	out := make([]Settled, len(ds))
	items := make([]batchItem, 0, len(ds))
	batch := make([]inbox.BatchItem, 0, len(ds))
	for i, d := range ds {
		it := batchItem{i: i, d: d, m: ms[i]}
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
		batch = append(batch, inbox.BatchItem{Entry: it.entry, Handler: c.handler(it.ctx, it.m), Context: it.ctx, EffectsInTx: c.cfg.EffectsInTx})
	}
	if len(batch) == 0 {
		return out
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.Batch(len(batch))
	}
	results, err := c.processBatch(ctx, items, batch)
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
		if a, ok := plainAck(s); ok {
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
			if errors.Is(s.Result.Err, inbox.ErrNotRecorded) {
				s.Err = s.Result.Err // the database or the DLQ failed: hand it back
			} else if c.cfg.Store.Config().Retry.InProcessRetries != 0 {
				s.Result, s.Err = c.retry(it.ctx, it.entry, it.m, s.Result, nil)
			}
		}
		out[it.i] = c.settle(it.ctx, it.d, s)
		it.done(out[it.i])
	}
	return out
}

// processBatch is one Store.ProcessBatch within Config.ProcessTimeout:
// every item's handler and statements run under the batch's deadline; the
// items' own contexts (their acknowledgements') are not bounded.
func (c *Consumer) processBatch(ctx context.Context, items []batchItem, batch []inbox.BatchItem) ([]inbox.Result, error) {
	ctx, cancel := c.cfg.bounded(ctx)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		for k, it := range items {
			ictx, icancel := context.WithDeadline(it.ctx, dl)
			defer icancel()
			batch[k].Context, batch[k].Handler = ictx, c.handler(ictx, it.m)
		}
	}
	return c.store.ProcessBatch(ctx, batch)
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
		ds[j] = unwrap(items[k].d)
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

// failure is the error an in-process retry decides on: the inbox's own
// error, or the handler's error of a RETRY outcome.
func failure(res inbox.Result, err error) error {
	if err != nil {
		return err
	}
	if res.Outcome == inboxkit.OutcomeRetry {
		return res.Err
	}
	return nil
}
