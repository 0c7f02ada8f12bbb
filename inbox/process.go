package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// MaxEventIDLength and MaxConsumerNameLength are the widths of the key columns.
const (
	MaxEventIDLength       = 120
	MaxConsumerNameLength  = 80
	MaxCorrelationIDLength = 120
)

// Entry is the part of a message the inbox records.
type Entry struct {
	// EventID is the event's business identity. Required, at most 120 bytes.
	EventID string
	// ConsumerName names the consumer (one row per event and consumer).
	// Required, at most 80 bytes.
	ConsumerName string
	// CorrelationID links events of one business case; optional, at most 120
	// bytes (longer ids are truncated for the column).
	CorrelationID string
	// PayloadHash is a hash of the body (hex, at most 64 characters), used by
	// the consistency check to find a resend under a new event id. Optional.
	PayloadHash string
	// EventIDSource names where a derived event id came from (stored in
	// EVENT_ID_SOURCE, at most 40 bytes); "" for the event id header.
	EventIDSource string
	// OrderKey is the key whose deliveries the consumer runs one at a time
	// in arrival order (consumer.Config.OrderKeyFunc), stored in ORDER_KEY
	// (at most MaxOrderKeyLength bytes); "" for none.
	OrderKey string
	// FirstDelivery is true only when the broker vouches that this is the
	// message's first delivery: no handler can have run for it before, so
	// Process runs it without the attempt marker (see "The first
	// delivery" on Process). Leave it false when in doubt. The consumer
	// runtime sets it from inboxkit.Message.FirstDelivery, which the
	// adapters of this module set.
	FirstDelivery bool
	// Redelivered is the broker's redelivery flag (for the record).
	Redelivered bool
	// DeliveryCount is the broker's delivery count, 0 when unknown.
	DeliveryCount int
	// Message is the delivery's message, for the envelope of a dead
	// letter or rejection the store publishes itself (a Store WithPorts):
	// body, headers, destination, ids. Not stored; optional otherwise.
	Message inboxkit.Message
}

// Handler runs the business change inside the inbox transaction. It must do
// all its database writes through tx and must not commit or roll it back.
// Its error decides what happens (see inboxkit.DecisionOf and package
// classify): a business rejection rolls back its writes and records
// REJECTED; a technical error rolls back and is retried; poison is
// dead-lettered.
type Handler func(ctx context.Context, tx *sql.Tx) error

// Result says exactly what one Process call did.
type Result struct {
	// Outcome is what the caller must do with the delivery.
	Outcome inboxkit.Outcome
	// Status is the row's status after the call; for a duplicate, the
	// status found. Empty when no row exists (a message without event id).
	Status inboxkit.Status
	// Class and Reason classify a failure (empty when processed).
	Class  inboxkit.Class
	Reason string
	// Attempts is the ATTEMPTS column after the call.
	Attempts int
	// Err is the handler's error for Rejected, Retry and DeadLetter outcomes.
	Err error
	// RetryAfter is the handler error's redelivery delay hint, if any.
	RetryAfter time.Duration
}

// ErrInvalidEntry is wrapped by errors about a malformed Entry that cannot be
// dead-lettered by Process (an empty consumer name is a programming error).
var ErrInvalidEntry = errors.New("inbox: invalid entry")

// Process runs h for the event in one transaction with the inbox row, and
// records what happened.
//
// # Counting attempts
//
// Before h runs, the attempt is recorded in its own committed transaction
// (the attempt marker): the row is inserted as TECHNICAL_FAILURE with
// ATTEMPTS 1, or an existing TECHNICAL_FAILURE row's ATTEMPTS is raised by
// one. Then the business transaction moves the row to PROCESSED (or
// REJECTED) by a conditional UPDATE around h. A message whose handler kills
// the process therefore leaves its count behind and is dead-lettered after
// Config.Retry.MaxAttempts deliveries, even when the broker never counts (ActiveMQ
// over STOMP). The broker's redelivery flag and delivery count are not
// used: they also count deliveries that never reached the handler.
//
// # The first delivery
//
// An entry with FirstDelivery set skips the marker: no handler can have run
// for a message the broker never delivered before. Its transaction inserts
// the row as PROCESSED at attempt 1, runs h and commits, the statements a
// hand-written inbox sends; a rejection, a technical failure or poison is
// recorded as above, at attempt 1. When the event has a row already, the
// delivery takes the marked path.
//
// The price, stated here once (the package overview, ARCHITECTURE.md rule
// 5 and the README link here): a first delivery that kills the process
// leaves no count. Its redelivery is flagged by the broker, takes the
// marked path and is counted from there, so a message that kills the
// process is dead-lettered after Retry.MaxAttempts + 1 deaths instead of
// Retry.MaxAttempts, and one more for each copy a producer resends (each
// copy is a first delivery of its own). The flag is only as good as the
// broker's word: each adapter's documentation says when it vouches for a
// first delivery, and a Source that cannot tell leaves it false, so every
// delivery is marked.
//
// A delivery that cannot be handled because the database is unreachable
// never counts: when Process returns an error after its marker was
// committed, the marker is taken back (at once, or, when the database is
// still unreachable, by this Store before the event's next attempt).
//
// A duplicate is detected by the primary key and the row's status: a row
// that is PROCESSED, REJECTED or DEAD_LETTERED is reported with
// OutcomeDuplicate and h does not run; a store-then-process entry
// (RECEIVED, IN_PROGRESS) with OutcomeStored; a row in a status the state
// machine does not know, or a legacy RECEIVED or IN_PROGRESS row, with
// OutcomeDeadLetter, reason UNKNOWN_STATUS and an *UnknownStatusError,
// its row left as it is (see "Adopted tables" in the package
// documentation). A TECHNICAL_FAILURE row whose
// ATTEMPTS reached Config.Retry.MaxAttempts is reported as OutcomeDeadLetter with
// reason MAX_ATTEMPTS_EXCEEDED, without running h.
//
// Process returns an error only when the inbox itself could not record the
// outcome (the database is down), or, for a Store WithPorts, could not
// publish its dead letter or rejection (the result is then returned with
// the error); the caller must then hand the message back to the broker.
// Entries without a usable event id are not processed: the result is
// OutcomeDeadLetter with reason MISSING_EVENT_ID, EVENT_ID_TOO_LONG or
// INVALID_EVENT_ID, and no row is written. A value the database refuses
// in the inbox's own statements is the message's fault, not an outage:
// OutcomeDeadLetter, class POISON, reason INVALID_ENCODING, VALUE_TOO_LONG
// or INVALID_VALUE.
//
// Without ports, a DEAD_LETTER result leaves the row TECHNICAL_FAILURE:
// the caller publishes, then calls MarkDeadLettered. With ports (WithPorts)
// the store has published it by the letter protocol, and the result's
// status is DEAD_LETTERED.
//
// Process is a batch of one: it runs the engine of ProcessBatch with its
// fast paths for one delivery (the one-statement marker, no savepoint, the
// first delivery's single INSERT).
func (s *Store) Process(ctx context.Context, e Entry, h Handler) (Result, error) {
	return s.process(ctx, e, h, false)
}

