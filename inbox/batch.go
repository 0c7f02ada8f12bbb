package inbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// BatchItem is one delivery of a batch.
type BatchItem struct {
	Entry   Entry
	Handler Handler
}

// ProcessBatch runs up to len(items) deliveries in one database transaction
// and records what happened to each, as Process does for one: results[i] is
// what Process would have returned for items[i] (the same row writes, the
// same Result), decided by the same decision table.
//
// A batch of first deliveries only (Entry.FirstDelivery; see Process) has
// no markers to commit where the dialect inserts many rows in one
// statement (PostgreSQL, MySQL, SQLite): its business transaction starts
// with one INSERT of every row as PROCESSED, and a handler that does not
// succeed turns its row back into the marker it skipped, behind its
// savepoint, so every outcome is recorded as below.
//
// Otherwise the attempt markers of the whole batch are committed in one transaction
// before the handlers run (rule 5). Then every handler runs in the batch's
// business transaction behind its own savepoint: a business rejection, a
// poison message or a technical failure rolls back only its own writes and
// never makes its neighbours fail. One commit records the batch. Technical
// failures are then recorded in their own transactions (rule 4).
//
// When the commit fails, ProcessBatch returns an error and no results: hand
// the whole batch back to the broker. No attempt counts for the deliveries
// whose handler succeeded or was not run (their markers are taken back);
// failed handlers keep their attempt, as in Process. An item whose outcome
// could not be recorded after the commit (the database went away in
// between) gets OutcomeRetry with Err saying why, and its attempt is taken
// back.
//
// The same event id (and consumer name) twice in one batch is processed
// once: the later items are reported as OutcomeDuplicate with the status and
// attempts of the first. Items without a usable event id get
// OutcomeDeadLetter as from Process. An empty consumer name or a nil handler
// is an error wrapping ErrInvalidEntry before anything is written.
//
// An event attempted before and not finished (its row is TECHNICAL_FAILURE:
// an earlier handler failed, or the process died while a batch holding it
// ran) is not run in the batch: it runs alone, through Process's path, after
// the batch committed. A delivery that kills the process therefore charges
// an attempt to its batch neighbours at most once, and then only to itself,
// instead of sending valid events of every batch it lands in to the
// dead-letter queue.
//
// Handlers run in the order of items, those of the events run alone last.
// Deliveries of one event in this process take turns with Process and other
// batches, as in Process.
func (s *Store) ProcessBatch(ctx context.Context, items []BatchItem) ([]Result, error) {
	results := make([]Result, len(items))
	jobs, dupOf, err := s.batchJobs(items, results)
	if err != nil {
		return nil, err
	}
	defer lockTurns(jobs)()

	err = s.runJobs(ctx, jobs)
	switch {
	case err != nil && classify.ValueReason(err) == "":
		return nil, err
	case err != nil:
		// The database refused a value of one of the deliveries, which
		// fails the batch's statements for all of them: each runs alone,
		// so that only the one at fault is dead-lettered (see Process).
		for _, j := range jobs {
			if results[j.i], err = s.single(ctx, j.e, j.h); err != nil {
				results[j.i] = notRecorded(err)
			}
		}
	default:
		for _, j := range jobs {
			results[j.i] = s.finish(ctx, j)
		}
	}
	for i, first := range dupOf {
		if first >= 0 {
			r := results[first]
			results[i] = Result{Outcome: inboxkit.OutcomeDuplicate, Status: r.Status, Attempts: r.Attempts}
		}
	}
	return results, nil
}

// runJobs marks and runs the jobs: a batch of first deliveries without
// markers where the dialect can (firstBatch), else markers first. An error
// means nothing was recorded and the markers were taken back.
func (s *Store) runJobs(ctx context.Context, jobs []*job) error {
	if s.q.insertFirstRows != "" && len(jobs) > 0 && !slices.ContainsFunc(jobs, func(j *job) bool { return !j.e.FirstDelivery }) {
		first, err := s.firstBatch(ctx, jobs)
		if first || err != nil {
			return err // handed back by firstBatch
		}
	}
	if err := s.markBatch(ctx, jobs); err != nil {
		return err
	}
	if err := s.runBatch(ctx, jobs); err != nil {
		s.handBack(ctx, jobs)
		return err
	}
	return nil
}

