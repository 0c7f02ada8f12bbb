package consumer

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// Consumer runs the inbox around a handler for every delivery of a Source.
type Consumer struct {
	cfg   Config
	store *inbox.Store // Config.Store with the consumer's ports (see publish.go)
	eng   engine       // the mode's, chosen once by New
	order *orderer     // Config.OrderKeyFunc's scheduler; nil without it

	mu     sync.Mutex
	nextID uint64
	inHand map[uint64]holding // deliveries being handled by Run
	logs   logState
	gate   gate // intake, stopped during an outage
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Observer != nil {
		cfg.Handler = cfg.Observer.Handler(cfg.Handler)
	}
	cfg.Handler = withMessage(cfg.Handler)
	cfg.warnPrefetch()
	c := &Consumer{cfg: cfg, inHand: map[uint64]holding{}}
	store, err := cfg.Store.WithPorts(c.ports())
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c.store = store
	if cfg.Mode == ModeStoreThenProcess {
		c.eng, err = newStoreThenProcess(c)
	} else {
		c.eng = transactional{c}
	}
	if err != nil {
		return nil, err
	}
	if cfg.OrderKeyFunc != nil {
		c.order = newOrderer(c)
	}
	return c, nil
}

// engine is what a mode does with deliveries (transactional.go,
// storethenprocess.go); New chooses it once.
type engine interface {
	// handle settles one whole delivery.
	handle(ctx context.Context, d Delivery, m inboxkit.Message, entry inbox.Entry) Settled
	// handleBatch settles deliveries received together: out[i] is ds[i]'s,
	// ms[i] ds[i]'s message (Consumer.Message).
	handleBatch(ctx context.Context, ds []Delivery, ms []inboxkit.Message) []Settled
	// batches reports whether Run's receivers gather batches of BatchSize.
	batches() bool
	// start starts what the mode runs beside the receivers until ctx is
	// done (the workers), each goroutine added to wg.
	start(ctx context.Context, wg *sync.WaitGroup)
	// workers are the mode's leased workers (nil in ModeTransactional).
	workers() []*inbox.Worker
}

// requeueDelay is the delay before the broker redelivers a message whose
// attempts-th attempt failed: the store's retry policy.
func (c *Consumer) requeueDelay(attempts int) time.Duration {
	return c.cfg.Store.Config().Retry.RedeliveryDelay(attempts)
}

// Workers returns the leased workers of ModeStoreThenProcess (nil in
// ModeTransactional). Run runs them; tests may drive them directly.
func (c *Consumer) Workers() []*inbox.Worker { return c.eng.workers() }

// Run receives and handles deliveries with Config.Concurrency goroutines
// (in ModeStoreThenProcess Config.Receivers goroutines receive and store,
// Config.Concurrency workers handle) until ctx is done, then drains: it
// logs "draining N deliveries", stops intake, lets the deliveries in hand
// finish (their inbox transaction commits and they are acknowledged), and
// closes the source. It returns nil
// after a drain caused by ctx, or the source's error: a Receive error (the
// source could not repair itself) drains every goroutine the same way and
// is returned, so the process can exit and be restarted. A drain that takes
// longer than Config.ShutdownTimeout abandons what is still in hand and
// returns an error wrapping ErrShutdownTimeout, without waiting for it.
//
// With Config.OrderKeyFunc one goroutine receives and Config.Concurrency
// goroutines handle, one delivery of a key at a time; the deliveries held
// for their key and not yet begun are handed back when ctx is done (see
// "Order per key" in the package documentation).
func (c *Consumer) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// Deliveries in hand are finished when ctx is done, and cancelled only
	// when the drain times out.
	work, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var wg sync.WaitGroup
	loops, loop := c.cfg.Concurrency, c.loop
	switch {
	case c.order != nil:
		loops, loop = 1, c.order.run // its own receiver and Concurrency workers
	case c.cfg.Mode == ModeStoreThenProcess:
		loops = c.cfg.Receivers
	}
	errs := make(chan error, loops)
	c.eng.start(ctx, &wg)
	// The prober of outages runs until the receivers and workers are done.
	c.gate.start(ctx)
	probeCtx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		c.gate.probe(probeCtx, c.cfg.Store.Config().Retry.RedeliveryDelay, c.probe, c.logProbe)
	}()
	summaryDone := make(chan struct{})
	go func() { defer close(summaryDone); c.summarize(ctx) }()
	defer func() { stop(); <-summaryDone; c.logSummary() }()
	for range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx, work); err != nil {
				errs <- err
				stop() // the others drain too
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		stopProbe()
		<-probed
		close(done)
	}()
	if err := c.drain(ctx, done, abandon); err != nil {
		_ = c.cfg.Source.Close() // hands back what is not acknowledged
		return err
	}
	close(errs)
	cerr := c.cfg.Source.Close()
	for err := range errs {
		return err
	}
	if cerr != nil && !errors.Is(cerr, ErrClosed) {
		return fmt.Errorf("consumer: close source: %w", cerr)
	}
	return nil
}

