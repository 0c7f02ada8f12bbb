package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// The letter protocol, the same for both variants: a dead letter, or a
// rejection recorded apart from the business transaction, is recorded in a
// transaction of its own (the row DEAD_LETTERED or REJECTED), its envelope
// published while that uncommitted write holds the row, and the
// transaction committed only after the publish (rule 3). When the publish
// fails nothing is recorded and the attempt is given back: a transactional
// delivery's marker is taken back (a poison message's; an exhausted one's
// failures stay counted) and the delivery handed back; a claim is retried
// after its backoff, its attempt counted, since (owner, ATTEMPTS) is its
// lease's fencing token. A delivery that finds the row terminal, or loses
// the race for it, publishes nothing: one envelope per event.

// letter settles job j by the letter protocol of kind k: a dead letter,
// or a claim's rejection alone.
func (s *Store) letter(ctx context.Context, j *job, k letterKind) {
	switch {
	case j.claim != nil:
		s.letterClaim(ctx, j, k)
	case !s.publishes(deadLetter):
		j.state = jobDone // the caller publishes, then marks the row (MarkDeadLettered)
	default:
		s.deadLetter(ctx, j)
	}
}

// reject records the rejection of a transactional job alone, after its
// business transaction was rolled back: one UPDATE of its marker's row
// (one INSERT for a first delivery, rowless), or with a reject queue the
// letter protocol. A rejection of a marked row that cannot be recorded is
// a technical failure, so that the redelivery decides again.
func (s *Store) reject(ctx context.Context, j *job, alone bool) {
	j.res = j.v.result(inboxkit.StatusRejected, j.started, j.herr)
	record := func(q execer) error { return s.recordRow(ctx, q, j, s.rejectArgs(j)) }
	if j.rowless(alone) {
		record = func(q execer) error {
			_, err := s.verdict(ctx, q, s.q.insertRejected, s.rejectArgs(j))
			return err
		}
	}
	var err error
	if !s.publishes(rejection) {
		err = s.inTx(ctx, "record rejection", func(tx *txn) error { return record(tx) })
	} else {
		var sent bool
		if sent, err = s.inLetterTx(ctx, j, rejection, func(tx *txn) (Record, error) { return Record{}, record(tx) }); sent {
			if err != nil {
				s.ForgetAttempt(ctx, j.e, j.started)
			}
			j.done(j.res, err)
			return
		}
	}
	switch {
	case err == nil:
		j.state = jobDone
	case j.rowless(alone) && s.d.IsDuplicate(err):
		j.done(s.duplicateResult(ctx, j.e)) // another delivery of the event recorded it meanwhile
	case j.rowless(alone):
		// Not recorded: the database is unreachable. Nothing counts (rule 5).
		j.done(Result{}, fmt.Errorf("inbox: record rejected: %w (handler error: %v)", err, j.herr))
	default:
		j.failed(s, fmt.Errorf("inbox: record rejection (%v): %w", j.herr, err))
		s.settleRan(ctx, j, alone)
	}
}

// inLetterTx runs the letter protocol of kind k for j: record in a new
// transaction, the envelope of j.res with the row record returned, the
// commit. sent reports that the publish was tried: err is then the
// publish's or the commit's (nothing, or only the envelope, went out);
// otherwise err is record's.
func (s *Store) inLetterTx(ctx context.Context, j *job, k letterKind, record func(tx *txn) (Record, error)) (sent bool, err error) {
	tx, err := s.begin(ctx, "dead-letter", nil)
	if err != nil {
		return false, err
	}
	defer tx.rollback()
	r, err := record(tx)
	if err != nil {
		return false, err
	}
	if err := s.send(k, j, r); err != nil {
		return true, err
	}
	if err := tx.commit(); err != nil {
		return true, fmt.Errorf("%w (the envelope is out; it is published again): %w", errCommit, err)
	}
	return true, nil
}

// errCommit is wrapped by the error of a letter whose transaction did not
// commit after its publish.
var errCommit = errors.New("inbox: commit after publish")

// errFound stops the protocol of a dead letter whose row another delivery
// finished: nothing to publish.
var errFound = errors.New("inbox: the event's row is terminal")