// job is one delivery of a batch on its way through ProcessBatch.
type job struct {
	i int // index in items
	e Entry
	h Handler
	// started is the attempt the marker counted, 0 when the handler must
	// not run (res is then the result).
	started int
	res     Result
	// ran: the handler ran; v is the verdict, herr its error (or the
	// error that kept a rejection from being recorded).
	ran  bool
	v    verdict
	herr error
	// again: another delivery claimed the row after our marker; nothing
	// ran (Process's next round).
	again bool
	// solo: the event was attempted before and is not finished (its row
	// is TECHNICAL_FAILURE): it gets no marker in the batch and runs on
	// its own, through Process's path, after the batch committed.
	solo bool
	// first: a first delivery whose row the batch's transaction inserted
	// as PROCESSED (firstBatch); it has no marker and no claim.
	first bool
}

func (j *job) key() string { return j.e.EventID + "\x00" + j.e.ConsumerName }

// batchJobs checks the items and returns the deliveries to run, in order;
// results gets the items settled without the database (no event id), and
// dupOf[i] is the index of the first item of the same event (else -1).
func (s *Store) batchJobs(items []BatchItem, results []Result) ([]*job, []int, error) {
	jobs := make([]*job, 0, len(items))
	dupOf := make([]int, len(items))
	first := make(map[string]int, len(items))
	for i, it := range items {
		dupOf[i] = -1
		e, poison, err := normalize(it.Entry)
		if err != nil {
			return nil, nil, fmt.Errorf("inbox: batch item %d: %w", i, err)
		}
		if it.Handler == nil {
			return nil, nil, fmt.Errorf("%w: batch item %d: handler is nil", ErrInvalidEntry, i)
		}
		if poison != "" {
			results[i] = poisonFound(poison)
			continue
		}
		j := &job{i: i, e: e, h: it.Handler}
		if f, ok := first[j.key()]; ok {
			dupOf[i] = f
			continue
		}
		first[j.key()] = i
		jobs = append(jobs, j)
	}
	return jobs, dupOf, nil
}

// lockTurns takes the turns (see Process) of the jobs' events in sorted
// order and each stripe once (two batches, or a batch and a Process, would
// deadlock otherwise), and returns their unlock.
func lockTurns(jobs []*job) func() {
	stripes := make([]uint32, 0, len(jobs))
	for _, j := range jobs {
		stripes = append(stripes, turn(j.e))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, t := range stripes {
		turns[t].Lock()
	}
	return func() {
		for _, t := range stripes {
			turns[t].Unlock()
		}
	}
}

// markBatch commits the attempt markers of all jobs in one transaction,
// taking the rows in key order (so that two batches never wait for each
// other in a cycle), and sets each job's started or res.
func (s *Store) markBatch(ctx context.Context, jobs []*job) error {
	if len(jobs) == 0 {
		return nil
	}
	for _, j := range jobs {
		if err := s.applyForgotten(ctx, j.e); err != nil {
			return err
		}
	}
	order := slices.Clone(jobs)
	slices.SortFunc(order, func(a, b *job) int { return strings.Compare(a.key(), b.key()) })
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
		j.started, j.res, j.solo = 0, Result{}, false
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
			j.solo = true
			continue
		}
		m, err := s.mark(ctx, tx, j.e)
		if err != nil {
			return false, err
		}
		if m.again {
			return true, nil
		}
		j.started, j.res = m.started, m.res
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
		j.started, j.res = 1, Result{}
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
			if _, err := s.q.insertStarted.exec(ctx, q, j.e.row(args{"now": now})); err != nil {
				return err
			}
		}
		return nil
	}
	if len(jobs) == 0 {
		return nil
	}
	values, a := rowsOf(startedRow, jobs, now)
	_, err := compile(s.d, s.q.insertStartedRows+values).exec(ctx, q, a)
	return err
}

