package consumer

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// Handler does the business work for one message inside the inbox
// transaction. All its database writes go through tx; it must not commit or
// roll back. Its error decides what happens to the message: wrap it with
// classify.Reject (business rejection: recorded, acknowledged, never
// retried), classify.Poison (dead-lettered at once) or return it plain
// (technical: handed back for redelivery until the backout threshold).
type Handler func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error

// Settled reports one settled delivery to Config.OnSettled.
type Settled struct {
	Message inboxkit.Message
	Result  inbox.Result
	Action  inboxkit.Action
	// Delay is the requeue delay for inboxkit.ActionRequeue.
	Delay time.Duration
	// Err is an error of the runtime itself (inbox down, DLQ publish
	// failed); the delivery was then handed back to the broker.
	Err error
}

// Mode chooses the inbox variant of a consumer.
type Mode string

// Modes.
const (
	// ModeTransactional runs the handler in the inbox transaction while the
	// delivery is unacknowledged, and acknowledges after the commit.
	ModeTransactional Mode = "transactional"
	// ModeStoreThenProcess stores the message as RECEIVED and acknowledges
	// at once; Config.Concurrency leased workers process the stored entries.
	ModeStoreThenProcess Mode = "store-then-process"
)

// Config configures a Consumer. Zero values mean the documented defaults.
// Every field works in both modes, except LeaseDuration and
// WorkerPollInterval (ModeStoreThenProcess only), which New refuses in
// ModeTransactional rather than ignore.
//
// The retry and backout policy is not configured here but once, on the
// Store (inbox.Config.Retry, an inboxkit.RetryPolicy): the backout
// threshold, the redelivery delay asked of the broker after a technical
// failure (a handler error's RetryAfter wins; in ModeStoreThenProcess the
// workers wait the same delay), and the in-process retries of a transient
// failure (ModeTransactional only: New refuses a store with
// InProcessRetries in ModeStoreThenProcess).
type Config struct {
	// Name is the consumer name, stored in CONSUMER_NAME. Required.
	Name string
	// Source delivers the messages. Required.
	Source Source
	// Store is the inbox. Required.
	Store *inbox.Store
	// Handler does the work. Required.
	Handler Handler
	// DeadLetter publishes dead letters. Required: nothing is ever dropped.
	DeadLetter dlq.Publisher
	// DeadLetterQueue is the destination of dead letters. Required.
	DeadLetterQueue string
	// RejectQueue, if set, receives business rejections (with the same
	// envelope headers) for people to clarify; published with Rejects
	// (defaults to DeadLetter). Publishing is at least once: a rejection
	// whose publish failed is published again when the broker redelivers.
	RejectQueue string
	// Rejects publishes to RejectQueue. Defaults to DeadLetter.
	Rejects dlq.Publisher
	// EventIDHeader is the header holding the event id. Defaults to "eventId".
	// Ignored when EventIDFunc is set.
	EventIDHeader string
	// EventIDFunc, if set, derives the event id for producers that send no
	// event id header: EventIDChain or ParseEventIDChain build one from
	// headers, JSON and XML fields, the broker's correlation and message id
	// (see IDSource for what each protects against). The source used is
	// logged and stored in EVENT_ID_SOURCE. Nil: the EventIDHeader header.
	EventIDFunc EventIDFunc
	// CorrelationIDHeader is the header holding the correlation id. Defaults
	// to "correlationId"; when it is absent the broker's own correlation id
	// ("correlation-id", as JMS producers set JMSCorrelationID) is used (see
	// CorrelationID). The event id source "correlation-id" reads the same.
	CorrelationIDHeader string
	// Mode is the inbox variant. Defaults to ModeTransactional.
	Mode Mode
	// Concurrency is the number of deliveries handled at once (in
	// ModeStoreThenProcess: the number of receivers, and of workers).
	// Defaults to 1. Set the broker's prefetch to at least this.
	Concurrency int
	// BatchSize is the number of deliveries handled in one database
	// transaction. In ModeTransactional (inbox.Store.ProcessBatch) a batch
	// closes at BatchSize deliveries or BatchWait after its first, commits
	// once, and only then are its deliveries acknowledged, each settled as
	// a single delivery with the same inbox result is (see HandleBatch); a
	// batch that does not commit is handed back whole. Each of the
	// Concurrency goroutines fills batches of its own, so set the broker's
	// prefetch to at least BatchSize × Concurrency. In
	// ModeStoreThenProcess it is the workers' batch
	// (inbox.WorkerConfig.BatchSize); the receivers store one message per
	// transaction. Defaults to 1: one transaction per delivery. At most
	// 1000.
	BatchSize int
	// BatchWait is how long a batch of ModeTransactional waits for more
	// deliveries after its first before it is processed, so that low
	// traffic keeps a low latency. Defaults to 5ms; used when BatchSize is
	// above 1.
	BatchWait time.Duration
	// LeaseDuration is the workers' lease (see inbox.WorkerConfig). Only
	// for ModeStoreThenProcess: New refuses it in ModeTransactional.
	// Defaults to 30s.
	LeaseDuration time.Duration
	// WorkerPollInterval is how long an idle worker waits before it looks
	// for stored entries again. Only for ModeStoreThenProcess: New refuses
	// it in ModeTransactional. Defaults to 200ms.
	WorkerPollInterval time.Duration
	// PausedFunc, if set, is asked before each receive; while it returns
	// true, intake pauses (e.g. while a circuit breaker is open:
	// breaker.Open). Deliveries in hand are finished.
	PausedFunc func() bool
	// PollInterval is how often a consumer paused by PausedFunc looks
	// again (an outage is probed with the store's Retry.Redelivery backoff
	// instead: see "Outages" in the package documentation). Defaults to
	// 200ms.
	PollInterval time.Duration
	// Logger logs every settlement with event_id and correlation_id.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Clock stamps dead letters. Defaults to the store's clock if it is set
	// there, else the system clock.
	Clock inboxkit.Clock
	// OnSettled, if set, is called after each delivery was settled (for
	// metrics, progress and tests). It must not block for long.
	OnSettled func(Settled)
	// ShutdownTimeout bounds Run's drain after its ctx is done. Deliveries
	// still in hand after it (a hung database connection, a handler that
	// does not return) are abandoned: their context is cancelled, they are
	// not acknowledged (the broker delivers them again, the inbox makes any
	// that did commit a duplicate), they are logged, and Run returns an
	// error wrapping ErrShutdownTimeout. Defaults to 30s; negative waits
	// without bound.
	ShutdownTimeout time.Duration
	// Observer, if set, watches every delivery (metrics, traces; see
	// package observe). Defaults to nil: nothing is observed.
	Observer Observer
	// SummaryInterval is how often a summary line (counts since the last
	// one) is logged at info level, and how often an ongoing outage is
	// logged again; the line per settled message is at debug level.
	// Defaults to 1 minute; negative turns the summary off.
	SummaryInterval time.Duration
}

