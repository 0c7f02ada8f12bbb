package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/hold"
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
// failed before), the INSERT does not insert. The row is then read in the
// transaction (alone: insertFirst; a batch's rows in one statement:
// duplicatesOf), and a processed or rejected row is the duplicate it is;
// any other row takes the marked path, which tells a duplicate from a
// retry. Where the driver holds statements (hold.Driver) the row of a
// delivery alone is read in one round trip with the transaction's
// rollback (readAfterRollback), where in the transaction it would be a
// round trip before it.
//
// A first delivery alone whose handler declared its effects all in the
// transaction (ProcessInTx, BatchItem.EffectsInTx) has its INSERT marked
// for the driver to hold (hold.Counted): a driver that holds it
// (driver/postgres's DriverName) sends it in one round trip with the
// handler's first statement, or after the handler when it sent none. The
// handler then runs before the INSERT has told a new event from a
// duplicate; heldRow makes the outcome the one above: a duplicate's
// handler is rolled back and the delivery takes the marked path; an
// INSERT that failed is the error it would have been sent alone. Which is
// why it needs the declaration: a handler with effects outside the
// transaction would have had them for a duplicate.

// firstOnly reports whether the jobs to start are first deliveries only
// and can run without markers: alone, or where the dialect inserts many
// rows in one statement.
func (s *Store) firstOnly(jobs []*job, alone bool) bool {
	n := 0
	for _, j := range jobs {
		if j.state != jobNew {
			continue
		}
		if !j.e.FirstDelivery {
			return false
		}
		n++
	}
	return n > 0 && (alone || s.q.insertFirstRows != "")
}

// runFirst runs first deliveries without markers: the business
// transaction starts by inserting their rows as PROCESSED at attempt 1,
// then runs them (runTx). A handler that does not succeed has its row
// turned back into the marker it skipped (undoPoint), so that what follows
// is the marked path's own. It reports false, with nothing run, when
// alone the event has a row already, or when a batch's INSERT met a row it
// could not tell (insertFirstBatch): the jobs take the marked path. In a
// batch, jobs whose event has a row already run alone after it.
//
// A batch that may run without savepoints (plainBatch) runs so first; when
// that did not succeed throughout, its rows are taken back with the
// rollback and the batch runs here again, with savepoints.
func (s *Store) runFirst(ctx context.Context, jobs []*job, alone bool) (bool, error) {
	ran, err := s.runFirstTx(ctx, jobs, alone, true)
	if !errors.Is(err, errPlainFailed) {
		return ran, err
	}
	for _, j := range jobs {
		if j.first {
			j.state, j.first, j.started = jobNew, false, 0
		}
	}
	return s.runFirstTx(ctx, jobs, alone, false)
}

// runFirstTx is one transaction of runFirst; mayPlain: without savepoints
// where the batch may (plainBatch).
func (s *Store) runFirstTx(ctx context.Context, jobs []*job, alone, mayPlain bool) (bool, error) {
	tx, err := s.begin(ctx, txName(alone), nil)
	if err != nil {
		return false, err // no handler ran: no attempt (rule 5)
	}
	defer tx.rollback()
	now := s.now()
	if alone {
		inserted, err := s.insertFirst(ctx, tx, jobs[0], now)
		if err == nil && !inserted && jobs[0].state == jobNew {
			err = s.readAfterRollback(ctx, tx, jobs[0])
		}
		if err != nil || !inserted {
			return false, err
		}
		jobs[0].state, jobs[0].first, jobs[0].started = jobMarked, true, 1
	} else {
		inserted, known, err := s.insertFirstBatch(ctx, tx, jobs, now)
		if err != nil || inserted == nil {
			return false, err
		}
		var found []*job
		for _, j := range jobs {
			switch {
			case j.state != jobNew:
			case inserted[j.key()]:
				j.state, j.first, j.started = jobMarked, true, 1
			default:
				j.state = jobSolo
				found = append(found, j)
			}
		}
		if err := s.duplicatesOf(ctx, tx, found, known); err != nil {
			return true, err
		}
	}
	plain := mayPlain && plainBatch(jobs, alone)
	if err := s.runTx(ctx, tx, jobs, alone, plain); err != nil {
		if errors.Is(err, errNotInserted) {
			return false, nil
		}
		if plain && errors.Is(err, errPlainFailed) {
			return true, err
		}
		s.handBack(ctx, jobs)
		return true, err
	}
	return true, nil
}