// rowsOf is the VALUES list of row (startedRow, firstRow) for jobs, in
// their order, and its arguments (@now is now).
func rowsOf(row string, jobs []*job, now any) (string, args) {
	values, a := make([]string, len(jobs)), args{"now": now}
	for i, j := range jobs {
		k := strconv.Itoa(i)
		values[i] = rowN(row, k)
		for name, v := range j.e.row(nil) {
			a[name+k] = v
		}
	}
	return strings.Join(values, ", "), a
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
func (s *Store) present(ctx context.Context, q execer, jobs []*job) (map[string]presentRow, error) {
	ids, a := make([]string, len(jobs)), args{}
	for i, j := range jobs {
		ids[i] = "@id" + strconv.Itoa(i)
		a["id"+strconv.Itoa(i)] = j.e.EventID
	}
	if tx, ok := q.(*txn); ok && s.d.customPlans != "" && !tx.customPlans {
		if _, err := tx.ExecContext(ctx, s.d.customPlans); err != nil {
			return nil, fmt.Errorf("inbox: start attempts: %w", err)
		}
		tx.customPlans = true
	}
	st := compile(s.d, s.q.presentPrefix+strings.Join(ids, ", ")+")")
	rows, err := q.QueryContext(ctx, st.text, st.bind(a)...)
	if err != nil {
		return nil, fmt.Errorf("inbox: start attempts: %w", err)
	}
	defer rows.Close()
	present := map[string]presentRow{}
	for rows.Next() {
		var e Entry
		var status string
		var attempts int
		if err := rows.Scan(&e.EventID, &e.ConsumerName, &status, &attempts); err != nil {
			return nil, fmt.Errorf("inbox: start attempts: %w", err)
		}
		present[(&job{e: e}).key()] = presentRow{inboxkit.Status(status), attempts}
	}
	return present, rows.Err()
}

// runBatch runs the handlers of the started jobs in one transaction, each
// behind its own savepoint, and commits. An error means nothing of the
// business transaction was committed.
func (s *Store) runBatch(ctx context.Context, jobs []*job) error {
	if !slices.ContainsFunc(jobs, func(j *job) bool { return j.started > 0 }) {
		return nil // duplicates and dead letters only
	}
	tx, err := s.begin(ctx, "process batch", nil)
	if err != nil {
		return err
	}
	defer tx.rollback()
	return s.runItems(ctx, tx, jobs)
}

// runItems is runBatch in tx.
func (s *Store) runItems(ctx context.Context, tx *txn, jobs []*job) error {
	var last *job // its handler returned nil: on PostgreSQL the transaction may be aborted all the same
	for _, j := range jobs {
		if j.started == 0 {
			continue
		}
		if err := s.runOne(ctx, tx, j, last); err != nil {
			return err
		}
		last = nil
		if j.v.Row == inboxkit.StatusProcessed {
			last = j
		}
	}
	if last != nil && s.q.releaseItem != "" {
		if _, err := tx.ExecContext(ctx, s.q.releaseItem); err != nil {
			if err := s.aborted(ctx, tx, last, err); err != nil {
				return err
			}
		}
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("inbox: process batch: commit: %w", err)
	}
	return nil
}

// aborted makes j, whose handler returned nil, a technical failure of its
// own: a statement after it failed with err because the handler left the
// transaction aborted (a failed statement it did not report; PostgreSQL).
// The transaction is rolled back to j's savepoint, the latest one, so that
// the commit does not fail the whole batch.
func (s *Store) aborted(ctx context.Context, tx *txn, j *job, err error) error {
	if _, rerr := tx.ExecContext(ctx, s.q.rollbackItem); rerr != nil {
		return fmt.Errorf("inbox: roll back a batch item: %w (after: %v)", rerr, err)
	}
	if err := s.unprocess(ctx, tx, j); err != nil {
		return err
	}
	j.failed(s, fmt.Errorf("inbox: the handler returned nil, but its transaction failed: %w", err))
	return nil
}

// unprocess turns the row of a first delivery (inserted as PROCESSED by
// firstBatch) into the attempt marker the marked path would have committed,
// after its handler's writes were rolled back to its savepoint. It does
// nothing for other jobs (and nil, the worker's items).
func (s *Store) unprocess(ctx context.Context, tx *txn, j *job) error {
	if j == nil || !j.first {
		return nil
	}
	if _, err := s.q.unprocess.exec(ctx, tx, j.e.key(nil)); err != nil {
		return fmt.Errorf("inbox: roll back a batch item: %w", err)
	}
	return nil
}

// runOne runs one job in the batch's transaction behind the savepoint
// inbox_item. Whatever the job's verdict, afterwards the transaction holds
// exactly its row writes; an error means the transaction is unusable.
func (s *Store) runOne(ctx context.Context, tx *txn, j, prev *job) error {
	undo, err := s.itemSavepoint(ctx, tx, j)
	if err != nil && prev != nil && s.q.releaseItem != "" {
		// The previous handler returned nil but left the transaction
		// aborted: it is the one that failed.
		if err := s.aborted(ctx, tx, prev, err); err != nil {
			return err
		}
		undo, err = s.itemSavepoint(ctx, tx, j)
	}
	if err != nil {
		return err
	}
	claimed := j.first // its row is PROCESSED already
	if !j.first {
		claimed, err = s.claim(ctx, tx, j.e, s.now())
	}
	if err != nil || !claimed {
		j.again = err == nil
		if uerr := undo(); uerr != nil {
			return uerr
		}
		return err
	}
	j.ran = true
	j.herr = j.h(ctx, tx.Tx)
	j.v = decide(facts{Ran: true, Decision: s.classify(j.herr), Attempts: j.started, MaxAttempts: s.cfg.Retry.MaxAttempts})
	switch j.v.Row {
	case inboxkit.StatusProcessed:
		return nil // an aborted transaction shows at the next statement (runBatch)
	case inboxkit.StatusRejected:
		// The handler's writes and the claim roll back; one UPDATE records
		// the rejection as claim + reject do in Process.
		if err := undo(); err != nil {
			return err
		}
		now := s.now()
		res, err := s.q.rejectFromFail.exec(ctx, tx, j.e.row(args{"reason": j.v.Reason, "error": nullString(s.truncate(j.herr.Error())), "now": s.t(now)}))
		if err == nil {
			if k, _ := res.RowsAffected(); k != 1 {
				err = fmt.Errorf("event %q for %q is no longer TECHNICAL_FAILURE", j.e.EventID, j.e.ConsumerName)
			}
		}
		if err != nil {
			// Not recorded: a technical failure, so the redelivery decides again.
			j.failed(s, fmt.Errorf("inbox: record rejection (%v): %w", j.herr, err))
			return undo()
		}
		return nil
	}
	return undo()
}

// failed makes the job a technical failure caused by err.
func (j *job) failed(s *Store, err error) {
	j.herr = err
	j.v = decide(facts{Ran: true, Decision: asTechnical(s.classify(err)), Attempts: j.started, MaxAttempts: s.cfg.Retry.MaxAttempts})
}

// finish settles a job after the batch committed: a failure is recorded in
// its own transaction (rule 4), a job that lost its row to another delivery
// runs the single-message path.
func (s *Store) finish(ctx context.Context, j *job) Result {
	switch {
	case j.solo:
		res, err := s.process(ctx, j.e, j.h)
		if err != nil {
			return notRecorded(err)
		}
		return res
	case j.started == 0:
		return j.res
	case j.again:
		res, err := s.takeBackThen(ctx, j)
		if err != nil {
			return notRecorded(err)
		}
		return res
	case j.v.Class == inboxkit.ClassPoison:
		// The caller publishes, then marks the row (MarkDeadLettered).
		return j.v.result(inboxkit.StatusTechnicalFailure, j.started, j.herr)
	case j.v.Class != inboxkit.ClassTechnical:
		return j.v.result(j.v.Row, j.started, j.herr) // processed or rejected
	}
	res, err := s.recordFailure(ctx, j.e, j.herr)
	if err != nil {
		s.ForgetAttempt(ctx, j.e, j.started)
		return notRecorded(err)
	}
	return res
}

// takeBackThen takes back the marker of a job whose row another delivery
// claimed, and runs it through Process's path (its turn is held).
func (s *Store) takeBackThen(ctx context.Context, j *job) (Result, error) {
	if err := s.takeBack(ctx, j.e); err != nil {
		return Result{}, err
	}
	return s.process(ctx, j.e, j.h)
}

// notRecorded is the result of a batch item whose outcome the database
// could not record: hand it back.
func notRecorded(err error) Result {
	return Result{Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical, Err: err}
}

// handBack settles the jobs of a batch whose transaction did not commit;
// the caller hands every delivery back. Markers of handlers that did not
// fail technically, or did not run, are taken back (the database kept them
// from being recorded: no attempt, rule 5); a technical failure keeps its
// attempt and is recorded in its own transaction, as in Process.
func (s *Store) handBack(ctx context.Context, jobs []*job) {
	for _, j := range jobs {
		switch {
		case j.started == 0:
		case j.again:
			_ = s.takeBack(ctx, j.e)
		case j.ran && j.v.Class == inboxkit.ClassTechnical:
			if _, err := s.recordFailure(ctx, j.e, j.herr); err != nil {
				s.ForgetAttempt(ctx, j.e, j.started)
			}
		default:
			s.ForgetAttempt(ctx, j.e, j.started)
		}
	}
}

// itemSavepoint sets the savepoint of job j in tx and returns undo, which
// rolls the transaction back to it (undoing the item's writes; on
// PostgreSQL it also ends an aborted state) and leaves j's row the marker
// it was before the claim (unprocess). The savepoint stays, so undo may
// run again.
func (s *Store) itemSavepoint(ctx context.Context, tx *txn, j *job) (undo func() error, err error) {
	if _, err := tx.ExecContext(ctx, s.q.savepointItem); err != nil {
		return nil, fmt.Errorf("inbox: savepoint: %w", err)
	}
	return func() error {
		if _, err := tx.ExecContext(ctx, s.q.rollbackItem); err != nil {
			return fmt.Errorf("inbox: roll back a batch item: %w", err)
		}
		return s.unprocess(ctx, tx, j)
	}, nil
}
