package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
)

// What the engine records of a transactional job besides its marker: the
// claim of the marked row in the business transaction, and a technical
// failure apart from it (rule 4).

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
func (s *Store) claim(ctx context.Context, tx *txn, e Entry) (bool, error) {
	res, err := s.q.processFromFail.exec(ctx, tx, e.row(arg{"now", s.t(s.now())}))
	if err != nil {
		return false, fmt.Errorf("inbox: claim event: %w", err)
	}
	k, err := res.RowsAffected()
	return err == nil && k == 1, nil
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

	failure := e.row(arg{"delta", delta}, arg{"reason", reason}, arg{"class", string(dec.Class)}, arg{"error", msg}, arg{"now", s.t(now)})
	res, err := s.verdict(ctx, tx, s.q.updateFailure, failure)
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
			if err := s.logAttempt(ctx, tx, failure); err != nil {
				return Result{}, fmt.Errorf("%w (handler error: %v)", err, herr)
			}
		case ok:
			tx.rollback()
			return s.duplicateResult(ctx, e)
		}
	}
	if n == 0 {
		first := 1 + delta // the row vanished (a purge?): this attempt ran
		failure = failure.set("attempts", first)
		_, err := s.verdict(ctx, tx, s.q.insertFailure, failure)
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
	if err := s.q.selectAttempts.queryRow(ctx, tx, e.key()).Scan(&attempts); err != nil {
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
	err := s.q.selectStatus.queryRow(ctx, q, e.key()).Scan(&st, &attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("inbox: read status: %w", err)
	}
	return inboxkit.Status(st), attempts, true, nil
}