// insertFirst inserts j's row as PROCESSED at attempt 1 in tx, and reports
// false when the event has a row already: the marked path then tells a
// duplicate from a retry. Where the INSERT fails on the event's key and
// the transaction outlives its failed statement (MySQL), or skips the row
// (Store.readsMet), the row it met is read in the transaction, and a
// terminal row settles j as the duplicate it is, as the marked path
// would: a SELECT where the marker would be a write committed on its own.
// The INSERT itself does not read the row: that made every new message
// slower (docs/decisions.md, 2026-12-07 and 2026-12-01). Where j's handler
// declared its effects in the transaction and the dialect's INSERT skips
// an existing row, the driver may hold the INSERT: it reports true,
// j.held is set, and heldRow decides after the handler.
func (s *Store) insertFirst(ctx context.Context, tx *txn, j *job, now time.Time) (bool, error) {
	ictx := ctx
	if j.effectsInTx && s.d.doNothing != "" {
		j.count = hold.Count{}
		ictx = hold.Counted(ctx, "inbox: insert event", &j.count)
	}
	r, err := s.q.insertFirst.exec(ictx, tx, j.e.row(arg{"now", s.t(now)}))
	if err != nil {
		switch {
		case !s.d.IsDuplicate(err):
			return false, fmt.Errorf("inbox: insert event: %w", err)
		case s.d.abortsOnError:
			return false, nil
		}
	} else {
		n, err := r.RowsAffected()
		switch {
		case errors.Is(err, hold.ErrHeld):
			j.held = true
			return true, nil
		case err != nil || n == 1:
			return err == nil, nil
		case !s.readsMet():
			return false, nil
		}
	}
	// The INSERT met the event's row and the transaction goes on: read it.
	st, attempts, ok, err := s.status(ctx, tx, j.e)
	if ok {
		s.duplicate(j, presentRow{st, attempts})
	}
	return false, err
}

// errNotInserted: a held INSERT (insertFirst) found the event's row. The
// business transaction was rolled back, and the job is done by
// readAfterRollback (a duplicate) or new again: it takes the marked path.
var errNotInserted = errors.New("inbox: the first delivery's row exists")

// heldRow decides, once j's handler returned, what j's held INSERT says:
// its error is the delivery's error (nothing ran, as when it fails
// alone), no row inserted is errNotInserted, both with the transaction
// ended. Where the handler sent no statement the INSERT is sent now, by a
// probe, before anything is decided or committed: the handler may have
// held statements of its own (outbox.Add), which a COMMIT would carry with
// an INSERT that found the event's row.
func (s *Store) heldRow(ctx context.Context, tx *txn, j *job) error {
	if !j.count.Sent {
		if _, err := s.q.heldProbe.exec(ctx, tx, j.e.key()); err != nil && !j.count.Sent {
			tx.rollback()
			j.unstart()
			return fmt.Errorf("inbox: insert event: %w", err)
		}
	}
	switch {
	case j.count.Err != nil:
		tx.rollback()
		err := j.count.Err
		j.unstart()
		return fmt.Errorf("inbox: insert event: %w", err)
	case j.count.Rows != 1:
		j.unstart()
		if err := s.readAfterRollback(ctx, tx, j); err != nil {
			return err
		}
		return errNotInserted
	}
	return nil
}

// readAfterRollback ends tx, the transaction of a first delivery alone
// whose INSERT found the event's row, with its rollback, and where the
// driver can (hold.RollbackFirst) reads the row in the same round trip:
// a processed or rejected row is the duplicate it is, and j is done with
// nothing written (the row is neither locked nor changed). Any other
// row, no row (purged after the INSERT met it), a driver that cannot
// (the read then ran in tx, its row unseen) and an attempt of the event
// to be taken back first (applyForgotten) leave j new, having decided
// nothing: the marked path tells a retry from a duplicate with its
// marker. Where insertFirst read the row in tx already (readsMet, or a
// dialect whose INSERT fails on the row), or the dialect's INSERT does
// not skip rows, it only rolls back. The rollback precedes everything
// else on the pool (a pool of one).
func (s *Store) readAfterRollback(ctx context.Context, tx *txn, j *job) error {
	if s.d.doNothing == "" || s.readsMet() || s.noAhead.Load() || s.forgotten(j.e) {
		tx.rollback()
		return nil
	}
	var st string
	var attempts int
	r := hold.Rolled{Dest: []any{&st, &attempts}}
	_, err := s.q.selectStatus.exec(hold.RollbackFirst(ctx, &r), tx, j.e.key())
	tx.rollback()
	switch {
	case err != nil:
		// An error says nothing of what the driver can: the statement
		// may never have reached it (ctx done, the transaction rolled
		// back by database/sql first).
		return fmt.Errorf("inbox: read status: %w", err)
	case !r.Done:
		s.noAhead.Store(true) // the same driver cannot run ahead either
		return nil
	case r.Found:
		s.duplicate(j, presentRow{inboxkit.Status(st), attempts})
	}
	return nil
}

// unstart makes a first delivery whose held INSERT did not insert new
// again, as if its business transaction had never run.
func (j *job) unstart() {
	j.state, j.first, j.started, j.v, j.herr, j.held = jobNew, false, 0, verdict{}, nil, false
}