// drain waits for done; once ctx is done it logs what is in hand and waits
// at most ShutdownTimeout more. On timeout it abandons the deliveries in
// hand, logs them and returns an error wrapping ErrShutdownTimeout.
func (c *Consumer) drain(ctx context.Context, done <-chan struct{}, abandon context.CancelFunc) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	held := c.held()
	c.cfg.Logger.Info(fmt.Sprintf("draining %d deliveries", len(held)), "consumer", c.cfg.Name,
		"event_ids", eventIDs(held), "shutdown_timeout", c.cfg.ShutdownTimeout)
	if c.cfg.ShutdownTimeout < 0 {
		<-done
		return nil
	}
	t := time.NewTimer(c.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	held = c.held()
	abandon()
	for _, m := range held {
		c.cfg.Logger.Error("shutdown timeout: delivery abandoned, not acknowledged (the broker delivers it again)",
			"consumer", c.cfg.Name, "event_id", m.id, "correlation_id", m.correlationID, "shutdown_timeout", c.cfg.ShutdownTimeout)
	}
	return fmt.Errorf("%w: %d after %s (event ids %v); they were not acknowledged and come again from the broker",
		ErrShutdownTimeout, len(held), c.cfg.ShutdownTimeout, eventIDs(held))
}

// holding is what a drain logs of a delivery in hand.
type holding struct{ id, correlationID string }

// hold records a delivery in hand; release forgets it.
func (c *Consumer) hold(m inboxkit.Message) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	c.inHand[c.nextID] = holding{m.ID, m.CorrelationID}
	return c.nextID
}

func (c *Consumer) release(id uint64) {
	c.mu.Lock()
	delete(c.inHand, id)
	c.mu.Unlock()
}

func (c *Consumer) held() []holding {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := make([]holding, 0, len(c.inHand))
	for _, m := range c.inHand {
		ms = append(ms, m)
	}
	return ms
}

func eventIDs(ms []holding) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.id
	}
	return ids
}

// loop receives until ctx is done and handles each delivery with work.
func (c *Consumer) loop(ctx, work context.Context) error {
	for {
		d, rx, trial, err := c.next(ctx)
		if d == nil {
			return err
		}
		// Deliveries in hand are finished even when ctx is cancelled now.
		if !c.eng.batches() {
			m := c.Message(d)
			id := c.hold(m)
			s := c.handle(work, d, m)
			c.release(id)
			if trial {
				c.gate.trialDone(!handedBack(s))
			}
			continue
		}
		batch := c.receiveBatch(rx, d)
		ms := c.messages(batch)
		ids := make([]uint64, len(batch))
		for i, m := range ms {
			ids[i] = c.hold(m)
		}
		ss := c.eng.handleBatch(work, batch, ms)
		for _, id := range ids {
			c.release(id)
		}
		if trial {
			c.gate.trialDone(!slices.ContainsFunc(ss, handedBack))
		}
	}
}