// maxBatchSize bounds Config.BatchSize.
const maxBatchSize = 1000

// ErrShutdownTimeout is wrapped by Run's error when deliveries in hand were
// abandoned after Config.ShutdownTimeout.
var ErrShutdownTimeout = errors.New("consumer: shutdown timeout: deliveries in hand abandoned")

func (c *Config) setDefaults() {
	if c.EventIDHeader == "" {
		c.EventIDHeader = "eventId"
	}
	if c.CorrelationIDHeader == "" {
		c.CorrelationIDHeader = DefaultCorrelationIDHeader
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.Mode == "" {
		c.Mode = ModeTransactional
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1
	}
	if c.BatchWait == 0 {
		c.BatchWait = 5 * time.Millisecond
	}
	if c.WorkerPollInterval == 0 && c.Mode == ModeStoreThenProcess {
		c.WorkerPollInterval = 200 * time.Millisecond
	}
	if c.SummaryInterval == 0 {
		c.SummaryInterval = time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rejects == nil {
		c.Rejects = c.DeadLetter
	}
	if c.Clock == nil && c.Store != nil {
		c.Clock = c.Store.Config().Clock
	}
	if c.Clock == nil {
		c.Clock = inboxkit.SystemClock{}
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
}

func (c *Config) validate() error {
	missing := func(field, hint string) error {
		return fmt.Errorf("consumer: Config.%s is required: %s", field, hint)
	}
	switch {
	case c.Name == "":
		return missing("Name", "it is the CONSUMER_NAME of every inbox row, e.g. \"invoice-consumer\"")
	case len(c.Name) > inbox.MaxConsumerNameLength:
		return fmt.Errorf("consumer: Config.Name is %d bytes, at most %d fit CONSUMER_NAME", len(c.Name), inbox.MaxConsumerNameLength)
	case c.Source == nil:
		return missing("Source", "a broker adapter such as stomp.Open")
	case c.Store == nil:
		return missing("Store", "inbox.New(db, dialect, cfg)")
	case c.Handler == nil:
		return missing("Handler", "the business function")
	case c.DeadLetter == nil:
		return missing("DeadLetter", "a dlq.Publisher; without it poison messages would have nowhere to go")
	case c.DeadLetterQueue == "":
		return missing("DeadLetterQueue", "e.g. \"DLQ.invoices\"")
	case c.Concurrency < 0:
		return fmt.Errorf("consumer: Config.Concurrency is %d, it must be positive", c.Concurrency)
	case c.Mode != ModeTransactional && c.Mode != ModeStoreThenProcess:
		return fmt.Errorf("consumer: Config.Mode %q is unknown: use %q or %q", c.Mode, ModeTransactional, ModeStoreThenProcess)
	case c.BatchSize < 1 || c.BatchSize > maxBatchSize:
		return fmt.Errorf("consumer: Config.BatchSize is %d: it must be between 1 and %d", c.BatchSize, maxBatchSize)
	case c.BatchWait < 0:
		return fmt.Errorf("consumer: Config.BatchWait is negative (%s)", c.BatchWait)
	}
	return c.validateMode()
}

// validateMode refuses the fields that one mode would silently ignore.
func (c *Config) validateMode() error {
	onlySTP := func(field string, v time.Duration) error {
		return fmt.Errorf("consumer: Config.%s is %s, but Mode is %q, which has no workers to use it: remove it, or set Mode to %q",
			field, v, c.Mode, ModeStoreThenProcess)
	}
	switch {
	case c.Mode == ModeTransactional && c.LeaseDuration != 0:
		return onlySTP("LeaseDuration", c.LeaseDuration)
	case c.Mode == ModeTransactional && c.WorkerPollInterval != 0:
		return onlySTP("WorkerPollInterval", c.WorkerPollInterval)
	case c.Mode == ModeStoreThenProcess && c.Store.Config().Retry.InProcessRetries != 0:
		return fmt.Errorf("consumer: the Store's inbox.Config.Retry.InProcessRetries is %d, but Mode %q does not retry in process "+
			"(its workers retry a failed entry after Retry.Redelivery): set InProcessRetries to 0 for this store, or use Mode %q",
			c.Store.Config().Retry.InProcessRetries, c.Mode, ModeTransactional)
	}
	return nil
}

// requeueDelay is the delay before the broker redelivers a message whose
// attempts-th attempt failed: the store's retry policy.
func (c *Consumer) requeueDelay(attempts int) time.Duration {
	return c.cfg.Store.Config().Retry.RedeliveryDelay(attempts)
}

// Consumer runs the inbox around a handler for every delivery of a Source.
type Consumer struct {
	cfg     Config
	workers []*inbox.Worker

	mu     sync.Mutex
	nextID uint64
	inHand map[uint64]inboxkit.Message // deliveries being handled by Run
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
	c := &Consumer{cfg: cfg, inHand: map[uint64]inboxkit.Message{}}
	if cfg.Mode == ModeStoreThenProcess {
		for i := 0; i < cfg.Concurrency; i++ {
			w, err := cfg.Store.NewWorker(inbox.WorkerConfig{
				ConsumerName:   cfg.Name,
				HandleFunc:     inbox.MessageHandler(cfg.Handler),
				DeadLetterFunc: c.deadLetterStored,
				RejectFunc:     c.rejectFunc(),
				LeaseDuration:  cfg.LeaseDuration,
				PollInterval:   cfg.WorkerPollInterval,
				Logger:         cfg.Logger,
				ObserveFunc:    c.observeStored(),
				BatchSize:      cfg.BatchSize,
				BatchFunc:      batchFunc(cfg),
			})
			if err != nil {
				return nil, fmt.Errorf("consumer: %w", err)
			}
			c.workers = append(c.workers, w)
		}
	}
	return c, nil
}

// Workers returns the leased workers of ModeStoreThenProcess (nil in
// ModeTransactional). Run runs them; tests may drive them directly.
func (c *Consumer) Workers() []*inbox.Worker { return c.workers }

// Run receives and handles deliveries with Config.Concurrency goroutines
// until ctx is done, then drains: it logs "draining N deliveries", stops
// intake, lets the deliveries in hand finish (their inbox transaction
// commits and they are acknowledged), and closes the source. It returns nil
// after a drain caused by ctx, or the source's error: a Receive error (the
// source could not repair itself) drains every goroutine the same way and
// is returned, so the process can exit and be restarted. A drain that takes
// longer than Config.ShutdownTimeout abandons what is still in hand and
// returns an error wrapping ErrShutdownTimeout, without waiting for it.
func (c *Consumer) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// Deliveries in hand are finished when ctx is done, and cancelled only
	// when the drain times out.
	work, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var wg sync.WaitGroup
	errs := make(chan error, c.cfg.Concurrency)
	for _, w := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx) // returns when ctx is done, after the entry in hand
		}()
	}
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
	for i := 0; i < c.cfg.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.loop(ctx, work); err != nil {
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
			"consumer", c.cfg.Name, "event_id", m.ID, "correlation_id", m.CorrelationID, "shutdown_timeout", c.cfg.ShutdownTimeout)
	}
	return fmt.Errorf("%w: %d after %s (event ids %v); they were not acknowledged and come again from the broker",
		ErrShutdownTimeout, len(held), c.cfg.ShutdownTimeout, eventIDs(held))
}