// duplicatesOf reads, in one statement, the rows the batch's INSERT found
// for jobs (or takes them from known, where insertFirstBatch read them),
// and settles a job whose row is a duplicate by the decision table (a
// terminal row) as Process would report it; the others stay solo (the
// marked path after the batch).
func (s *Store) duplicatesOf(ctx context.Context, tx *txn, jobs []*job, known map[jobKey]presentRow) error {
	if len(jobs) == 0 {
		return nil
	}
	rows := known
	if rows == nil {
		var err error
		if rows, err = s.present(ctx, tx, jobs); err != nil {
			return err
		}
	}
	for _, j := range jobs {
		if r, ok := rows[j.key()]; ok {
			s.duplicate(j, r)
		}
	}
	return nil
}

// duplicate settles j as Process reports a duplicate where r, the row of
// its event a statement found, is one by the decision table (a terminal
// row); otherwise j is left as it was.
func (s *Store) duplicate(j *job, r presentRow) {
	if v := decide(facts{Found: r.status, Attempts: r.attempts, MaxAttempts: s.cfg.Retry.MaxAttempts}); v.Outcome == inboxkit.OutcomeDuplicate {
		j.done(Result{Outcome: inboxkit.OutcomeDuplicate, Status: r.status, Attempts: r.attempts}, nil)
	}
}

// insertFirstBatch inserts the rows of jobs as PROCESSED at attempt 1 in one
// statement and returns the keys it inserted. Where the dialect has no
// doNothing (MySQL), one existing row fails the whole statement; where the
// transaction outlives it, the rows of the jobs' events are read (known,
// for duplicatesOf) and the others inserted in a second statement. It
// returns nil inserted, and the batch takes the marked path, where that
// cannot be done: the transaction is aborted, the duplicate key was not
// an event's (a legacy table's other unique index), or the second
// statement met a row inserted meanwhile.
func (s *Store) insertFirstBatch(ctx context.Context, tx *txn, jobs []*job, now time.Time) (inserted map[jobKey]bool, known map[jobKey]presentRow, err error) {
	// Rows in key order, as markBatch takes them: two batches with events
	// in common wait for each other instead of deadlocking.
	order := slices.DeleteFunc(slices.Clone(jobs), func(j *job) bool { return j.state != jobNew })
	slices.SortFunc(order, byKey)
	a := args{{"now", s.t(now)}}
	if s.d.doNothing == "" {
		ok, err := s.insertRows(ctx, tx, order, a)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			if ok, known, err = s.insertAbsent(ctx, tx, order, a); err != nil || !ok {
				return nil, nil, err
			}
		}
		inserted := make(map[jobKey]bool, len(order))
		for _, j := range order {
			if _, found := known[j.key()]; !found {
				inserted[j.key()] = true
			}
		}
		return inserted, known, nil
	}
	st := compileListed(s.d, s.q.insertFirstRows, firstRow, s.d.doNothing+" RETURNING EVENT_ID, CONSUMER_NAME", len(order))
	rows, err := tx.QueryContext(ctx, st.text, st.bindRows(a, rowArgs(order))...)
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: insert events: %w", err)
	}
	defer rows.Close()
	inserted = make(map[jobKey]bool, len(jobs))
	for rows.Next() {
		var e Entry
		if err := rows.Scan(&e.EventID, &e.ConsumerName); err != nil {
			return nil, nil, fmt.Errorf("inbox: insert events: %w", err)
		}
		inserted[jobKey{e.EventID, e.ConsumerName}] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("inbox: insert events: %w", err)
	}
	return inserted, nil, nil
}

// insertRows inserts the rows of jobs (key order) in one statement of a
// dialect without doNothing, and reports false where an existing row
// failed it.
func (s *Store) insertRows(ctx context.Context, tx *txn, jobs []*job, a args) (bool, error) {
	if len(jobs) == 0 {
		return true, nil
	}
	st := compileListed(s.d, s.q.insertFirstRows, firstRow, "", len(jobs))
	_, err := tx.ExecContext(ctx, st.text, st.bindRows(a, rowArgs(jobs))...)
	switch {
	case s.d.IsDuplicate(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inbox: insert events: %w", err)
	}
	return true, nil
}

// insertAbsent follows insertRows' duplicate key where the transaction
// outlives it: it reads the rows of the jobs' events (known) and inserts
// the others in one statement. It reports false where it cannot tell
// (see insertFirstBatch).
func (s *Store) insertAbsent(ctx context.Context, tx *txn, jobs []*job, a args) (ok bool, known map[jobKey]presentRow, err error) {
	if s.d.abortsOnError {
		return false, nil, nil
	}
	if known, err = s.present(ctx, tx, jobs); err != nil {
		return false, nil, err
	}
	absent := slices.DeleteFunc(slices.Clone(jobs), func(j *job) bool { _, found := known[j.key()]; return found })
	if len(absent) == len(jobs) {
		return false, nil, nil // another unique index's key, or the row went meanwhile
	}
	ok, err = s.insertRows(ctx, tx, absent, a)
	return ok, known, err
}
