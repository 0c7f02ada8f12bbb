package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// Handler does the business work for one message inside the inbox
// transaction. All its database writes go through tx; it must not commit or
// roll back. Its error decides what happens to the message: wrap it with
// classify.Reject (business rejection: recorded, acknowledged, never
// retried), classify.Poison (dead-lettered at once) or return it plain
// (technical: handed back for redelivery until the backout threshold).
type Handler func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error

// Settled is one settled delivery, as the Observer sees it.
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
	// at once (Config.Receivers goroutines); Config.Concurrency leased
	// workers process the stored entries.
	ModeStoreThenProcess Mode = "store-then-process"
)

// Config configures a Consumer. Zero values mean the documented defaults.
// Every field works in both modes, except LeaseDuration,
// WorkerPollInterval and Receivers (ModeStoreThenProcess only), which New
// refuses in ModeTransactional rather than ignore.
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
	// EffectsInTx declares that Handler's effects are all in the inbox
	// transaction: every write goes through tx, it calls no other service
	// and sends nothing (what must leave after the commit goes through an
	// outbox, outbox.Store.Add), so a run rolled back leaves nothing and
	// a second run leaves what one leaves. With BatchSize above 1 a batch
	// then runs its handlers without a savepoint each; when one of them
	// does not succeed the batch is rolled back whole and runs again with
	// savepoints, to the outcomes it would have had (inbox.BatchItem
	// .EffectsInTx, inbox.WorkerConfig.EffectsInTx; on inboxkit-pgx the
	// first run pipelines the handlers' writes, see inbox.Store
	// .ProcessBatch); a single delivery
	// goes through inbox.Store.ProcessInTx, whose first delivery's INSERT
	// may go with the handler's first statement. The consumer never
	// guesses it: a handler that calls a service, publishes, or counts
	// anything outside the database must leave it false. See "Batches
	// without savepoints" in the package documentation.
	EffectsInTx bool
	// DeadLetter publishes dead letters. Required: nothing is ever dropped.
	// The consumer hands it to the store (inbox.Store.WithPorts), which
	// publishes by its letter protocol in both modes.
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
	// OrderKeyFunc, if set, gives each message a key (ParseOrderKey:
	// header:JMSXGroupID, json:customerNo, ...) whose deliveries run one at
	// a time in arrival order, while different keys run concurrently up to
	// Concurrency; the key is stored in ORDER_KEY. A message without a key
	// runs without an order. A technical failure of a keyed delivery is
	// retried in process, holding the key's later deliveries unacknowledged
	// (see "Order per key" in the package documentation and docs/order.md).
	// In ModeStoreThenProcess the receivers store a key's deliveries one
	// at a time in arrival order, and the workers claim an entry of a key
	// only while it is the oldest open entry of its key (inbox.Worker).
	// Nil: no order.
	OrderKeyFunc OrderKeyFunc
	// OnPoison is what becomes of a key whose head is dead-lettered (its
	// attempts exhausted, classified poison, or malformed) when
	// OrderKeyFunc is set: OnPoisonDeadLetter (the default) lets the key go
	// on with its next message; OnPoisonParkKey parks the key until an
	// operator replays or drops the head (see OnPoisonParkKey). New refuses
	// OnPoisonParkKey without OrderKeyFunc.
	OnPoison OnPoison
	// CorrelationIDHeader is the header holding the correlation id. Defaults
	// to "correlationId"; when it is absent the broker's own correlation id
	// ("correlation-id", as JMS producers set JMSCorrelationID) is used (see
	// CorrelationID). The event id source "correlation-id" reads the same.
	CorrelationIDHeader string
	// Mode is the inbox variant. Defaults to ModeTransactional.
	Mode Mode
	// Concurrency is the number of deliveries handled at once (in
	// ModeStoreThenProcess: the number of workers; see Receivers).
	// Defaults to 1. Set the broker's prefetch to at least this times
	// BatchSize, better twice that: with no delivery waiting, each one
	// finished waits a round trip to the broker for the next.
	Concurrency int
	// Receivers is, in ModeStoreThenProcess, the number of goroutines that
	// receive, store and acknowledge deliveries for the Concurrency
	// workers. A receiver waits for its store's commit most of the time,
	// so it takes more receivers than workers to keep the workers fed:
	// defaults to DefaultReceivers(Concurrency). Set the broker's prefetch
	// to at least Receivers, better twice that (each receiver's next
	// delivery on its way while it acknowledges one): the default of 10
	// of broker/rabbitmq, amqp10 and stomp is below the 12 receivers of
	// Concurrency 3, and New warns then (Prefetcher). New refuses it in
	// ModeTransactional, where the Concurrency goroutines receive and
	// handle, and with OrderKeyFunc, where one goroutine receives.
	Receivers int
	// BatchSize is the number of deliveries handled in one database
	// transaction. In ModeTransactional (inbox.Store.ProcessBatch) a batch
	// closes at BatchSize deliveries or BatchWait after its first, commits
	// once, and only then are its deliveries acknowledged, each settled as
	// a single delivery with the same inbox result is (see HandleBatch); a
	// batch that does not commit is handed back whole. Each of the
	// Concurrency goroutines fills batches of its own, so set the broker's
	// prefetch to at least BatchSize × Concurrency. In
	// ModeStoreThenProcess it is the workers' batch
	// (inbox.WorkerConfig.BatchSize): a worker processes up to BatchSize
	// of the entries waiting for it in one transaction, each handler
	// behind its own savepoint, and never waits for more; the receivers
	// that store at the same moment share one INSERT whatever BatchSize
	// is (inbox.Worker.Receive), and never wait for company. Defaults to
	// 1: one transaction per delivery; in ModeStoreThenProcess to 10 (set
	// 1 for one transaction per entry). At most 1000.
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
	// ProcessTimeout bounds the database work and the handler of one
	// delivery (of one batch, in ModeTransactional with BatchSize above 1;
	// the storing of one delivery in ModeStoreThenProcess, and each entry a
	// worker processes): they run under a context with this deadline. A
	// database that stops answering while the connection stays open (a
	// network partition, a hung server) then fails the delivery, which is
	// handed back and delivered again, and the consumer waits out the
	// outage (see "Outages" in the package documentation) instead of
	// holding the delivery for as long as the partition lasts, or for ever
	// when the connection's bytes were lost. Acknowledgements are not
	// bounded by it. Set it above the slowest handler's time. Defaults to
	// 30s; negative: no bound.
	ProcessTimeout time.Duration
	// ShutdownTimeout bounds Run's drain after its ctx is done. Deliveries
	// still in hand after it (a hung database connection, a handler that
	// does not return) are abandoned: their context is cancelled, they are
	// not acknowledged (the broker delivers them again, the inbox makes any
	// that did commit a duplicate), they are logged, and Run returns an
	// error wrapping ErrShutdownTimeout. Defaults to 30s; negative waits
	// without bound.
	ShutdownTimeout time.Duration
	// Observer, if set, watches every delivery and, in
	// ModeStoreThenProcess, every entry a worker processed (metrics, traces,
	// progress, tests: see Observer, ObserveSettled and package observe).
	// Defaults to nil: nothing is observed.
	Observer Observer
	// OnSettled, if set, is called after each delivery was settled with
	// the broker; in ModeStoreThenProcess that is when it was stored and
	// acknowledged (outcome STORED or DUPLICATE), not when a worker
	// processed it. It must not block for long.
	//
	// Deprecated: set Observer to ObserveSettled(f), which also sees each
	// entry a store-then-process worker processed.
	OnSettled func(Settled)
	// SummaryInterval is how often a summary line (counts since the last
	// one) is logged at info level, and how often an ongoing outage is
	// logged again; the line per settled message is at debug level.
	// Defaults to 1 minute; negative turns the summary off.
	SummaryInterval time.Duration

	// workerBatch is the workers' batch of ModeStoreThenProcess:
	// BatchSize as set, defaultWorkerBatch when not (setDefaults).
	workerBatch int
}