// hold records a delivery in hand; release forgets it.
func (c *Consumer) hold(m inboxkit.Message) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	c.inHand[c.nextID] = m
	return c.nextID
}

func (c *Consumer) release(id uint64) {
	c.mu.Lock()
	delete(c.inHand, id)
	c.mu.Unlock()
}

func (c *Consumer) held() []inboxkit.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := make([]inboxkit.Message, 0, len(c.inHand))
	for _, m := range c.inHand {
		ms = append(ms, m)
	}
	return ms
}

func eventIDs(ms []inboxkit.Message) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// loop receives until ctx is done and handles each delivery with work. It
// takes deliveries only while the gate lets it (see gate: during an
// outage only the trial).
func (c *Consumer) loop(ctx, work context.Context) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		if c.cfg.PausedFunc != nil && c.cfg.PausedFunc() {
			if !sleep(ctx, c.cfg.PollInterval) {
				return nil
			}
			continue
		}
		rx, trial, ok := c.gate.admit(ctx)
		if !ok {
			return nil
		}
		d, err := c.cfg.Source.Receive(rx)
		if err != nil {
			if trial {
				c.gate.trialDone(false)
			}
			switch {
			case ctx.Err() != nil, errors.Is(err, ErrClosed):
				return nil
			case rx.Err() != nil:
				continue // an outage began: intake stops
			}
			return fmt.Errorf("consumer %s: receive: %w", c.cfg.Name, err)
		}
		// Deliveries in hand are finished even when ctx is cancelled now.
		var ss []Settled
		if c.cfg.BatchSize == 1 || c.cfg.Mode == ModeStoreThenProcess { // its workers batch
			id := c.hold(c.Message(d))
			ss = []Settled{c.Handle(work, d)}
			c.release(id)
		} else {
			batch := c.receiveBatch(rx, d)
			ids := make([]uint64, len(batch))
			for i, d := range batch {
				ids[i] = c.hold(c.Message(d))
			}
			ss = c.HandleBatch(work, batch)
			for _, id := range ids {
				c.release(id)
			}
		}
		if trial {
			c.gate.trialDone(!slices.ContainsFunc(ss, handedBack))
		}
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
// id filled from the configured headers.
func (c *Consumer) Message(d Delivery) inboxkit.Message {
	m := d.Message()
	// The correlation id first: the event id source "correlation-id" reads it.
	m.CorrelationID = CorrelationID(m, c.cfg.CorrelationIDHeader)
	m.ID = m.Header(c.cfg.EventIDHeader)
	if c.cfg.EventIDFunc != nil {
		m.ID, m.EventIDSource = c.cfg.EventIDFunc(m)
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
// It only dispatches: an oversize delivery is dead-lettered by the broker
// (oversize), ModeStoreThenProcess stores and acknowledges (store), and
// ModeTransactional runs the inbox transaction (process) and settles what
// the inbox decided (settle).
func (c *Consumer) Handle(ctx context.Context, d Delivery) (s Settled) {
	m := c.Message(d)
	ctx, done := c.observe(ctx, m)
	defer func() { done(s) }()
	entry := c.entry(m)
	if o, ok := d.(OversizeDelivery); ok {
		if size, _ := o.Oversize(); size > 0 {
			return c.oversize(ctx, o, m, entry)
		}
	}
	if c.cfg.Mode == ModeStoreThenProcess {
		return c.store(ctx, d, m, entry)
	}
	res, err := c.process(ctx, entry, m)
	return c.settle(ctx, d, entry, Settled{Message: m, Result: res, Err: err})
}

// entry is the part of m the inbox records.
func (c *Consumer) entry(m inboxkit.Message) inbox.Entry {
	return inbox.Entry{
		EventID: m.ID, ConsumerName: c.cfg.Name, CorrelationID: m.CorrelationID,
		PayloadHash: PayloadHash(m.Body), Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount,
		FirstDelivery: m.FirstDelivery,
		EventIDSource: m.EventIDSource,
	}
}

// process runs the handler for m in the inbox transaction, and again in
// process while the failure is transient, as many times as the store's
// Retry.InProcessRetries allows.
func (c *Consumer) process(ctx context.Context, entry inbox.Entry, m inboxkit.Message) (inbox.Result, error) {
	handler := c.handler(ctx, m)
	res, err := c.cfg.Store.Process(ctx, entry, handler)
	if c.cfg.Store.Config().Retry.InProcessRetries == 0 {
		return res, err
	}
	return c.retry(ctx, entry, handler, res, err)
}

// retry retries a delivery in process while the failure of the try that
// gave res and err is transient, with the store's Retry.InProcess backoff,
// and returns the last try's result. classify.Do returns at once unless it
// is.
func (c *Consumer) retry(ctx context.Context, entry inbox.Entry, h inbox.Handler, res inbox.Result, err error) (inbox.Result, error) {
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
			res, err = c.cfg.Store.Process(ctx, entry, h)
			last = failure(res, err)
		}
		tried = true
		return last
	})
	return res, err
}

