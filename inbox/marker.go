package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
)

// Attempt markers (rule 5): before a transactional delivery's handler runs,
// its attempt is committed in a transaction of its own, the row inserted as
// TECHNICAL_FAILURE with ATTEMPTS 1 or a TECHNICAL_FAILURE row's ATTEMPTS
// raised by one. Alone (markOne) that is one statement where the dialect
// has it; a batch (markBatch) commits the markers of all its deliveries in
// one transaction.

// forgotten are the attempt markers a Store could not take back yet (see
// ForgetAttempt), shared by the Stores WithPorts derives.
type forgotten struct {
	mu sync.Mutex
	n  map[[2]string]int
}

// markerError is the LAST_ERROR an attempt marker leaves for the attempt
// before it when that one recorded no outcome.
const markerError = "an earlier attempt started its handler and recorded no outcome (the consumer died or lost its database connection while the handler ran)"

// markOne commits the attempt marker of a job alone and sets its state:
// marked with the attempt that may run, decided (an exhausted row: a dead
// letter, MAX_ATTEMPTS_EXCEEDED) or done (a duplicate).
func (s *Store) markOne(ctx context.Context, j *job) error {
	if err := s.applyForgotten(ctx, j.e); err != nil {
		return err
	}
	for round := 0; round < 5; round++ {
		m, err := s.mark(ctx, s.db, j.e)
		if err != nil {
			if m.counted {
				// The marker is committed; take it back when we can.
				s.remember(j.e, -1)
			}
			return err
		}
		if !m.again {
			m.apply(j)
			return nil
		}
	}
	return fmt.Errorf("inbox: start attempt for event %q: the row kept changing", j.e.EventID)
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
	res, err := s.q.startAttempt.exec(ctx, q, e.key(arg{"marker", markerError}, arg{"now", s.t(now)}, arg{"max", s.cfg.Retry.MaxAttempts}))
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
	_, err = s.q.insertStarted.exec(ctx, q, e.row(arg{"now", s.t(now)}))
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
	err := s.q.selectMarker.queryRow(ctx, q, e.key()).Scan(&class, &attempts)
	return err == nil && class.String == "" && attempts > 0
}

// apply sets j's state from what mark did.
func (m marked) apply(j *job) {
	switch {
	case m.started > 0:
		j.state, j.started = jobMarked, m.started
	case m.res.Outcome == inboxkit.OutcomeDeadLetter:
		j.decided(m.res)
	default:
		j.done(m.res, nil)
	}
}