// OnPoison is Config.OnPoison: what a dead-lettered head does to its key.
type OnPoison string

// What a dead-lettered head does to its key.
const (
	// OnPoisonDeadLetter: the head goes to the dead-letter queue and the
	// key goes on with its next message.
	OnPoisonDeadLetter OnPoison = "dead-letter"
	// OnPoisonParkKey: the key is parked while a message of it is in the
	// dead-letter queue (a DEAD_LETTERED row of the consumer and key that
	// is not archived: inbox.Store.KeyParked). Its later messages are not
	// processed: each, when its turn comes, is dead-lettered behind the
	// head with reason KEY_PARKED, in arrival order, so that none waits on
	// the broker (where it would fill the prefetch). The other keys flow.
	// The state is the inbox's, so it holds across processes and
	// restarts. Replaying the key's dead letters (inboxctl dlq replay
	// --key K), head first, releases it; so does dropping the head with
	// its row archived (inboxctl dlq drop --event-id ID --archive) and
	// replaying the rest. Costs one indexed query per keyed delivery
	// before it runs. See docs/order.md, "Parking a key".
	OnPoisonParkKey OnPoison = "park-key"
)

// defaultWorkerBatch is the workers' batch of ModeStoreThenProcess when
// Config.BatchSize is not set: the entries one claim takes by default
// (inbox.WorkerConfig.ClaimSize).
const defaultWorkerBatch = 10