// settle tells the broker what the inbox decided for one delivery of the
// transactional path: s carries the inbox's Result, or in Err the error of
// an inbox that could not record it (the delivery is then handed back).
func (c *Consumer) settle(ctx context.Context, d Delivery, entry inbox.Entry, s Settled) Settled {
	if a, ok := c.plainAck(s); ok {
		return c.ack(ctx, d, s, a)
	}
	if s.Err != nil {
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	}
	res := s.Result
	switch res.Outcome {
	case inboxkit.OutcomeDuplicate, inboxkit.OutcomeRejected: // with a RejectQueue (see plainAck)
		return c.reject(ctx, d, s, entry)
	case inboxkit.OutcomeRetry:
		delay := res.RetryAfter
		if delay == 0 {
			delay = c.requeueDelay(max(res.Attempts, 1))
		}
		return c.requeue(ctx, d, s, delay)
	case inboxkit.OutcomeDeadLetter:
		return c.deadLetter(ctx, d, s, entry)
	}
	s.Err = fmt.Errorf("consumer: unknown outcome %q", res.Outcome)
	return c.requeue(ctx, d, s, c.requeueDelay(1))
}

// plainAck returns the action of a settlement that needs nothing but an
// acknowledgement of the delivery (ok true): a processed message, a
// duplicate, a business rejection without a RejectQueue. Every other one
// publishes (a dead letter, a rejection to RejectQueue) or requeues first.
func (c *Consumer) plainAck(s Settled) (a inboxkit.Action, ok bool) {
	if s.Err != nil {
		return "", false
	}
	switch s.Result.Outcome {
	case inboxkit.OutcomeProcessed, inboxkit.OutcomeStored:
		return inboxkit.ActionAck, true
	case inboxkit.OutcomeDuplicate:
		// The first delivery of a rejection may have died between its
		// commit and its publish to RejectQueue: a redelivery publishes.
		if s.Result.Status == inboxkit.StatusRejected && s.Message.Redelivered && c.cfg.RejectQueue != "" {
			return "", false
		}
		return inboxkit.ActionAck, true
	case inboxkit.OutcomeRejected:
		if c.cfg.RejectQueue == "" {
			return inboxkit.ActionReject, true
		}
	}
	return "", false
}

