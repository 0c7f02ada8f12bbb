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
// outcome (the database is down); the caller must then hand the message back
// to the broker. Entries without an event id or with one longer than the
// column are not processed: the result is OutcomeDeadLetter with reason
// MISSING_EVENT_ID or EVENT_ID_TOO_LONG, and no row is written.
func (s *Store) Process(ctx context.Context, e Entry, h Handler) (Result, error) {
	e, poison, err := normalize(e)
	if err != nil {
		return Result{}, err
	}
	if h == nil {
		return Result{}, fmt.Errorf("%w: handler is nil", ErrInvalidEntry)
	}
	if poison != "" {
		return poisonFound(poison), nil
	}

	// Deliveries of one event in this process take turns (across Stores:
	// two instances in one process too), so that none counts an attempt
	// while another one's handler runs.
	mu := &turns[turn(e)]
	mu.Lock()
	defer mu.Unlock()
	return s.single(ctx, e, h)
}

// single is Process for a normalized entry whose turn this is.
func (s *Store) single(ctx context.Context, e Entry, h Handler) (Result, error) {
	if e.FirstDelivery {
		if res, done, err := s.processFirst(ctx, e, h); done {
			return refusedOr(res, err)
		}
	}
	return refusedOr(s.process(ctx, e, h))
}

// refusedOr returns res and err, unless err is the database refusing a
// value of the entry in one of the inbox's own statements (a data
// exception, classify.ValueReason: an event id or correlation id it
// cannot store, a value longer than a legacy table's column). That is the
// message's fault, not an outage: the Result is then DEAD_LETTER, class
// POISON, with the reason (INVALID_ENCODING, VALUE_TOO_LONG,
// INVALID_VALUE) and err. Nothing was recorded (the statement failed, an
// attempt marker was taken back); the dead letter records what the
// database can store (see PublishDeadLetter).
func refusedOr(res Result, err error) (Result, error) {
	reason := classify.ValueReason(err)
	if reason == "" {
		return res, err
	}
	return Result{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: reason, Err: err}, nil
}

// poisonFound is the Result for an entry without a usable event id: no row.
func poisonFound(reason string) Result {
	v := decide(facts{Decision: inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: reason}, MaxAttempts: 1})
	return v.result("", 0, nil)
}

// process is Process for a normalized entry whose turn this is.
func (s *Store) process(ctx context.Context, e Entry, h Handler) (Result, error) {
	// A few rounds at most: a delivery in another process can finish the
	// event between our marker and our claim.
	for round := 0; round < 5; round++ {
		started, res, err := s.startAttempt(ctx, e)
		if err != nil || started == 0 {
			return res, err
		}
		res, changed, err := s.attempt(ctx, e, h, started)
		if err != nil {
			// Not recorded: the database is unreachable. Not an attempt.
			s.ForgetAttempt(ctx, e, started)
			return res, err
		}
		if !changed {
			return res, nil
		}
		// Another process claimed the row after our marker: our handler
		// did not run, so our marker is taken back whatever the status.
		if err := s.takeBack(ctx, e); err != nil {
			return Result{}, err
		}
	}
	return Result{}, fmt.Errorf("inbox: event %q for %q changed under us five times in a row; giving up this delivery", e.EventID, e.ConsumerName)
}