// pgMarkUpsert is PostgreSQL's attempt marker in one statement (rule 5): an
// upsert on the primary key, which still decides (rule 1). It inserts the
// row as TECHNICAL_FAILURE with ATTEMPTS 1, or raises the ATTEMPTS of a
// TECHNICAL_FAILURE row below the backout threshold, and returns (STATUS,
// ATTEMPTS, true) for the attempt it counted. A row it must not touch
// (terminal, exhausted, or a store-then-process entry) is left alone and
// returned as the statement's snapshot saw it, with false: a duplicate
// costs one round trip as well. No row at all: another delivery inserted it
// after the snapshot (read it again).
//
// The marker commits with synchronous_commit off for its own implicit
// transaction only (set_config(..., true)), so the commit does not wait for
// its WAL flush. Why that is safe: the marker is visible to every other
// session at once, so no competing delivery misses it; WAL is flushed in
// order, so the business transaction's synchronous commit (or the failure
// record's) makes the marker durable before it returns; a consumer process
// that dies in its handler never loses its marker, the server has it. Only
// a crash of the database server itself, before the WAL writer flushed (a
// fraction of a second), can lose a marker, and then that one attempt is
// not counted: the message comes again and is counted then.
//
// MySQL has its own (mysqlMarkUpsert), which reports what it found through
// the last insert id. SQLite and Oracle keep the three statements of mark
// (UPDATE, status SELECT, INSERT; BenchmarkProcessSteps runs both): on
// SQLite an upsert takes the write lock for every duplicate, and a new
// message's cost is its commit either way; Oracle has no upsert that
// returns what it did. The figures: docs/decisions.md.
const pgMarkUpsert = `WITH sync AS (SELECT set_config('synchronous_commit', 'off', true)), ` +
	`m AS (INSERT INTO %[1]s AS t (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) ` +
	`SELECT @event, @consumer, 'TECHNICAL_FAILURE', @corr, @now, @now, 1, @hash, @source, @okey FROM sync ` +
	`ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO UPDATE SET ` +
	`LAST_ERROR = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN @marker ELSE t.LAST_ERROR END, ` +
	`FIRST_FAILED_AT = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN COALESCE(t.FIRST_FAILED_AT, t.UPDATED_AT) ELSE t.FIRST_FAILED_AT END, ` +
	`ERROR_CLASS = NULL, UPDATED_AT = @now, ATTEMPTS = t.ATTEMPTS + 1 ` +
	`WHERE t.STATUS = 'TECHNICAL_FAILURE' AND t.ATTEMPTS < @max ` +
	`RETURNING t.STATUS, t.ATTEMPTS) ` +
	`SELECT STATUS, ATTEMPTS, true FROM m UNION ALL ` +
	`SELECT STATUS, ATTEMPTS, false FROM %[1]s WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer AND NOT EXISTS (SELECT 1 FROM m)`

// markUpsert is mark in one statement, where the dialect has one (see
// pgMarkUpsert).
func (s *Store) markUpsert(ctx context.Context, q execer, e Entry) (marked, error) {
	if s.d.foundByID {
		return s.markByID(ctx, q, e)
	}
	var st string
	var attempts int
	var counted bool
	err := s.q.markUpsert.queryRow(ctx, q, e.row(arg{"marker", markerError}, arg{"now", s.t(s.now())}, arg{"max", s.cfg.Retry.MaxAttempts})).
		Scan(&st, &attempts, &counted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Another delivery inserted the row after our snapshot: read it.
		return s.readFound(ctx, q, e)
	case err != nil:
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	case counted:
		return marked{started: attempts}, nil
	}
	return s.found(ctx, q, e, inboxkit.Status(st), attempts)
}

// markByID is markUpsert where the upsert reports the row it found
// through the last insert id (mysqlMarkUpsert).
func (s *Store) markByID(ctx context.Context, q execer, e Entry) (marked, error) {
	r, err := s.q.markUpsert.exec(ctx, q, e.row(arg{"marker", markerError}, arg{"now", s.t(s.now())}, arg{"max", s.cfg.Retry.MaxAttempts}))
	if err != nil {
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	}
	id, err := r.LastInsertId()
	if err != nil {
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	}
	switch f := foundOf(id); {
	case !f.row:
		return marked{started: 1}, nil
	case f.counted:
		return marked{started: f.attempts}, nil
	case f.known:
		return s.found(ctx, q, e, f.st, f.attempts)
	}
	// A status it does not report, or another key's row: read ours.
	return s.readFound(ctx, q, e)
}

// readFound reads e's row and decides about it as found does; no row:
// look again.
func (s *Store) readFound(ctx context.Context, q execer, e Entry) (marked, error) {
	st, attempts, ok, err := s.status(ctx, q, e)
	if err != nil || !ok {
		return marked{again: err == nil}, err
	}
	return s.found(ctx, q, e, st, attempts)
}