// deadLetter dead-letters a transactional job with the letter protocol.
// Its row moves to DEAD_LETTERED (a TECHNICAL_FAILURE row by a conditional
// UPDATE, an event without a row by the primary-key INSERT); a job that
// finds the row terminal, or loses the race for it, becomes a DUPLICATE.
// When the database refuses a value of the entry (see Process) the row is
// recorded without the correlation id, payload hash and id source; when
// it refuses the event id itself, there is no row and the reason becomes
// INVALID_EVENT_ID. A job without a usable event id has no row.
func (s *Store) deadLetter(ctx context.Context, j *job) {
	if idReason(j.e.EventID) != "" {
		_, err := s.inLetterTx(ctx, j, deadLetter, func(*txn) (Record, error) { return Record{}, nil })
		j.done(j.res, err)
		return
	}
	bare := false // the row without the entry's optional values
	for round := 0; round < 4; round++ {
		var st inboxkit.Status
		sent, err := s.inLetterTx(ctx, j, deadLetter, func(tx *txn) (Record, error) {
			r, after, err := s.deadRow(ctx, tx, j, bare)
			st = after
			return r, err
		})
		switch {
		case sent && err == nil:
			j.res.Status = st
			j.state = jobDone
			return
		case errors.Is(err, errFound):
			j.done(Result{Outcome: inboxkit.OutcomeDuplicate, Status: st, Attempts: j.res.Attempts}, nil)
			return
		case errors.Is(err, errAgain):
			continue
		case !sent && classify.ValueReason(err) != "" && !bare:
			bare = true
			continue
		case !sent && classify.ValueReason(err) != "":
			// The database refuses the key itself (a legacy EVENT_ID column
			// narrower than MaxEventIDLength): no row, as for a missing id.
			j.res.Reason = inboxkit.ReasonInvalidEventID
			_, err = s.inLetterTx(ctx, j, deadLetter, func(*txn) (Record, error) { return Record{}, nil })
		}
		if err != nil && j.res.Class == inboxkit.ClassPoison {
			// Handed back because the DLQ or the database was unreachable:
			// no attempt, so the redelivery dead-letters it with its poison
			// reason, not MAX_ATTEMPTS_EXCEEDED.
			s.ForgetAttempt(ctx, j.e, j.started)
		}
		j.done(j.res, err)
		return
	}
	j.done(j.res, fmt.Errorf("inbox: dead-letter event %q for %q: the row kept changing", j.e.EventID, j.e.ConsumerName))
}

// errAgain: the row appeared or changed between two statements; look again.
var errAgain = errors.New("inbox: the row changed")

// deadRow moves j's row to DEAD_LETTERED in tx and returns it as it was
// before (the zero Record when there was none) with the row's status
// after; or errFound with the status of a terminal row, or errAgain. A row
// in a status the state machine does not know (UNKNOWN_STATUS, adopted
// tables) is left as it is: the message is published all the same. bare
// leaves the entry's optional values out.
func (s *Store) deadRow(ctx context.Context, tx *txn, j *job, bare bool) (Record, inboxkit.Status, error) {
	r, err := scanRecord(s.q.selectOne.queryRow(ctx, tx, j.e.key()))
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Record{}, "", fmt.Errorf("inbox: dead-letter: %w", err)
	}
	switch {
	case found && r.Status.Terminal():
		return Record{}, r.Status, errFound
	case found && r.Status != inboxkit.StatusTechnicalFailure:
		return r, r.Status, nil // not ours to change: an operator maps it
	}
	reason := j.res.Reason
	if found && reason == "" {
		reason = r.ReasonCode
	}
	dead := s.deadArgs(DeadLetter{Entry: j.e, Class: j.res.Class, Reason: reason, Err: j.res.Err}, bare)
	if found {
		res, err := s.verdict(ctx, tx, s.q.deadFromFailure, dead)
		if err != nil {
			return Record{}, "", fmt.Errorf("inbox: dead-letter: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return Record{}, "", errAgain // finished by another delivery meanwhile
		}
		return r, inboxkit.StatusDeadLettered, nil
	}
	if _, err := s.verdict(ctx, tx, s.q.insertDead, dead); err != nil {
		if s.d.IsDuplicate(err) {
			return Record{}, "", errAgain
		}
		return Record{}, "", fmt.Errorf("inbox: dead-letter: %w", err)
	}
	return Record{}, inboxkit.StatusDeadLettered, nil
}