// takeBack takes back the marker of a delivery whose handler did not run
// because another process claimed the row after the marker.
func (s *Store) takeBack(ctx context.Context, e Entry) error {
	if _, err := s.q.takeBackAttempt.exec(ctx, s.db, e.key(args{"marker": markerError})); err != nil {
		return fmt.Errorf("inbox: take back an attempt that did not run: %w", err)
	}
	return nil
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

// markerError is the LAST_ERROR an attempt marker leaves for the attempt
// before it when that one recorded no outcome.
const markerError = "an earlier attempt started its handler and recorded no outcome (the consumer died or lost its database connection while the handler ran)"

// startAttempt commits the attempt marker and returns the number of the
// attempt that may now run h. It returns 0 with the Result to report when h
// must not run: a duplicate (terminal row) or an exhausted TECHNICAL_FAILURE
// row (dead letter, MAX_ATTEMPTS_EXCEEDED).
func (s *Store) startAttempt(ctx context.Context, e Entry) (int, Result, error) {
	if err := s.applyForgotten(ctx, e); err != nil {
		return 0, Result{}, err
	}
	for round := 0; round < 5; round++ {
		m, err := s.mark(ctx, s.db, e)
		if err != nil {
			if m.counted {
				// The marker is committed; take it back when we can.
				s.remember(e, -1)
			}
			return 0, Result{}, err
		}
		if !m.again {
			return m.started, m.res, nil
		}
	}
	return 0, Result{}, fmt.Errorf("inbox: start attempt for event %q: the row kept changing", e.EventID)
}

// marked is what mark did for one entry.
type marked struct {
	// started is the number of the attempt that may run the handler; 0
	// when it must not run (res says why).
	started int
	res     Result
	// again: the row changed between two statements; look again. On a
	// transaction it must be rolled back first (PostgreSQL aborts it on
	// the failed INSERT).
	again bool
	// counted: the marker's UPDATE succeeded, whatever the error says.
	counted bool
}

// mark writes the attempt marker of e through q (the pool, or the batch's
// marker transaction) and decides, by the decision table, whether the
// handler may run.
func (s *Store) mark(ctx context.Context, q execer, e Entry) (marked, error) {
	if s.q.markUpsert.text != "" {
		return s.markUpsert(ctx, q, e)
	}
	now := s.now()
	res, err := s.q.startAttempt.exec(ctx, q, e.key(args{"marker": markerError, "now": s.t(now), "max": s.cfg.Retry.MaxAttempts}))
	if err != nil {
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		st, attempts, ok, err := s.status(ctx, q, e)
		switch {
		case err != nil:
			return marked{counted: true}, err
		case ok && st == inboxkit.StatusTechnicalFailure:
			return marked{started: attempts}, nil
		}
		return marked{again: true}, nil // finished by a competing delivery meanwhile
	}
	st, attempts, ok, err := s.status(ctx, q, e)
	if err != nil {
		return marked{}, err
	}
	if ok {
		return s.found(ctx, q, e, st, attempts)
	}
	_, err = s.q.insertStarted.exec(ctx, q, e.row(args{"now": s.t(now)}))
	if err == nil {
		return marked{started: 1}, nil
	}
	if !s.d.IsDuplicate(err) {
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	}
	return marked{again: true}, nil
}

// found decides, by the decision table, about a row the marker did not
// count: a duplicate, a store-then-process entry (stored), a row in a
// status it does not know or a legacy orphan (dead letter, the row left as
// it is), an exhausted row (dead letter), or a row that changed between our
// statements (look again).
func (s *Store) found(ctx context.Context, q execer, e Entry, st inboxkit.Status, attempts int) (marked, error) {
	f := facts{Found: st, Attempts: attempts, MaxAttempts: s.cfg.Retry.MaxAttempts}
	if isOpen(st) {
		orphan, err := s.orphan(ctx, q, e)
		if err != nil {
			return marked{}, err
		}
		f.Orphan = orphan
	}
	v := decide(f)
	switch v.Outcome {
	case inboxkit.OutcomeDuplicate, inboxkit.OutcomeStored:
		return marked{res: Result{Outcome: v.Outcome, Status: st, Attempts: attempts}}, nil
	case inboxkit.OutcomeDeadLetter:
		r := v.result(st, attempts, nil)
		switch {
		case v.Reason == inboxkit.ReasonUnknownStatus:
			r.Err = &UnknownStatusError{EventID: e.EventID, ConsumerName: e.ConsumerName, Status: string(st), Orphan: f.Orphan}
		case s.silentAttempt(ctx, q, e):
			r.Err = errors.New(markerError)
		}
		return marked{res: r}, nil
	}
	return marked{again: true}, nil
}

// silentAttempt reports whether the last attempt of e's row started its
// handler and recorded no outcome (ERROR_CLASS NULL with attempts).
func (s *Store) silentAttempt(ctx context.Context, q execer, e Entry) bool {
	var class sql.NullString
	var attempts int
	err := s.q.selectMarker.queryRow(ctx, q, e.key(nil)).Scan(&class, &attempts)
	return err == nil && class.String == "" && attempts > 0
}

// ForgetAttempt takes back the attempt marker of attempt n of the entry's
// event: the delivery was handed back because the inbox, the database or
// the dead-letter queue was unreachable, and such a delivery never counts
// as an attempt. It changes only a TECHNICAL_FAILURE row still at attempt
// n. When the database cannot be reached, the Store remembers it and takes
// the marker back before the event's next attempt in this process.
func (s *Store) ForgetAttempt(ctx context.Context, e Entry, n int) {
	if n <= 0 || idReason(e.EventID) != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := s.q.forgetAttempt.exec(ctx, s.db, e.key(args{"attempts": n})); err != nil {
		s.remember(e, n)
	}
}

// remember keeps a marker to take back; n -1 means "the attempt this Store
// marked last", resolved by applyForgotten from the row.
func (s *Store) remember(e Entry, n int) {
	s.forgotMu.Lock()
	defer s.forgotMu.Unlock()
	if s.forgot == nil {
		s.forgot = map[[2]string]int{}
	}
	s.forgot[[2]string{e.EventID, e.ConsumerName}] = n
}

// applyForgotten takes back a marker ForgetAttempt could not.
func (s *Store) applyForgotten(ctx context.Context, e Entry) error {
	key := [2]string{e.EventID, e.ConsumerName}
	s.forgotMu.Lock()
	n, ok := s.forgot[key]
	s.forgotMu.Unlock()
	if !ok {
		return nil
	}
	if n < 0 { // the marker's number was not read back: it is the row's
		_, attempts, _, err := s.status(ctx, s.db, e)
		if err != nil {
			return err
		}
		n = attempts
	}
	if n > 0 {
		if _, err := s.q.forgetAttempt.exec(ctx, s.db, e.key(args{"attempts": n})); err != nil {
			return fmt.Errorf("inbox: take back an attempt that did not run: %w", err)
		}
	}
	s.forgotMu.Lock()
	delete(s.forgot, key)
	s.forgotMu.Unlock()
	return nil
}

// attempt runs attempt n in one business transaction: it claims the
// TECHNICAL_FAILURE row (marked by startAttempt) as PROCESSED, runs h, and
// commits, or records what went wrong. The bool result is true when the row
// was no longer TECHNICAL_FAILURE: nothing ran, look again.
func (s *Store) attempt(ctx context.Context, e Entry, h Handler, n int) (Result, bool, error) {
	now := s.now()
	tx, err := s.begin(ctx, "process", nil)
	if err != nil {
		return Result{}, false, err
	}
	defer tx.rollback()
	claimed, err := s.claim(ctx, tx, e, now)
	if err != nil || !claimed {
		return Result{}, err == nil, err
	}
	herr := h(ctx, tx.Tx)
	v := decide(facts{Ran: true, Decision: s.classify(herr), Attempts: n, MaxAttempts: s.cfg.Retry.MaxAttempts})
	switch v.Row {
	case inboxkit.StatusProcessed:
		if err := tx.commit(); err != nil {
			// The commit itself failed (serialization failure, lost
			// connection): a technical failure of this attempt.
			res, err := s.recordFailure(ctx, e, fmt.Errorf("inbox: commit: %w", err))
			return res, false, err
		}
	case inboxkit.StatusRejected:
		// The handler's writes and the claim roll back; one UPDATE of its
		// own records the rejection on the marked row. (No savepoint to
		// roll back to: every processed message would pay its round trip
		// for the rare rejection.)
		tx.rollback()
		if err := s.reject(ctx, e, v.Reason, herr, now); err != nil {
			// Not recorded: a technical failure, so the redelivery decides again.
			res, err := s.recordFailure(ctx, e, fmt.Errorf("inbox: record rejection (%v): %w", herr, err))
			return res, false, err
		}
	case inboxkit.StatusDeadLettered:
		if v.Class == inboxkit.ClassPoison {
			// The caller publishes, then marks the row (MarkDeadLettered).
			return v.result(inboxkit.StatusTechnicalFailure, n, herr), false, nil
		}
		fallthrough
	default:
		tx.rollback()
		res, err := s.recordFailure(ctx, e, herr)
		return res, false, err
	}
	return v.result(v.Row, n, herr), false, nil
}

// classify is Config.ClassifyFunc, with the zero Decision for nil (and
// never the zero Decision for an error).
func (s *Store) classify(err error) inboxkit.Decision {
	if err == nil {
		return inboxkit.Decision{}
	}
	dec := s.cfg.ClassifyFunc(err)
	if dec.Class == "" {
		dec.Class = inboxkit.ClassTechnical // an error is never a success
	}
	return dec
}

// claim moves e's TECHNICAL_FAILURE row (its marker) to PROCESSED in tx. It
// reports false when the row was no longer TECHNICAL_FAILURE (another
// delivery claimed it).
func (s *Store) claim(ctx context.Context, tx *txn, e Entry, now time.Time) (bool, error) {
	res, err := s.q.processFromFail.exec(ctx, tx, e.row(args{"now": s.t(now)}))
	if err != nil {
		return false, fmt.Errorf("inbox: claim event: %w", err)
	}
	k, err := res.RowsAffected()
	return err == nil && k == 1, nil
}

// reject records the business rejection of a marked row whose business
// transaction was rolled back, in a statement of its own. The row must
// still be the TECHNICAL_FAILURE our marker left: anything else means
// another delivery finished the event meanwhile (an error here; the
// failure record then reports the duplicate).
func (s *Store) reject(ctx context.Context, e Entry, reason string, herr error, now time.Time) error {
	res, err := s.q.rejectFromFail.exec(ctx, s.db, e.row(args{"reason": reason, "error": nullString(s.truncate(herr.Error())), "now": s.t(now)}))
	if err != nil {
		return err
	}
	if k, _ := res.RowsAffected(); k != 1 {
		return fmt.Errorf("event %q for %q is no longer TECHNICAL_FAILURE", e.EventID, e.ConsumerName)
	}
	return nil
}

// recordFailure records a technical failure in its own transaction (rule 4:
// the handler's rollback cannot erase it) and decides retry or dead letter.
// The attempt was counted by its marker; a NoAttempt failure takes it back.
func (s *Store) recordFailure(ctx context.Context, e Entry, herr error) (Result, error) {
	dec := asTechnical(s.classify(herr))
	delta := 0
	if dec.NoAttempt {
		delta = -1
	}
	now := s.now()
	msg := nullString(s.truncate(herr.Error()))
	reason := nullString(dec.Reason)

	tx, err := s.begin(ctx, "record failure", nil)
	if err != nil {
		return Result{}, fmt.Errorf("%w (handler error: %v)", err, herr)
	}
	defer tx.rollback()

	failure := e.row(args{"delta": delta, "reason": reason, "class": string(dec.Class), "error": msg, "now": s.t(now)})
	res, err := s.q.updateFailure.exec(ctx, tx, failure)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		// MySQL counts changed rows, not matched ones: an UPDATE that wrote
		// the same values reports 0. Look at the (now locked) row to tell.
		st, _, ok, err := s.status(ctx, tx, e)
		switch {
		case err != nil:
			return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
		case ok && st == inboxkit.StatusTechnicalFailure:
			n = 1
		case ok:
			tx.rollback()
			return s.duplicateResult(ctx, e)
		}
	}
	if n == 0 {
		first := 1 + delta // the row vanished (a purge?): this attempt ran
		failure["attempts"] = first
		_, err := s.q.insertFailure.exec(ctx, tx, failure)
		if err != nil {
			tx.rollback()
			if s.d.IsDuplicate(err) {
				// Someone else finished the event meanwhile.
				return s.duplicateResult(ctx, e)
			}
			return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
		}
	}
	var attempts int
	if err := s.q.selectAttempts.queryRow(ctx, tx, e.key(nil)).Scan(&attempts); err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: read attempts: %w", err)
	}
	if err := tx.commit(); err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: commit: %w (handler error: %v)", err, herr)
	}
	v := decide(facts{Ran: true, Decision: dec, Attempts: attempts, MaxAttempts: s.cfg.Retry.MaxAttempts})
	return v.result(inboxkit.StatusTechnicalFailure, attempts, herr), nil
}

func (s *Store) duplicateResult(ctx context.Context, e Entry) (Result, error) {
	st, attempts, ok, err := s.status(ctx, s.db, e)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{}, fmt.Errorf("inbox: event %q for %q: row vanished while recording a failure", e.EventID, e.ConsumerName)
	}
	return Result{Outcome: inboxkit.OutcomeDuplicate, Status: st, Attempts: attempts}, nil
}

// status reads the row's status through q; ok is false when there is no
// row. It is only ever used to report or route after a constraint or a
// conditional UPDATE decided; never to decide whether to write.
func (s *Store) status(ctx context.Context, q execer, e Entry) (inboxkit.Status, int, bool, error) {
	var st string
	var attempts int
	err := s.q.selectStatus.queryRow(ctx, q, e.key(nil)).Scan(&st, &attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("inbox: read status: %w", err)
	}
	return inboxkit.Status(st), attempts, true, nil
}