// ProcessInTx is Process for a handler whose effects are all in the
// transaction it is given, as BatchItem.EffectsInTx declares it for a
// batch: every write goes through tx, it calls no other service and sends
// nothing. The outcome is Process's. What the declaration allows: a first
// delivery's INSERT may go to the server with the handler's first
// statement (through driver/postgres's DriverName: one round trip fewer),
// so that the handler of a duplicate runs before the INSERT tells it is
// one, and is rolled back. The store never guesses it: Process keeps the
// INSERT before the handler.
func (s *Store) ProcessInTx(ctx context.Context, e Entry, h Handler) (Result, error) {
	return s.process(ctx, e, h, true)
}

// process is Process; effectsInTx: ProcessInTx's declaration.
func (s *Store) process(ctx context.Context, e Entry, h Handler, effectsInTx bool) (Result, error) {
	e, poison, err := normalize(e)
	if err != nil {
		return Result{}, err
	}
	if h == nil {
		return Result{}, fmt.Errorf("%w: handler is nil", ErrInvalidEntry)
	}
	j := jobPool.Get().(*job)
	*j = job{ctx: ctx, e: e, h: h, effectsInTx: effectsInTx}
	if poison != "" {
		j.decided(poisonFound(poison))
	} else {
		// Deliveries of one event in this process take turns (across
		// Stores: two instances in one process too), so that none counts
		// an attempt while another one's handler runs.
		mu := &turns[turn(e)]
		mu.Lock()
		defer mu.Unlock()
	}
	res, err := s.single(j)
	*j = job{}
	jobPool.Put(j)
	return res, err
}

// jobPool recycles Process's jobs: nothing keeps a job once its Process
// returns (the engine runs it synchronously and hands out copies of its
// result), and it is the largest allocation of a delivery.
var jobPool = sync.Pool{New: func() any { return new(job) }}

// single runs j alone, its turn held: Process, and a batch's job whose
// neighbours could not run with it.
func (s *Store) single(j *job) (Result, error) {
	if j.state == jobDecided {
		s.letter(j.ctx, j, deadLetter)
		return j.res, j.err
	}
	err := s.run(j.ctx, j.alone())
	if err == nil {
		err = j.err
	}
	if reason := classify.ValueReason(err); reason != "" {
		// The database refused a value of the entry in one of the inbox's
		// own statements: the message's fault, not an outage. Nothing was
		// recorded (the statement failed, a marker was taken back).
		j.decided(Result{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: reason, Err: err})
		j.err = nil
		s.letter(j.ctx, j, deadLetter)
		return j.res, j.err
	}
	if err != nil {
		return j.res, err
	}
	return j.res, nil
}

// turns serializes the deliveries of one event within the process
// (striped by event id and consumer name). A batch holds the stripes of all
// its events while it runs, so two batches sharing a stripe run one after
// the other: there must be many more stripes than a batch's events times
// the concurrency (why 16384: docs/decisions.md).
const turnStripes = 1 << 14

var turns [turnStripes]sync.Mutex

func turn(e Entry) uint32 {
	h := fnv.New32a()
	h.Write([]byte(e.EventID))
	h.Write([]byte{0})
	h.Write([]byte(e.ConsumerName))
	return h.Sum32() % turnStripes
}

// poisonFound is the Result for an entry without a usable event id: no row.
func poisonFound(reason string) Result {
	v := decide(facts{Decision: inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: reason}, MaxAttempts: 1})
	return v.result("", 0, nil)
}