// DefaultReceivers is Config.Receivers in ModeStoreThenProcess when it is
// not set: four receivers per worker. A program that sets the broker's
// prefetch from Concurrency sets it to at least this in that mode (inboxctl
// run sets twice this). Each receiver holds a database connection while
// it stores: the store's pool and the server's connection limit should
// allow Receivers + Concurrency.
func DefaultReceivers(concurrency int) int { return 4 * concurrency }

// warnPrefetch logs a warning when the Source's prefetch (Prefetcher) is
// below the deliveries the consumer takes at once: OrderHeld with
// OrderKeyFunc, Receivers in ModeStoreThenProcess, else Concurrency ×
// BatchSize.
func (c *Config) warnPrefetch() {
	p, ok := c.Source.(Prefetcher)
	if !ok {
		return
	}
	batch := max(c.BatchSize, 1)
	want, what := c.Concurrency*batch, fmt.Sprintf("Concurrency %d × BatchSize %d", c.Concurrency, batch)
	switch {
	case c.OrderKeyFunc != nil:
		want, what = OrderHeld(c.Concurrency, batch), fmt.Sprintf("OrderHeld(%d, %d), held for their keys", c.Concurrency, batch)
	case c.Mode == ModeStoreThenProcess:
		want, what = c.Receivers, fmt.Sprintf("Receivers %d", c.Receivers)
	}
	if have := p.Prefetch(); have > 0 && have < want {
		c.Logger.Warn(fmt.Sprintf("consumer: the source's prefetch is %d, below the %d deliveries this consumer takes at once (%s): "+
			"the rest wait for a delivery; set the source's prefetch to at least %d, better %d", have, want, what, want, 2*want),
			"consumer", c.Name, "prefetch", have, "takes", want)
	}
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
	if c.Mode == ModeStoreThenProcess && c.OrderKeyFunc == nil && c.Receivers == 0 {
		c.Receivers = DefaultReceivers(c.Concurrency)
	}
	if c.OnPoison == "" {
		c.OnPoison = OnPoisonDeadLetter
	}
	c.workerBatch = c.BatchSize
	if c.workerBatch == 0 {
		c.workerBatch = defaultWorkerBatch
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
	if c.ProcessTimeout == 0 {
		c.ProcessTimeout = 30 * time.Second
	}
}

// bounded is ctx with Config.ProcessTimeout's deadline: the context of a
// delivery's (or a batch's) database work and handler, never of its
// acknowledgement.
func (c *Config) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.ProcessTimeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.ProcessTimeout)
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
	case c.OnPoison != OnPoisonDeadLetter && c.OnPoison != OnPoisonParkKey:
		return fmt.Errorf("consumer: Config.OnPoison %q is unknown: use %q or %q", c.OnPoison, OnPoisonDeadLetter, OnPoisonParkKey)
	case c.OnPoison == OnPoisonParkKey && c.OrderKeyFunc == nil:
		return fmt.Errorf("consumer: Config.OnPoison is %q, but OrderKeyFunc is not set: only a key can be parked; set OrderKeyFunc (inboxctl run --order-key) or leave OnPoison out", c.OnPoison)
	case c.OnPoison == OnPoisonParkKey && c.Mode == ModeStoreThenProcess:
		// The workers let a key go on past a dead-lettered head (the
		// claim takes the key's next stored entry); parking is built
		// for the transactional scheduler only.
		return fmt.Errorf("consumer: Config.OnPoison %q is not built for Mode %q (its workers let a key go on past a dead-lettered head): use Mode %q, or leave OnPoison out", c.OnPoison, c.Mode, ModeTransactional)
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
	case c.Receivers < 0:
		return fmt.Errorf("consumer: Config.Receivers is %d, it must be positive (or 0 for the default)", c.Receivers)
	case c.Mode == ModeTransactional && c.Receivers != 0:
		return fmt.Errorf("consumer: Config.Receivers is %d, but Mode is %q, where the Concurrency goroutines receive and handle: set Concurrency instead, or set Mode to %q",
			c.Receivers, c.Mode, ModeStoreThenProcess)
	case c.OrderKeyFunc != nil && c.Receivers != 0:
		return fmt.Errorf("consumer: Config.Receivers is %d, but OrderKeyFunc is set, and with it one goroutine receives, in arrival order: leave Receivers out", c.Receivers)
	case c.Mode == ModeStoreThenProcess && c.Store.Config().Retry.InProcessRetries != 0:
		return fmt.Errorf("consumer: the Store's inbox.Config.Retry.InProcessRetries is %d, but Mode %q does not retry in process "+
			"(its workers retry a failed entry after Retry.Redelivery): set InProcessRetries to 0 for this store, or use Mode %q",
			c.Store.Config().Retry.InProcessRetries, c.Mode, ModeTransactional)
	}
	return nil
}
