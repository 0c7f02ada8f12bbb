package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// The first-delivery path.
//
// A delivery the broker vouches has never been delivered before
// (Entry.FirstDelivery) cannot have started a handler before, so there is
// no attempt to count ahead of it: it runs without the attempt marker. Its
// business transaction inserts the row as PROCESSED at attempt 1, runs the
// handler and commits: one transaction and the same statements as a
// hand-written inbox (BEGIN, INSERT, the handler's writes, COMMIT), where
// the marked path adds a committed marker and turns the INSERT into an
// UPDATE that writes every index a second time.
//
// What it gives up is stated once, at Store.Process ("The first
// delivery"). Everything else is recorded as on the marked path: a
// rejection, a technical failure or poison rolls the transaction back and
// writes the row the marked path would have left, at attempt 1.
//
// When the row exists already (a duplicate, a resend of an event that
// failed before), the INSERT does not insert and the delivery takes the
// marked path, which tells a duplicate from a retry.

// processFirst runs a first delivery without a marker. done is false when
// the event has a row: nothing ran, and the delivery takes the marked path.
func (s *Store) processFirst(ctx context.Context, e Entry, h Handler) (res Result, done bool, err error) {
	now := s.now()
	tx, err := s.begin(ctx, "process", nil)
	if err != nil {
		return Result{}, true, err // no handler ran: no attempt (rule 5)
	}
	defer tx.rollback()
	inserted, err := s.insertFirst(ctx, tx, e, now)
	if err != nil || !inserted {
		return Result{}, err != nil, err
	}
	herr := h(ctx, tx.Tx)
	v := decide(facts{Ran: true, Decision: s.classify(herr), Attempts: 1, MaxAttempts: s.cfg.Retry.MaxAttempts})
	if v.Row == inboxkit.StatusProcessed {
		if err := tx.commit(); err != nil {
			// A technical failure of this attempt (or a commit whose
			// answer was lost: recordFailure then finds the row).
			res, err := s.recordFailure(ctx, e, fmt.Errorf("inbox: commit: %w", err))
			return res, true, err
		}
		return v.result(v.Row, 1, nil), true, nil
	}
	tx.rollback()
	res, err = s.recordFirst(ctx, e, v, herr, now)
	return res, true, err
}

// insertFirst inserts e's row as PROCESSED at attempt 1 in tx, and reports
// false when the event has a row already: the marked path then tells a
// duplicate from a retry. It does not read the row it found (why:
// docs/decisions.md, 2026-12-01, 897690b).
func (s *Store) insertFirst(ctx context.Context, tx *txn, e Entry, now time.Time) (bool, error) {
	r, err := s.q.insertFirst.exec(ctx, tx, e.row(args{"now": s.t(now)}))
	if err != nil {
		if s.d.IsDuplicate(err) {
			return false, nil
		}
		return false, fmt.Errorf("inbox: insert event: %w", err)
	}
	n, err := r.RowsAffected()
	return err == nil && n == 1, nil
}

// recordFirst records the outcome of a first delivery whose handler did not
// succeed, after its transaction rolled back: the row the marked path would
// have left at attempt 1. A row that appeared meanwhile (another delivery
// of the event) makes it a duplicate.
func (s *Store) recordFirst(ctx context.Context, e Entry, v verdict, herr error, now time.Time) (Result, error) {
	var st inboxkit.Status
	var err error
	switch {
	case v.Row == inboxkit.StatusRejected:
		st = inboxkit.StatusRejected
		_, err = s.q.insertRejected.exec(ctx, s.db, e.row(args{"reason": v.Reason, "error": nullString(s.truncate(herr.Error())), "now": s.t(now)}))
	case v.Class == inboxkit.ClassPoison:
		// The row a marker would have left; the caller publishes, then
		// marks it (MarkDeadLettered).
		st = inboxkit.StatusTechnicalFailure
		_, err = s.q.insertStarted.exec(ctx, s.db, e.row(args{"now": s.t(now)}))
	default:
		return s.recordFailure(ctx, e, herr)
	}
	switch {
	case err == nil:
		return v.result(st, 1, herr), nil
	case s.d.IsDuplicate(err):
		return s.duplicateResult(ctx, e)
	}
	// Not recorded: the database is unreachable. Nothing counts (rule 5).
	return Result{}, fmt.Errorf("inbox: record %s: %w (handler error: %v)", strings.ToLower(string(st)), err, herr)
}

