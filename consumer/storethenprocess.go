package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// storeThenProcess is the engine of ModeStoreThenProcess: a delivery is
// stored as RECEIVED and acknowledged at once; Config.Concurrency leased
// workers process the stored entries, and their store publishes what they
// dead-letter or reject.
type storeThenProcess struct {
	c    *Consumer
	ws   []*inbox.Worker
	next atomic.Uint64 // round robin over ws for the receivers' claims
}

func newStoreThenProcess(c *Consumer) (*storeThenProcess, error) {
	e := &storeThenProcess{c: c}
	for i := 0; i < c.cfg.Concurrency; i++ {
		w, err := c.store.NewWorker(inbox.WorkerConfig{
			ConsumerName:  c.cfg.Name,
			HandleFunc:    inbox.MessageHandler(c.cfg.Handler),
			LeaseDuration: c.cfg.LeaseDuration,
			PollInterval:  c.cfg.WorkerPollInterval,
			Logger:        c.cfg.Logger,
			BatchSize:     c.cfg.workerBatch,
			EffectsInTx:   c.cfg.EffectsInTx,
			BatchFunc:     batchFunc(c.cfg),
		})
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		e.ws = append(e.ws, w)
	}
	return e, nil
}

// handle stores the delivery, then acknowledges it. A new entry without an
// order key is stored claimed by one of the workers (inbox.Worker.Receive:
// the lease written by the insert) and handed to it in process after the
// acknowledgement, so that no claim transaction and no poll stands between
// the store and the handler; a keyed entry is stored RECEIVED and claimed
// in its key's turn. A message that cannot be stored (no usable event id,
// a value the database refuses) is dead-lettered (inbox.Store.DeadLetter);
// a database error hands it back.
func (e *storeThenProcess) handle(ctx context.Context, d Delivery, m inboxkit.Message, entry inbox.Entry) Settled {
	c := e.c
	s := Settled{Message: m}
	rctx, cancel := c.cfg.bounded(ctx) // the database's work, not the acknowledgement
	defer cancel()
	w := e.ws[(e.next.Add(1)-1)%uint64(len(e.ws))]
	inserted, st, claim, err := w.Receive(rctx, entry, m.Headers, m.Body)
	if claim != nil {
		defer e.hand(ctx, w, *claim)
	}
	var rerr *inbox.ReceiveError
	switch {
	case errors.As(err, &rerr):
		s.Result, s.Err = c.store.DeadLetter(rctx, inbox.DeadLetter{Entry: entry, Class: rerr.InboxDecision().Class, Reason: rerr.Reason, Err: err})
		if a, ok := plainAck(s); ok {
			return c.ack(ctx, d, s, a)
		}
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	case err != nil:
		s.Err = err
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	case inserted || !st.Terminal(): // stored now, or stored before and not finished
		s.Result = inbox.Result{Outcome: inboxkit.OutcomeStored, Status: st}
	default:
		s.Result = inbox.Result{Outcome: inboxkit.OutcomeDuplicate, Status: st}
	}
	return c.ack(ctx, d, s, inboxkit.ActionAck)
}

// hand gives claim to w's Run; when w has stopped, the claim is released
// for the next claim of any worker (its lease would expire all the same).
func (e *storeThenProcess) hand(ctx context.Context, w *inbox.Worker, claim inbox.Claimed) {
	if w.Hand(ctx, claim) {
		return
	}
	if err := w.Release(context.WithoutCancel(ctx), claim); err != nil {
		e.c.cfg.Logger.Warn("consumer: release a stored entry; it is claimed after its lease", "consumer", e.c.cfg.Name, "event_id", claim.Message.ID, "error", err)
	}
}

// handleBatch handles each delivery alone (the workers batch; receivers
// that store at the same moment share one INSERT, inbox.Worker.Receive).
func (e *storeThenProcess) handleBatch(ctx context.Context, ds []Delivery, ms []inboxkit.Message) []Settled {
	out := make([]Settled, len(ds))
	for i, d := range ds {
		out[i] = e.c.handle(ctx, d, ms[i])
	}
	return out
}

func (e *storeThenProcess) batches() bool            { return false }
func (e *storeThenProcess) workers() []*inbox.Worker { return e.ws }

// start runs the workers until ctx is done; each finishes the entry in
// hand first.
func (e *storeThenProcess) start(ctx context.Context, wg *sync.WaitGroup) {
	for _, w := range e.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx, e.c.observeClaim)
		}()
	}
}

// observeClaim is the workers' inbox.Around: an entry a worker processes
// runs within Config.ProcessTimeout and is observed like a delivery, with the action its outcome stands for, and the
// summary counts its outcome (countWorker); the worker logs it.
func (c *Consumer) observeClaim(ctx context.Context, cl inbox.Claimed) (context.Context, func(inbox.Result, error)) {
	ctx, cancel := c.cfg.bounded(ctx)
	ctx, done := c.observeEntry(ctx, cl.Message)
	return ctx, func(res inbox.Result, err error) {
		cancel()
		s := Settled{Message: cl.Message, Result: res, Err: err}
		switch res.Outcome {
		case inboxkit.OutcomeProcessed, inboxkit.OutcomeDuplicate:
			s.Action = inboxkit.ActionAck
		case inboxkit.OutcomeRejected:
			s.Action = inboxkit.ActionReject
		case inboxkit.OutcomeDeadLetter:
			s.Action = inboxkit.ActionDeadLetter
		default: // retried after a backoff, or not recorded (the lease expires)
			s.Action = inboxkit.ActionRequeue
		}
		c.countWorker(res, err)
		done(s)
	}
}

// batchFunc is the workers' inbox.WorkerConfig.BatchFunc: the Observer's
// Batch when the workers' batch is above 1, else nil.
func batchFunc(cfg Config) func(n int) {
	if cfg.Observer != nil && cfg.workerBatch > 1 {
		return cfg.Observer.Batch
	}
	return nil
}