// letterClaim settles a claim by the letter protocol of kind k: a dead
// letter, or a rejection of a claim alone. A rejection that cannot be
// recorded is a technical failure (retried after the backoff); a dead
// letter whose publish failed keeps the entry, retried after the backoff
// (dead-lettered on a later claim: nothing is lost).
func (s *Store) letterClaim(ctx context.Context, j *job, k letterKind) {
	c := j.claim
	if k == rejection {
		j.res = j.v.result(inboxkit.StatusRejected, j.started, j.herr)
		var err error
		if s.publishes(rejection) {
			var sent bool
			if sent, err = s.inLetterTx(ctx, j, rejection, func(tx *txn) (Record, error) {
				return Record{}, s.recordRow(ctx, tx, j, s.rejectArgs(j))
			}); sent && err != nil {
				err = fmt.Errorf("inbox: process: publish rejection: %w", err)
			}
		} else {
			err = s.inTx(ctx, "record rejection", func(tx *txn) error { return s.recordRow(ctx, tx, j, s.rejectArgs(j)) })
		}
		switch {
		case err == nil:
			j.state = jobDone
		case errors.Is(err, ErrLeaseLost):
			j.done(Result{}, err)
		default:
			j.failed(s, fmt.Errorf("inbox: record rejection (%v): %w", j.herr, err))
			s.settleClaim(ctx, j, true)
		}
		return
	}
	cause := j.herr
	j.res = Result{Outcome: inboxkit.OutcomeDeadLetter, Class: j.v.Class, Reason: j.v.Reason, Attempts: c.Attempts, Err: cause}
	var msg any
	if cause != nil {
		msg = s.truncate(cause.Error())
	}
	sent, err := s.inLetterTx(ctx, j, deadLetter, func(tx *txn) (Record, error) {
		r, err := scanRecord(s.q.selectOne.queryRow(ctx, tx, Entry{EventID: c.Message.ID, ConsumerName: c.ConsumerName}.key()))
		if err != nil {
			return Record{}, fmt.Errorf("inbox: dead-letter: %w", err)
		}
		set := args{{"reason", nullString(j.v.Reason)}, {"class", string(j.v.Class)}, {"error", msg}, {"now", s.t(s.now())}}
		if err := c.lease().record(ctx, s, tx, s.qq.deadLettered, set); err != nil {
			return Record{}, err
		}
		return r, nil
	})
	switch {
	case err == nil:
		j.res.Status = inboxkit.StatusDeadLettered
		j.state = jobDone
	case sent && errors.Is(err, errCommit):
		j.done(Result{}, err)
	case sent:
		// Keep the entry: the next claim (past the threshold, or poison
		// again) tries the dead letter again after a backoff.
		res, rerr := s.retryLater(ctx, c, j.v.Class, j.v.Reason, 0, false, fmt.Errorf("dead-letter publish failed: %w (cause: %v)", err, cause))
		if rerr == nil {
			res.Err = err
		}
		j.done(res, rerr)
	default:
		j.done(Result{}, err)
	}
}

// DeadLetter dead-letters a message the store did not process (Receive
// refused it: no usable event id, a value the database cannot store) by
// the letter protocol: the event's row, if it can have one, becomes
// DEAD_LETTERED while the envelope of dl.Entry.Message is published to
// Ports.DeadLetterQueue, then commits. The result is DEAD_LETTER (Status
// DEAD_LETTERED, or "" without a row), or DUPLICATE when the event's row
// is terminal already; an error means the publish or the database failed:
// hand the delivery back. The store must have ports (WithPorts).
func (s *Store) DeadLetter(ctx context.Context, dl DeadLetter) (Result, error) {
	if s.ports == nil {
		return Result{}, errors.New("inbox: DeadLetter: the store has no publish ports (use Store.WithPorts)")
	}
	e, _, err := normalize(dl.Entry)
	if err != nil {
		return Result{}, err
	}
	class := dl.Class
	if class == "" {
		class = inboxkit.ClassTechnical
	}
	j := &job{ctx: ctx, e: e}
	j.decided(Result{Outcome: inboxkit.OutcomeDeadLetter, Class: class, Reason: dl.Reason, Err: dl.Err})
	s.deadLetter(ctx, j)
	return j.res, j.err
}
