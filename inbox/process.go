package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

// MaxEventIDLength and MaxConsumerNameLength are the widths of the key columns.
const (
	MaxEventIDLength       = 120
	MaxConsumerNameLength  = 80
	MaxCorrelationIDLength = 120
)

// Reason codes the store itself decides.
const (
	ReasonMissingEventID      = "MISSING_EVENT_ID"
	ReasonEventIDTooLong      = "EVENT_ID_TOO_LONG"
	ReasonMaxAttemptsExceeded = "MAX_ATTEMPTS_EXCEEDED"
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
	// Redelivered is the broker's redelivery flag.
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
// A duplicate is detected by the primary key: the INSERT of the row fails
// and the status found is reported; h does not run. When the found row is a
// TECHNICAL_FAILURE the event is processed again, moving the row to
// PROCESSED in the business transaction by a conditional UPDATE.
//
// When the broker flags the delivery as a redelivery, the attempt is counted
// in its own transaction before h runs. A message whose processing kills
// the process is therefore dead-lettered after Config.MaxAttempts
// deliveries even if the broker never counts (ActiveMQ over STOMP).
//
// Process returns an error only when the inbox itself could not record the
// outcome (the database is down); the caller must then hand the message back
// to the broker. Entries without an event id or with one longer than the
// column are not processed: the result is OutcomeDeadLetter with reason
// MISSING_EVENT_ID or EVENT_ID_TOO_LONG, and no row is written.
func (s *Store) Process(ctx context.Context, e Entry, h Handler) (Result, error) {
	if e.ConsumerName == "" || len(e.ConsumerName) > MaxConsumerNameLength {
		return Result{}, fmt.Errorf("%w: ConsumerName %q must be 1 to %d bytes", ErrInvalidEntry, e.ConsumerName, MaxConsumerNameLength)
	}
	if h == nil {
		return Result{}, fmt.Errorf("%w: handler is nil", ErrInvalidEntry)
	}
	if e.EventID == "" {
		return Result{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: ReasonMissingEventID}, nil
	}
	if len(e.EventID) > MaxEventIDLength {
		return Result{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: ReasonEventIDTooLong}, nil
	}
	if len(e.CorrelationID) > MaxCorrelationIDLength {
		e.CorrelationID = e.CorrelationID[:MaxCorrelationIDLength]
	}
	if len(e.PayloadHash) > 64 {
		e.PayloadHash = e.PayloadHash[:64]
	}

	counted := false
	rowExists := false
	if e.Redelivered || e.DeliveryCount > 1 {
		attempts, found, err := s.countAttempt(ctx, e)
		if err != nil {
			return Result{}, err
		}
		if found != inboxkit.StatusTechnicalFailure {
			return Result{Outcome: inboxkit.OutcomeDuplicate, Status: found, Attempts: attempts}, nil
		}
		if attempts > s.cfg.MaxAttempts {
			return Result{Outcome: inboxkit.OutcomeDeadLetter, Status: found, Class: inboxkit.ClassTechnical,
				Reason: ReasonMaxAttemptsExceeded, Attempts: attempts}, nil
		}
		counted, rowExists = true, true
	}

	// A few rounds at most: a competing transaction can roll back (the row
	// vanishes) or finish (the row changes) between our statements.
	for round := 0; round < 5; round++ {
		if !rowExists {
			res, dup, err := s.attempt(ctx, e, h, false, counted)
			if err != nil || !dup {
				return res, err
			}
		}
		status, attempts, ok, err := s.status(ctx, e)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			rowExists = false
			continue
		}
		if status != inboxkit.StatusTechnicalFailure {
			return Result{Outcome: inboxkit.OutcomeDuplicate, Status: status, Attempts: attempts}, nil
		}
		res, changed, err := s.attempt(ctx, e, h, true, counted)
		if err != nil || !changed {
			return res, err
		}
		rowExists = true
	}
	return Result{}, fmt.Errorf("inbox: event %q for %q changed under us five times in a row; giving up this delivery", e.EventID, e.ConsumerName)
}