// envelope is the dead-letter (or rejection) envelope of m for the inbox
// result res; r is the event's row (the zero Record when there is none),
// for the times of the failures and what res does not say.
func (c *Consumer) envelope(m inboxkit.Message, res inbox.Result, r inbox.Record) dlq.Envelope {
	e := dlq.Envelope{
		Body: m.Body, Original: m.Headers, Reason: res.Reason, Class: string(res.Class), Attempts: res.Attempts,
		Consumer: c.cfg.Name, OriginalDestination: m.Destination, EventID: m.ID, CorrelationID: m.CorrelationID,
		DeadLetteredAt: c.cfg.Clock.Now(),
	}
	if res.Err != nil {
		e.Error = res.Err.Error()
	}
	if r.EventID != "" {
		if r.FirstFailedAt != nil {
			e.FirstFailure = *r.FirstFailedAt
		}
		if r.UpdatedAt != nil && r.Status == inboxkit.StatusTechnicalFailure {
			e.LastFailure = *r.UpdatedAt
		}
		if e.Error == "" {
			e.Error = r.LastError
		}
		if e.Reason == "" {
			e.Reason = r.ReasonCode
		}
	}
	if e.LastFailure.IsZero() {
		e.LastFailure = e.DeadLetteredAt
	}
	if e.FirstFailure.IsZero() {
		e.FirstFailure = e.LastFailure
	}
	return e
}