// next receives the next delivery while the gate lets it (see gate:
// during an outage only the trial) and PausedFunc does not pause intake.
// It returns the delivery, the context it was received with and whether it
// is the outage's trial (the caller then reports it with trialDone); or a
// nil delivery and the error that ends intake (nil once ctx is done or the
// source is closed).
func (c *Consumer) next(ctx context.Context) (d Delivery, rx context.Context, trial bool, err error) {
	for {
		if ctx.Err() != nil {
			return nil, nil, false, nil
		}
		if c.cfg.PausedFunc != nil && c.cfg.PausedFunc() {
			if !sleep(ctx, c.cfg.PollInterval) {
				return nil, nil, false, nil
			}
			continue
		}
		rx, trial, ok := c.gate.admit(ctx)
		if !ok {
			return nil, nil, false, nil
		}
		d, err := c.cfg.Source.Receive(rx)
		if err == nil {
			return d, rx, trial, nil
		}
		if trial {
			c.gate.trialDone(false)
		}
		switch {
		case ctx.Err() != nil, errors.Is(err, ErrClosed):
			return nil, nil, false, nil
		case rx.Err() != nil:
			continue // an outage began: intake stops
		}
		return nil, nil, false, fmt.Errorf("consumer %s: receive: %w", c.cfg.Name, err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Message returns the delivery's message with the event id and correlation
// id filled from the configured headers, and its order key
// (Config.OrderKeyFunc).
func (c *Consumer) Message(d Delivery) inboxkit.Message {
	m := d.Message()
	// The correlation id first: the event id source "correlation-id" reads it.
	m.CorrelationID = CorrelationID(m, c.cfg.CorrelationIDHeader)
	m.ID = m.Header(c.cfg.EventIDHeader)
	if c.cfg.EventIDFunc != nil {
		m.ID, m.EventIDSource = c.cfg.EventIDFunc(m)
	}
	if c.cfg.OrderKeyFunc != nil {
		m.OrderKey = c.cfg.OrderKeyFunc(m)
	}
	return m
}

// withMessage puts the message into the handler's ctx
// (inboxkit.ContextWithMessage), so that an outbox write from the handler
// records the event that caused it.
func withMessage(h Handler) Handler {
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		return h(inboxkit.ContextWithMessage(ctx, m), tx, m)
	}
}

// PayloadHash is the hex SHA-256 of a body, as stored in PAYLOAD_HASH.
func PayloadHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Handle processes one delivery and settles it: exactly one of Ack or
// Requeue is called on d. Run calls it; tests and custom loops may too.
// An oversize delivery is dead-lettered by the broker (oversize); every
// other one goes to the mode's engine: ModeStoreThenProcess stores and
// acknowledges, ModeTransactional runs the inbox transaction and settles
// what the inbox decided.
func (c *Consumer) Handle(ctx context.Context, d Delivery) Settled {
	return c.handle(ctx, d, c.Message(d))
}

// handle is Handle with the message of d made already (m = c.Message(d)).
func (c *Consumer) handle(ctx context.Context, d Delivery, m inboxkit.Message) (s Settled) {
	ctx, done := c.observe(ctx, m)
	defer func() { done(s) }()
	entry := c.entry(m)
	if o, ok := d.(OversizeDelivery); ok {
		if size, _ := o.Oversize(); size > 0 {
			return c.oversize(ctx, o, m, entry)
		}
	}
	return c.eng.handle(ctx, d, m, entry)
}

// HandleBatch processes deliveries in one inbox transaction
// (inbox.Store.ProcessBatch) and then settles each one exactly as Handle
// settles a delivery with the same inbox result: acknowledgements only
// after the commit (rule 3) and after the store published what it
// dead-lettered or rejected, in-process retries of a transient failure
// (the store's Retry.InProcessRetries) one delivery at a time. The
// deliveries that need nothing but an acknowledgement (all but retries and
// hand-backs) are acknowledged first, together: with one AckBatch when the
// source is a BatchAcker (on RabbitMQ one frame where that is correct).
// When the batch's transaction does not commit, every delivery of it is
// handed back. The same event twice in one batch is processed once: the
// second is a duplicate. An oversize delivery is settled on its own, as by
// Handle. In ModeStoreThenProcess it calls Handle for each delivery (there
// the workers batch). Settled[i] is the settlement of ds[i]. Run calls it
// when Config.BatchSize is above 1 in ModeTransactional.
func (c *Consumer) HandleBatch(ctx context.Context, ds []Delivery) []Settled {
	return c.eng.handleBatch(ctx, ds, c.messages(ds))
}

// messages are the messages of ds (Message), made once for a batch.
func (c *Consumer) messages(ds []Delivery) []inboxkit.Message {
	ms := make([]inboxkit.Message, len(ds))
	for i, d := range ds {
		ms[i] = c.Message(d)
	}
	return ms
}

// entry is the part of m the inbox records.
func (c *Consumer) entry(m inboxkit.Message) inbox.Entry {
	return inbox.Entry{
		EventID: m.ID, ConsumerName: c.cfg.Name, CorrelationID: m.CorrelationID,
		PayloadHash: PayloadHash(m.Body), Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount,
		FirstDelivery: m.FirstDelivery,
		EventIDSource: m.EventIDSource, OrderKey: m.OrderKey, Message: m,
	}
}

func (c *Consumer) ack(ctx context.Context, d Delivery, s Settled, a inboxkit.Action) Settled {
	s.Action = a
	failpoint.Hit(failpoint.AfterCommitBeforeAck)
	return c.acked(s, d.Ack(ctx))
}

// acked finishes s, whose delivery's acknowledgement returned err.
func (c *Consumer) acked(s Settled, err error) Settled {
	if err != nil {
		// The broker will deliver again; the inbox makes that a duplicate.
		s.Err = fmt.Errorf("consumer: ack: %w", err)
	}
	c.finish(s)
	return s
}

func (c *Consumer) requeue(ctx context.Context, d Delivery, s Settled, delay time.Duration) Settled {
	s.Action, s.Delay = inboxkit.ActionRequeue, delay
	if err := d.Requeue(ctx, delay); err != nil {
		err = fmt.Errorf("consumer: requeue: %w", err)
		s.Err = errors.Join(s.Err, err)
	}
	c.finish(s)
	return s
}

// finish reports a settled delivery: its line in the log (logLine), then
// count.
func (c *Consumer) finish(s Settled) {
	c.logLine(s)
	c.count(s)
}

// count reports a settled delivery without a log line: the summary and
// outage counts (logSettled); a hand-back because the runtime failed
// begins an outage (see gate).
func (c *Consumer) count(s Settled) {
	if handedBack(s) {
		c.gate.failed()
	}
	c.logSettled(s)
}