// attempt runs one business transaction. With fromFailure it moves a
// TECHNICAL_FAILURE row to PROCESSED, else it inserts a PROCESSED row. The
// bool result is true when the row was not in the expected state (insert:
// duplicate; update: no longer TECHNICAL_FAILURE): nothing ran, look again.
func (s *Store) attempt(ctx context.Context, e Entry, h Handler, fromFailure, counted bool) (Result, bool, error) {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Result{}, false, fmt.Errorf("inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	rollback := func() { done = true; _ = tx.Rollback() }

	attempts := 1
	if fromFailure {
		add := 1
		if counted {
			add = 0
		}
		res, err := tx.ExecContext(ctx, s.q.processFromFail, add, s.t(now), s.t(now), nullString(e.CorrelationID), nullString(e.PayloadHash), e.EventID, e.ConsumerName)
		if err != nil {
			rollback()
			return Result{}, false, fmt.Errorf("inbox: claim failed event: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			rollback()
			return Result{}, true, nil
		}
		if err := tx.QueryRowContext(ctx, s.q.selectAttempts, e.EventID, e.ConsumerName).Scan(&attempts); err != nil {
			rollback()
			return Result{}, false, fmt.Errorf("inbox: read attempts: %w", err)
		}
	} else {
		_, err := tx.ExecContext(ctx, s.q.insertProcessed, e.EventID, e.ConsumerName, nullString(e.CorrelationID), s.t(now), s.t(now), s.t(now), nullString(e.PayloadHash), sourceArg(e.EventIDSource))
		if err != nil {
			rollback()
			if s.d.IsDuplicate(err) {
				return Result{}, true, nil
			}
			return Result{}, false, fmt.Errorf("inbox: insert inbox row: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q.savepoint); err != nil {
		rollback()
		return Result{}, false, fmt.Errorf("inbox: savepoint: %w", err)
	}

	herr := h(ctx, tx)
	if herr == nil {
		done = true
		if err := tx.Commit(); err != nil {
			// The commit itself failed (serialization failure, lost
			// connection): a technical failure of this attempt.
			res, err := s.recordFailure(ctx, e, counted, fmt.Errorf("inbox: commit: %w", err))
			return res, false, err
		}
		return Result{Outcome: inboxkit.OutcomeProcessed, Status: inboxkit.StatusProcessed, Attempts: attempts}, false, nil
	}

	dec := s.cfg.ClassifyFunc(herr)
	switch dec.Class {
	case inboxkit.ClassBusiness:
		reason := dec.Reason
		if reason == "" {
			reason = "BUSINESS_REJECTED"
		}
		if _, err := tx.ExecContext(ctx, s.q.rollbackSavepont); err != nil {
			rollback()
			return s.afterFailedReject(ctx, e, counted, herr, err)
		}
		if _, err := tx.ExecContext(ctx, s.q.reject, reason, nullString(s.truncate(herr.Error())), s.t(now), s.t(now), e.EventID, e.ConsumerName); err != nil {
			rollback()
			return s.afterFailedReject(ctx, e, counted, herr, err)
		}
		done = true
		if err := tx.Commit(); err != nil {
			return s.afterFailedReject(ctx, e, counted, herr, err)
		}
		return Result{Outcome: inboxkit.OutcomeRejected, Status: inboxkit.StatusRejected, Class: inboxkit.ClassBusiness,
			Reason: reason, Attempts: attempts, Err: herr}, false, nil
	case inboxkit.ClassPoison:
		rollback()
		return Result{Outcome: inboxkit.OutcomeDeadLetter, Status: s.statusOrEmpty(fromFailure || counted), Class: inboxkit.ClassPoison,
			Reason: dec.Reason, Attempts: attempts, Err: herr}, false, nil
	default:
		rollback()
		res, err := s.recordFailure(ctx, e, counted, herr)
		return res, false, err
	}
}

func (s *Store) statusOrEmpty(rowExists bool) inboxkit.Status {
	if rowExists {
		return inboxkit.StatusTechnicalFailure
	}
	return ""
}

// afterFailedReject handles a rejection that could not be committed: it is
// recorded as a technical failure, so the redelivery decides again.
func (s *Store) afterFailedReject(ctx context.Context, e Entry, counted bool, herr, err error) (Result, bool, error) {
	res, rerr := s.recordFailure(ctx, e, counted, fmt.Errorf("inbox: record rejection (%v): %w", herr, err))
	return res, false, rerr
}

// recordFailure records a technical failure in its own transaction (rule 4:
// the handler's rollback cannot erase it) and decides retry or dead letter.
func (s *Store) recordFailure(ctx context.Context, e Entry, counted bool, herr error) (Result, error) {
	dec := s.cfg.ClassifyFunc(herr)
	if dec.Class != inboxkit.ClassTechnical {
		dec = inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: dec.Reason}
	}
	delta := 1
	switch {
	case counted && dec.NoAttempt:
		delta = -1
	case counted || dec.NoAttempt:
		delta = 0
	}
	now := s.now()
	msg := nullString(s.truncate(herr.Error()))
	reason := nullString(dec.Reason)

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: begin: %w (handler error: %v)", err, herr)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op

	res, err := tx.ExecContext(ctx, s.q.updateFailure, delta, reason, string(dec.Class), msg, s.t(now), s.t(now), e.EventID, e.ConsumerName)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		// MySQL counts changed rows, not matched ones: an UPDATE that wrote
		// the same values reports 0. Look at the (now locked) row to tell.
		var st string
		err := tx.QueryRowContext(ctx, s.q.selectStatus, e.EventID, e.ConsumerName).Scan(&st, new(int))
		switch {
		case err == nil && inboxkit.Status(st) == inboxkit.StatusTechnicalFailure:
			n = 1
		case err == nil:
			_ = tx.Rollback()
			return s.duplicateResult(ctx, e)
		case !errors.Is(err, sql.ErrNoRows):
			return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
		}
	}
	if n == 0 {
		first := max(delta, 0)
		_, err := tx.ExecContext(ctx, s.q.insertFailure, e.EventID, e.ConsumerName, nullString(e.CorrelationID), reason, string(dec.Class), msg,
			s.t(now), s.t(now), s.t(now), first, nullString(e.PayloadHash), sourceArg(e.EventIDSource))
		if err != nil {
			_ = tx.Rollback()
			if s.d.IsDuplicate(err) {
				// Someone else finished the event meanwhile.
				return s.duplicateResult(ctx, e)
			}
			return Result{}, fmt.Errorf("inbox: record failure: %w (handler error: %v)", err, herr)
		}
	}
	var attempts int
	if err := tx.QueryRowContext(ctx, s.q.selectAttempts, e.EventID, e.ConsumerName).Scan(&attempts); err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: read attempts: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Result{}, fmt.Errorf("inbox: record failure: commit: %w (handler error: %v)", err, herr)
	}
	r := Result{Outcome: inboxkit.OutcomeRetry, Status: inboxkit.StatusTechnicalFailure, Class: inboxkit.ClassTechnical,
		Reason: dec.Reason, Attempts: attempts, Err: herr, RetryAfter: dec.RetryAfter}
	if attempts >= s.cfg.MaxAttempts && !dec.NoAttempt {
		r.Outcome = inboxkit.OutcomeDeadLetter
		r.Reason = ReasonMaxAttemptsExceeded
	}
	return r, nil
}

func (s *Store) duplicateResult(ctx context.Context, e Entry) (Result, error) {
	st, attempts, ok, err := s.status(ctx, e)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{}, fmt.Errorf("inbox: event %q for %q: row vanished while recording a failure", e.EventID, e.ConsumerName)
	}
	return Result{Outcome: inboxkit.OutcomeDuplicate, Status: st, Attempts: attempts}, nil
}