// row reads the event's row for an envelope; the zero Record when it has
// none (or the entry no usable event id).
func (c *Consumer) row(ctx context.Context, entry inbox.Entry) inbox.Record {
	if entry.EventID == "" || len(entry.EventID) > inbox.MaxEventIDLength {
		return inbox.Record{}
	}
	r, err := c.cfg.Store.Get(ctx, entry.EventID, c.cfg.Name)
	if err != nil {
		return inbox.Record{}
	}
	return r
}

// deadLetter publishes the delivery's dead letter once (see
// inbox.Store.PublishDeadLetter), then acknowledges it; a delivery whose
// event another one dead-lettered meanwhile is acknowledged as the
// duplicate it is.
func (c *Consumer) deadLetter(ctx context.Context, d Delivery, s Settled, entry inbox.Entry) Settled {
	publish := func(ctx context.Context, dl inbox.DeadLetter, r inbox.Record) error {
		s.Result.Reason = dl.Reason
		env := c.envelope(s.Message, s.Result, r)
		if err := c.cfg.DeadLetter.Publish(ctx, c.cfg.DeadLetterQueue, env.Headers(), env.Body); err != nil {
			return fmt.Errorf("consumer: publish to dead-letter queue %s: %w (message handed back to the broker)", c.cfg.DeadLetterQueue, err)
		}
		failpoint.Hit(failpoint.AfterDLQPublishBeforeMark) // no-op unless built with -tags failpoints
		return nil
	}
	st, published, err := c.cfg.Store.PublishDeadLetter(ctx, inbox.DeadLetter{Entry: entry, Class: s.Result.Class, Reason: s.Result.Reason, Err: s.Result.Err}, publish)
	if err != nil {
		s.Err = err
		c.forgetPoisonAttempt(ctx, s, entry)
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	}
	if !published {
		// Another delivery of the event finished it meanwhile.
		s.Result = inbox.Result{Outcome: inboxkit.OutcomeDuplicate, Status: st, Attempts: s.Result.Attempts}
		return c.ack(ctx, d, s, inboxkit.ActionAck)
	}
	if st != "" {
		s.Result.Status = st
	}
	return c.ack(ctx, d, s, inboxkit.ActionDeadLetter)
}