// firstBatch runs a batch of first deliveries without attempt markers: the
// business transaction starts with one INSERT of all their rows as
// PROCESSED at attempt 1, then runs each handler behind its savepoint as
// runBatch does, and commits. A handler that does not succeed is rolled
// back to its savepoint and its row turned into the marker the marked path
// would have committed (unprocess), so that what follows (the rejection's
// UPDATE, the failure recorded after the commit, a hand-back) is the marked
// path's own. Jobs whose event has a row already run solo after the batch.
// It reports false, with nothing run, when the dialect's INSERT cannot skip
// existing rows and met one (MySQL): the batch takes the marked path.
func (s *Store) firstBatch(ctx context.Context, jobs []*job) (bool, error) {
	tx, err := s.begin(ctx, "process batch", nil)
	if err != nil {
		return false, err
	}
	defer tx.rollback()
	inserted, err := s.insertFirstBatch(ctx, tx, jobs, s.now())
	if err != nil || inserted == nil {
		return false, err
	}
	var found []*job
	for _, j := range jobs {
		j.started, j.first = 1, true
		if !inserted[j.key()] {
			j.started, j.first, j.solo = 0, false, true
			found = append(found, j)
		}
	}
	if err := s.duplicatesOf(ctx, tx, found); err != nil {
		return true, err
	}
	if err := s.runItems(ctx, tx, jobs); err != nil {
		s.handBack(ctx, jobs)
		return true, err
	}
	return true, nil
}

// duplicatesOf reads, in one statement, the rows the batch's INSERT found
// for jobs, and settles a job whose row is a duplicate by the decision
// table (a terminal row) as Process would report it; the others stay solo
// (the marked path after the batch).
func (s *Store) duplicatesOf(ctx context.Context, tx *txn, jobs []*job) error {
	if len(jobs) == 0 {
		return nil
	}
	rows, err := s.present(ctx, tx, jobs)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		r, ok := rows[j.key()]
		if !ok {
			continue
		}
		if v := decide(facts{Found: r.status, Attempts: r.attempts, MaxAttempts: s.cfg.Retry.MaxAttempts}); v.Outcome == inboxkit.OutcomeDuplicate {
			j.solo, j.res = false, Result{Outcome: inboxkit.OutcomeDuplicate, Status: r.status, Attempts: r.attempts}
		}
	}
	return nil
}

// insertFirstBatch inserts the rows of jobs as PROCESSED at attempt 1 in one
// statement and returns the keys it inserted. Where the dialect has no
// doNothing (MySQL), one existing row fails the whole statement: nil, and
// the batch takes the marked path.
func (s *Store) insertFirstBatch(ctx context.Context, tx *txn, jobs []*job, now time.Time) (map[string]bool, error) {
	// Rows in key order, as markBatch takes them: two batches with events
	// in common wait for each other instead of deadlocking.
	order := slices.Clone(jobs)
	slices.SortFunc(order, func(a, b *job) int { return strings.Compare(a.key(), b.key()) })
	values, a := rowsOf(firstRow, order, s.t(now))
	if s.d.doNothing == "" {
		_, err := compile(s.d, s.q.insertFirstRows+values).exec(ctx, tx, a)
		switch {
		case s.d.IsDuplicate(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("inbox: insert events: %w", err)
		}
		inserted := make(map[string]bool, len(jobs))
		for _, j := range jobs {
			inserted[j.key()] = true
		}
		return inserted, nil
	}
	st := compile(s.d, s.q.insertFirstRows+values+s.d.doNothing+" RETURNING EVENT_ID, CONSUMER_NAME")
	rows, err := tx.QueryContext(ctx, st.text, st.bind(a)...)
	if err != nil {
		return nil, fmt.Errorf("inbox: insert events: %w", err)
	}
	defer rows.Close()
	inserted := make(map[string]bool, len(jobs))
	for rows.Next() {
		var e Entry
		if err := rows.Scan(&e.EventID, &e.ConsumerName); err != nil {
			return nil, fmt.Errorf("inbox: insert events: %w", err)
		}
		inserted[(&job{e: e}).key()] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: insert events: %w", err)
	}
	return inserted, nil
}