// countAttempt counts a redelivery in its own transaction before the
// handler runs. It returns the attempt number of this delivery and the
// row's status (TECHNICAL_FAILURE when the attempt may go ahead).
func (s *Store) countAttempt(ctx context.Context, e Entry) (int, inboxkit.Status, error) {
	// Without a row the earlier deliveries left no trace: at least one
	// attempt died before its commit, so this is attempt two or later.
	floor := max(e.DeliveryCount, 2)
	for round := 0; round < 5; round++ {
		now := s.now()
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return 0, "", fmt.Errorf("inbox: count attempt: begin: %w", err)
		}
		res, err := tx.ExecContext(ctx, s.q.countAttempt, e.DeliveryCount, e.DeliveryCount, s.t(now), e.EventID, e.ConsumerName)
		if err != nil {
			_ = tx.Rollback()
			return 0, "", fmt.Errorf("inbox: count attempt: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			_, err := tx.ExecContext(ctx, s.q.insertFailure, e.EventID, e.ConsumerName, nullString(e.CorrelationID), nil, string(inboxkit.ClassTechnical),
				"redelivered without a recorded outcome: an earlier attempt did not finish (consumer crash or lost connection)",
				s.t(now), s.t(now), s.t(now), floor, nullString(e.PayloadHash), sourceArg(e.EventIDSource))
			if err != nil {
				_ = tx.Rollback()
				if !s.d.IsDuplicate(err) {
					return 0, "", fmt.Errorf("inbox: count attempt: %w", err)
				}
				st, attempts, ok, err := s.status(ctx, e)
				if err != nil {
					return 0, "", err
				}
				if ok && st != inboxkit.StatusTechnicalFailure {
					return attempts, st, nil
				}
				continue
			}
		}
		var attempts int
		if err := tx.QueryRowContext(ctx, s.q.selectAttempts, e.EventID, e.ConsumerName).Scan(&attempts); err != nil {
			_ = tx.Rollback()
			return 0, "", fmt.Errorf("inbox: count attempt: read attempts: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return 0, "", fmt.Errorf("inbox: count attempt: commit: %w", err)
		}
		return attempts, inboxkit.StatusTechnicalFailure, nil
	}
	return 0, "", fmt.Errorf("inbox: count attempt for event %q: the row kept changing", e.EventID)
}

// status reads the row's status; ok is false when there is no row. It is
// only ever used to report or route after a constraint or a conditional
// UPDATE decided; never to decide whether to write.
func (s *Store) status(ctx context.Context, e Entry) (inboxkit.Status, int, bool, error) {
	var st string
	var attempts int
	err := s.db.QueryRowContext(ctx, s.q.selectStatus, e.EventID, e.ConsumerName).Scan(&st, &attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("inbox: read status: %w", err)
	}
	return inboxkit.Status(st), attempts, true, nil
}