// forgetPoisonAttempt takes back the attempt of a poison message that is
// handed back because the DLQ or the database was unreachable: such a
// delivery is no attempt, so the redelivery dead-letters it with its poison
// reason, not MAX_ATTEMPTS_EXCEEDED.
func (c *Consumer) forgetPoisonAttempt(ctx context.Context, s Settled, entry inbox.Entry) {
	if c.cfg.Mode == ModeTransactional && s.Result.Class == inboxkit.ClassPoison && s.Result.Attempts > 0 {
		c.cfg.Store.ForgetAttempt(ctx, entry, s.Result.Attempts)
	}
}

func (c *Consumer) reject(ctx context.Context, d Delivery, s Settled, entry inbox.Entry) Settled {
	res := s.Result
	if res.Outcome == inboxkit.OutcomeDuplicate {
		if r, err := c.cfg.Store.Get(ctx, entry.EventID, c.cfg.Name); err == nil {
			res.Reason, res.Class = r.ReasonCode, inboxkit.ClassBusiness
			if r.LastError != "" {
				res.Err = errors.New(r.LastError)
			}
		}
	}
	env := c.envelope(s.Message, res, c.row(ctx, entry))
	env.FirstFailure, env.LastFailure = time.Time{}, time.Time{}
	if err := c.cfg.Rejects.Publish(ctx, c.cfg.RejectQueue, env.Headers(), env.Body); err != nil {
		s.Err = fmt.Errorf("consumer: publish rejection to %s: %w (message handed back to the broker)", c.cfg.RejectQueue, err)
		return c.requeue(ctx, d, s, c.requeueDelay(1))
	}
	return c.ack(ctx, d, s, inboxkit.ActionReject)
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

// finish reports a settled delivery, in this order: its line in the log
// (logLine), then count.
func (c *Consumer) finish(s Settled) {
	if handedBack(s) {
		c.gate.failed()
	}
	c.logLine(s)
	c.count(s)
}

// count reports a settled delivery without a log line: the summary and
// outage counts (logSettled), and Config.OnSettled.
func (c *Consumer) count(s Settled) {
	c.logSettled(s)
	c.onSettled(s)
}

func (c *Consumer) onSettled(s Settled) {
	if c.cfg.OnSettled != nil {
		c.cfg.OnSettled(s)
	}
}

// logLine logs one settlement: at debug level, at warn for a dead letter.
func (c *Consumer) logLine(s Settled) {
	attrs := []any{
		slog.String("consumer", c.cfg.Name),
		slog.String("event_id", s.Message.ID),
	}
	if s.Message.EventIDSource != "" {
		attrs = append(attrs, slog.String("event_id_source", s.Message.EventIDSource))
	}
	attrs = append(attrs,
		slog.String("correlation_id", s.Message.CorrelationID),
		slog.String("action", string(s.Action)),
	)
	if s.Result.Outcome != "" {
		attrs = append(attrs, slog.String("outcome", string(s.Result.Outcome)))
	}
	if s.Result.Status != "" {
		attrs = append(attrs, slog.String("status", string(s.Result.Status)))
	}
	if s.Result.Reason != "" {
		attrs = append(attrs, slog.String("reason", s.Result.Reason))
	}
	if s.Result.Attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", s.Result.Attempts))
	}
	if s.Action == inboxkit.ActionRequeue {
		attrs = append(attrs, slog.Duration("delay", s.Delay))
	}
	// One line per message at debug; info has the summary and outages
	// (logSettled), warn each dead letter.
	level := slog.LevelDebug
	if s.Result.Err != nil {
		attrs = append(attrs, slog.String("error", s.Result.Err.Error()))
	}
	if s.Err != nil {
		attrs = append(attrs, slog.String("runtime_error", s.Err.Error()))
	} else if s.Action == inboxkit.ActionDeadLetter {
		level = slog.LevelWarn
		if s.Result.Reason == inboxkit.ReasonUnknownStatus {
			level = slog.LevelError // an operator must map the status (its error says how)
		}
	}
	c.cfg.Logger.Log(context.Background(), level, "settled", attrs...)
}