// markBatch commits the attempt markers of the batch's new jobs in one
// transaction, taking the rows in key order (so that two batches never
// wait for each other in a cycle), and sets each one's state as markOne
// does; an event attempted before and not finished becomes solo.
func (s *Store) markBatch(ctx context.Context, all []*job) error {
	jobs := slices.DeleteFunc(slices.Clone(all), func(j *job) bool { return j.state != jobNew })
	if len(jobs) == 0 {
		return nil
	}
	for _, j := range jobs {
		if err := s.applyForgotten(ctx, j.e); err != nil {
			return err
		}
	}
	order := slices.Clone(jobs)
	slices.SortFunc(order, byKey)
	for round := 0; round < 5; round++ {
		again, err := s.markAll(ctx, order)
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("inbox: start attempts of a batch of %d: the rows kept changing", len(jobs))
}

// markAll is one try of markBatch; again means: a row changed between two
// statements, the transaction was rolled back, try again.
func (s *Store) markAll(ctx context.Context, jobs []*job) (again bool, err error) {
	tx, err := s.begin(ctx, "start attempts", s.d.lockingTx)
	if err != nil {
		return false, err
	}
	defer tx.rollback()
	present, err := s.present(ctx, tx, jobs)
	if err != nil {
		return false, err
	}
	var fresh []*job
	for _, j := range jobs {
		j.state, j.started, j.res = jobNew, 0, Result{}
		row, ok := present[j.key()]
		st := row.status
		if !ok {
			fresh = append(fresh, j)
			continue
		}
		if st == inboxkit.StatusTechnicalFailure {
			// Attempted before and not finished: maybe the delivery that
			// killed the process. It runs alone after the batch, so that
			// it charges attempts to no neighbour again.
			j.state = jobSolo
			continue
		}
		m, err := s.mark(ctx, tx, j.e)
		if err != nil {
			return false, err
		}
		if m.again {
			return true, nil
		}
		m.apply(j)
	}
	// No row yet (the common case): the marker is the primary-key INSERT; a
	// row that appeared meanwhile fails it, and the round starts again.
	if err := s.insertMarkers(ctx, tx, fresh); err != nil {
		if s.d.IsDuplicate(err) {
			return true, nil
		}
		return false, fmt.Errorf("inbox: start attempt: %w", err)
	}
	for _, j := range fresh {
		j.state, j.started = jobMarked, 1
	}
	if err := tx.commit(); err != nil {
		return false, fmt.Errorf("inbox: start attempts: commit: %w", err)
	}
	return false, nil
}

// insertMarkers inserts the attempt markers of jobs that have no row: one
// multi-row INSERT where the dialect has it, else one INSERT each.
func (s *Store) insertMarkers(ctx context.Context, q execer, jobs []*job) error {
	now := s.t(s.now())
	if !s.d.multiRowInsert {
		for _, j := range jobs {
			if _, err := s.q.insertStarted.exec(ctx, q, j.e.row(arg{"now", now})); err != nil {
				return err
			}
		}
		return nil
	}
	if len(jobs) == 0 {
		return nil
	}
	st := compileListed(s.d, s.q.insertStartedRows, startedRow, "", len(jobs))
	_, err := q.ExecContext(ctx, st.text, st.bindRows(args{{"now", now}}, rowArgs(jobs))...)
	return err
}

// rowArgs returns the row arguments (Entry.row) of jobs[i], for bindRows.
func rowArgs(jobs []*job) func(i int) args {
	return func(i int) args { return jobs[i].e.row() }
}

// presentRow is the status and attempts of a row present reads.
type presentRow struct {
	status   inboxkit.Status
	attempts int
}

// present reads which of the jobs' keys have a row, and its status and
// attempts, in one statement. It only routes: the INSERT or the
// conditional UPDATE that follows decides, or a terminal row reports a
// duplicate.
func (s *Store) present(ctx context.Context, q execer, jobs []*job) (map[jobKey]presentRow, error) {
	if tx, ok := q.(*txn); ok && s.d.customPlans != "" && !tx.customPlans {
		if _, err := tx.ExecContext(ctx, s.d.customPlans); err != nil {
			return nil, fmt.Errorf("inbox: start attempts: %w", err)
		}
		tx.customPlans = true
	}
	rows, err := s.presentIDs(ctx, q, len(jobs), func(i int) string { return jobs[i].e.EventID })
	if err != nil {
		return nil, fmt.Errorf("inbox: start attempts: %w", err)
	}
	return rows, nil
}

// presentIDs is present of the n event ids id(0) ... id(n-1).
func (s *Store) presentIDs(ctx context.Context, q execer, n int, id func(i int) string) (map[jobKey]presentRow, error) {
	st := compileListed(s.d, s.q.presentPrefix, "@event", ")", n)
	a := args{{}}
	rows, err := q.QueryContext(ctx, st.text, st.bindRows(nil, func(i int) args {
		a[0] = arg{"event", id(i)}
		return a
	})...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	present := make(map[jobKey]presentRow, n)
	for rows.Next() {
		var e Entry
		var status string
		var attempts int
		if err := rows.Scan(&e.EventID, &e.ConsumerName, &status, &attempts); err != nil {
			return nil, err
		}
		present[jobKey{e.EventID, e.ConsumerName}] = presentRow{inboxkit.Status(status), attempts}
	}
	return present, rows.Err()
}

// insertMarker inserts, on the pool, the attempt marker a first delivery
// alone skipped, after its business transaction was rolled back (rowless):
// the row the marked path leaves for poison, to be dead-lettered. A row that appeared meanwhile (another delivery of the
// event) makes the job a duplicate; an error leaves nothing recorded and
// nothing counted (rule 5).
func (s *Store) insertMarker(ctx context.Context, j *job) {
	_, err := s.q.insertStarted.exec(ctx, s.db, j.e.row(arg{"now", s.t(s.now())}))
	switch {
	case err == nil:
	case s.d.IsDuplicate(err):
		res, err := s.duplicateResult(ctx, j.e)
		j.done(res, err)
	default:
		j.done(Result{}, fmt.Errorf("inbox: record technical_failure: %w (handler error: %v)", err, j.herr))
	}
}

// takeBack takes back the marker of a delivery whose handler did not run
// because another process claimed the row after the marker.
func (s *Store) takeBack(ctx context.Context, e Entry) error {
	if _, err := s.q.takeBackAttempt.exec(ctx, s.db, e.key(arg{"marker", markerError})); err != nil {
		return fmt.Errorf("inbox: take back an attempt that did not run: %w", err)
	}
	return nil
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
	if _, err := s.q.forgetAttempt.exec(ctx, s.db, e.key(arg{"attempts", n})); err != nil {
		s.remember(e, n)
	}
}

// remember keeps a marker to take back; n -1 means "the attempt this Store
// marked last", resolved by applyForgotten from the row.
func (s *Store) remember(e Entry, n int) {
	s.forgot.mu.Lock()
	defer s.forgot.mu.Unlock()
	if s.forgot.n == nil {
		s.forgot.n = map[[2]string]int{}
	}
	s.forgot.n[[2]string{e.EventID, e.ConsumerName}] = n
}

// forgotten reports whether the Store remembers an attempt of e's event to
// take back (applyForgotten).
func (s *Store) forgotten(e Entry) bool {
	s.forgot.mu.Lock()
	defer s.forgot.mu.Unlock()
	_, ok := s.forgot.n[[2]string{e.EventID, e.ConsumerName}]
	return ok
}

// applyForgotten takes back a marker ForgetAttempt could not.
func (s *Store) applyForgotten(ctx context.Context, e Entry) error {
	key := [2]string{e.EventID, e.ConsumerName}
	s.forgot.mu.Lock()
	n, ok := s.forgot.n[key]
	s.forgot.mu.Unlock()
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
		if _, err := s.q.forgetAttempt.exec(ctx, s.db, e.key(arg{"attempts", n})); err != nil {
			return fmt.Errorf("inbox: take back an attempt that did not run: %w", err)
		}
	}
	s.forgot.mu.Lock()
	delete(s.forgot.n, key)
	s.forgot.mu.Unlock()
	return nil
}