// store is Handle in ModeStoreThenProcess: store as RECEIVED, then
// acknowledge. A message that cannot be stored (no event id) is
// dead-lettered; a database error hands it back.
func (c *Consumer) store(ctx context.Context, d Delivery, m inboxkit.Message, entry inbox.Entry) Settled {
	s := Settled{Message: m}
	inserted, st, err := c.cfg.Store.Receive(ctx, entry, m.Headers, m.Body)
	var rerr *inbox.ReceiveError
	switch {
	case errors.As(err, &rerr):
		s.Result = inbox.Result{Outcome: inboxkit.OutcomeDeadLetter, Class: rerr.InboxDecision().Class, Reason: rerr.Reason, Err: err}
		return c.deadLetter(ctx, d, s, entry)
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

// deadLetterStored publishes a stored entry that a worker gave up on.
func (c *Consumer) deadLetterStored(ctx context.Context, cl inbox.Claimed, class inboxkit.Class, reason string, cause error) error {
	m := cl.Message
	if m.Destination == "" {
		m.Destination = m.Header("destination")
	}
	res := inbox.Result{Outcome: inboxkit.OutcomeDeadLetter, Class: class, Reason: reason, Attempts: cl.Attempts, Err: cause}
	env := c.envelope(m, res, c.row(ctx, inbox.Entry{EventID: m.ID, ConsumerName: c.cfg.Name}))
	if err := c.cfg.DeadLetter.Publish(ctx, c.cfg.DeadLetterQueue, env.Headers(), env.Body); err != nil {
		return fmt.Errorf("consumer: publish to dead-letter queue %s: %w", c.cfg.DeadLetterQueue, err)
	}
	failpoint.Hit(failpoint.AfterDLQPublishBeforeMark)
	s := Settled{Message: m, Result: res, Action: inboxkit.ActionDeadLetter}
	s.Result.Status = inboxkit.StatusDeadLettered
	c.onSettled(s) // the worker logs it, and observeStored counts it
	return nil
}

// observeStored is the workers' inbox.WorkerConfig.ObserveFunc: the
// Observer sees each processed entry like a delivery, with the action its
// outcome stands for, and the summary counts its outcome (countWorker).
func (c *Consumer) observeStored() func(context.Context, inbox.Claimed) (context.Context, func(inbox.Result, error)) {
	return func(ctx context.Context, cl inbox.Claimed) (context.Context, func(inbox.Result, error)) {
		ctx, done := c.observe(ctx, cl.Message)
		return ctx, func(res inbox.Result, err error) {
			c.countWorker(res, err)
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
			done(s)
		}
	}
}

// rejectFunc publishes the workers' rejections to RejectQueue, like the
// transactional mode does (nil without a RejectQueue).
func (c *Consumer) rejectFunc() inbox.RejectFunc {
	if c.cfg.RejectQueue == "" {
		return nil
	}
	return func(ctx context.Context, cl inbox.Claimed, reason string, cause error) error {
		m := cl.Message
		if m.Destination == "" {
			m.Destination = m.Header("destination")
		}
		res := inbox.Result{Outcome: inboxkit.OutcomeRejected, Class: inboxkit.ClassBusiness, Reason: reason, Attempts: cl.Attempts, Err: cause}
		env := c.envelope(m, res, inbox.Record{})
		env.FirstFailure, env.LastFailure = time.Time{}, time.Time{}
		if err := c.cfg.Rejects.Publish(ctx, c.cfg.RejectQueue, env.Headers(), env.Body); err != nil {
			return fmt.Errorf("consumer: publish rejection to %s: %w", c.cfg.RejectQueue, err)
		}
		c.onSettled(Settled{Message: m, Result: res, Action: inboxkit.ActionReject}) // logged by the worker, counted by observeStored
		return nil
	}
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
