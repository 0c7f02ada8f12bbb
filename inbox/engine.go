package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// The engine is the one code that marks, runs and records deliveries, in
// both variants. A single delivery is a batch of one: Store.Process and
// Worker.Process run one job, Store.ProcessBatch and a Worker's BatchSize
// many, through the same three steps.
//
//  1. start: a transactional job's attempt is counted by its marker,
//     committed before its handler runs (rule 5; marker.go): alone, one
//     statement; in a batch, one transaction for all. A batch of first
//     deliveries has none (first.go): its business transaction inserts
//     the rows. A worker's claim counted the attempt already. What must
//     not run is decided here (a duplicate, an exhausted row, poison).
//  2. run: one business transaction runs the handlers, each behind a
//     savepoint when there is more than one job (alone there is none: the
//     transaction's rollback is the job's), and records what commits with
//     the handler's writes: PROCESSED, and in a batch REJECTED. A batch
//     whose handlers all declared their effects in the transaction
//     (BatchItem.EffectsInTx, WorkerConfig.EffectsInTx) runs first
//     without savepoints (runPlain): committed when every handler
//     succeeded, else rolled back whole and run again with them.
//  3. settle: what is recorded apart, after the business transaction: a
//     technical failure in a transaction of its own (rule 4), a rejection
//     alone, a dead letter (the letter protocol, letter.go); an event
//     attempted before, or claimed by a competing delivery after our
//     marker, runs again alone.
//
// The decision table (decide.go) says what every job becomes.

// jobState is where a job is on its way through the engine.
type jobState uint8

const (
	jobNew     jobState = iota // not started
	jobMarked                  // its attempt is counted (started), by a marker, a claim or its row (first): it runs
	jobSolo                    // attempted before and not finished: it runs alone after the batch
	jobDecided                 // decided without running its handler (res; a dead letter)
	jobRan                     // its handler ran: v and herr say how
	jobAgain                   // another delivery claimed the row after our marker: nothing ran
	jobBack                    // its outcome could not be published: the attempt is given back (err)
	jobDone                    // settled: res, or err when nothing could be recorded
)

// job is one delivery on its way through the engine: a transactional
// delivery (e, h) or a claimed stored entry (claim).
type job struct {
	i   int             // index in the caller's items
	ctx context.Context // the delivery's: its handler's, its statements' and its publishes'
	e   Entry
	h   Handler
	// claim is the worker's claim of the entry; nil for a transactional
	// delivery.
	claim *Claimed
	state jobState
	// first: a first delivery whose row the business transaction inserted
	// as PROCESSED, without a marker (first.go).
	first bool
	// claimed: the business transaction began with the claim of the
	// marker's row (runAhead).
	claimed bool
	// held: a first delivery's INSERT was held by the driver for the
	// handler's first statement (insertFirst); count is what it met once
	// sent (heldRow).
	held  bool
	count hold.Count
	// fenced: a claim's PROCESSED row (lease.fence) is held by the
	// driver for the transaction's next statement or its COMMIT; count is
	// what it met once sent.
	fenced bool
	// started is the attempt that runs: ATTEMPTS after the marker or the
	// claim (1 for a first delivery).
	started int
	// v is the verdict once decided; herr the handler's error, or what
	// kept its outcome from being recorded, or the cause of a dead letter
	// decided before the handler.
	v    verdict
	herr error
	res  Result
	err  error
	// rounds counts the runs alone of a job that lost its row to a
	// competing delivery (jobAgain).
	rounds int
	// effectsInTx: its handler declared that its effects are all in the
	// transaction (BatchItem.EffectsInTx): it may run without a savepoint.
	effectsInTx bool
	// one holds the job itself: alone's batch of one, without an
	// allocation of its own.
	one [1]*job
}

// alone is the job as a batch of one.
func (j *job) alone() []*job {
	j.one[0] = j
	return j.one[:]
}

// key is the job's row key.
func (j *job) key() jobKey { return jobKey{j.e.EventID, j.e.ConsumerName} }

// jobKey is a row's key: event id and consumer name.
type jobKey struct{ event, consumer string }

// byKey orders jobs by key (event id, then consumer name): the order in
// which a batch takes its rows' locks.
func byKey(a, b *job) int {
	return cmp.Or(strings.Compare(a.e.EventID, b.e.EventID), strings.Compare(a.e.ConsumerName, b.e.ConsumerName))
}

// runs reports whether the job runs its handler in the business
// transaction.
func (j *job) runs() bool { return j.state == jobMarked }

// inTx reports whether the job's outcome is recorded in the business
// transaction: PROCESSED, or REJECTED in a batch.
func (j *job) inTx(alone bool) bool {
	return j.state == jobRan && (j.v.Row == inboxkit.StatusProcessed || (j.v.Row == inboxkit.StatusRejected && !alone))
}

// rowless reports whether the job's event has no row after its business
// transaction: a first delivery alone whose transaction rolled back (in a
// batch its row is turned into a marker instead). What is recorded of it
// is then inserted, as the marked path would have left it at attempt 1.
func (j *job) rowless(alone bool) bool { return j.first && alone }

// message is the job's message, for an envelope.
func (j *job) message() inboxkit.Message {
	if j.claim == nil {
		return j.e.Message
	}
	m := j.claim.Message
	if m.Destination == "" {
		m.Destination = m.Header("destination")
	}
	return m
}

// consumer is the job's consumer name.
func (j *job) consumer() string {
	if j.claim == nil {
		return j.e.ConsumerName
	}
	return j.claim.ConsumerName
}

// decided makes the job decided before its handler: res is its result.
func (j *job) decided(res Result) { j.state, j.res = jobDecided, res }

// done settles the job with res and err.
func (j *job) done(res Result, err error) { j.state, j.res, j.err = jobDone, res, err }

// failed makes the job's outcome a technical failure caused by err (a
// commit that failed, an outcome that could not be recorded).
func (j *job) failed(s *Store, err error) {
	j.herr = err
	j.v = decide(facts{Ran: true, Decision: asTechnical(s.classify(err)), Attempts: j.started, MaxAttempts: s.cfg.Retry.MaxAttempts})
}

// run is the engine for transactional jobs, whose turns the caller holds.
// An error means the batch was handed back: nothing of the business
// transaction was committed and the attempts that did not fail were taken
// back. Otherwise every job is settled.
func (s *Store) run(ctx context.Context, jobs []*job) error {
	alone := len(jobs) == 1
	ran := false
	if s.firstOnly(jobs, alone) {
		var err error
		if ran, err = s.runFirst(ctx, jobs, alone); err != nil {
			return err
		}
	}
	if !ran && alone {
		var err error
		if ran, err = s.runAhead(ctx, jobs[0]); err != nil {
			return err
		}
	}
	if !ran {
		if err := s.start(ctx, jobs, alone); err != nil {
			return err
		}
		if err := s.runMarked(ctx, jobs, alone); err != nil {
			return err
		}
	}
	for _, j := range jobs {
		s.settle(ctx, j, alone)
	}
	return nil
}

// start counts the attempts of the jobs that are not decided: alone by
// the one-statement marker, in a batch in one transaction (markBatch).
func (s *Store) start(ctx context.Context, jobs []*job, alone bool) error {
	if alone {
		if jobs[0].state != jobNew {
			return nil
		}
		return s.markOne(ctx, jobs[0])
	}
	return s.markBatch(ctx, jobs)
}

// runMarked runs the marked jobs in one business transaction.
func (s *Store) runMarked(ctx context.Context, jobs []*job, alone bool) error {
	if !slices.ContainsFunc(jobs, (*job).runs) {
		return nil // duplicates and dead letters only
	}
	err := s.runJobsTx(ctx, jobs, alone)
	if err != nil {
		s.handBack(ctx, jobs)
	}
	return err
}

// runJobsTx runs the jobs that may run in a business transaction begun
// here, and commits (runTx): first without savepoints where the batch may
// (plainBatch), and when that did not succeed throughout, once more with
// them.
func (s *Store) runJobsTx(ctx context.Context, jobs []*job, alone bool) error {
	plain := plainBatch(jobs, alone)
	for {
		err := func() error {
			tx, err := s.begin(ctx, txName(alone), nil)
			if err != nil {
				return err
			}
			defer tx.rollback()
			return s.runTx(ctx, tx, jobs, alone, plain)
		}()
		if !plain || !errors.Is(err, errPlainFailed) {
			return err
		}
		plain = false
	}
}

// plainBatch reports whether a batch runs without savepoints first: more
// than one job, and the handler of every job that runs declared that its
// effects are all in the transaction. Never guessed: a job that did not
// declare it keeps the batch on savepoints.
func plainBatch(jobs []*job, alone bool) bool {
	if alone {
		return false
	}
	n := 0
	for _, j := range jobs {
		if !j.runs() {
			continue
		}
		if !j.effectsInTx {
			return false
		}
		n++
	}
	return n > 0
}

// errPlainFailed is runPlain's: a job of the batch did not succeed, nothing
// was committed, and the jobs are as they were before; run them again with
// savepoints.
var errPlainFailed = errors.New("inbox: a batch without savepoints did not succeed throughout")

// runPlain runs the jobs that may run in tx without a savepoint each
// (plainBatch), and commits when every handler succeeded. When one did
// not (an error of any class, a claim lost to a competing delivery, a
// statement that failed, a transaction a handler left aborted), it returns
// errPlainFailed before anything is committed: the caller rolls tx back,
// which takes back every handler's writes, and runs the batch again with
// savepoints, where each outcome is decided and recorded as one by one.
// By their declaration the handlers had no effect outside the transaction,
// so the batch ends as if this run had not been. A commit that fails is
// the batch's error, as with savepoints.
func (s *Store) runPlain(ctx context.Context, tx *txn, jobs []*job) error {
	ran := make([]*job, 0, len(jobs))
	ok := true
	for _, j := range jobs {
		if !j.runs() {
			continue
		}
		ran = append(ran, j)
		if ok = s.runPlainOne(ctx, tx, j); !ok {
			break
		}
	}
	if last := ran[len(ran)-1]; ok && (last.claim == nil || last.fenced) && s.q.checkTx.text != "" {
		// The last handler returned nil, but may have left the
		// transaction aborted (see aborted), or its statements, or a
		// claim's PROCESSED row, may be held (pipelined): its commit
		// would roll back. The check sends them.
		_, err := s.q.checkTx.exec(ctx, tx, last.e.key())
		ok = err == nil
	}
	if !ok {
		for _, j := range ran {
			j.state, j.v, j.herr, j.res, j.err = jobMarked, verdict{}, nil, Result{}, nil
		}
		return errPlainFailed
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("inbox: process batch: commit: %w", err)
	}
	return nil
}

// runPlainOne runs job j in tx without a savepoint: the claim of its
// marker's row, its handler, a claim's PROCESSED row. It reports whether
// all of it succeeded, as far as the statements answered so far say.
func (s *Store) runPlainOne(ctx context.Context, tx *txn, j *job) bool {
	if j.claim == nil && !j.first {
		if claimed, err := s.claim(ctx, tx, j.e); err != nil || !claimed {
			return false
		}
	}
	j.herr = j.h(pipelined(j), tx.Tx)
	j.state = jobRan
	j.v = decide(facts{Ran: true, Decision: s.classify(j.herr), Attempts: j.started, MaxAttempts: s.cfg.Retry.MaxAttempts})
	switch {
	case j.v.Row != inboxkit.StatusProcessed:
		return false
	case j.claim != nil:
		// Where it is held (fenced), a lost lease fails the batch's next
		// statement that needs an answer (runPlain's check at the latest),
		// and the batch runs again with savepoints.
		return s.recordRow(ctx, tx, j, args{{"now", s.t(s.now())}}) == nil
	}
	return true
}

// pipelined is j's context for its handler in a batch without savepoints:
// marked hold.Pipelined, so that a driver that holds statements
// (driver/postgres's DriverName) may send the handler's writes with the
// batch's next statement that needs an answer instead of one by one. What
// it changes, that an error of a statement comes from a later one, is
// seen only by a run that then fails and is run again with savepoints,
// where the handler's context is not marked.
func pipelined(j *job) context.Context {
	id := j.e.EventID
	if j.claim != nil {
		id = j.claim.Message.ID
	}
	return hold.Pipelined(j.ctx, "inbox: a statement of the handler of event "+strconv.Quote(id))
}

// txName names the business transaction in errors.
func txName(alone bool) string {
	if alone {
		return "process"
	}
	return "process batch"
}

// runTx runs the jobs that may run in tx, and commits. Alone, a commit
// that fails is a technical failure of the job (a transactional one) or
// its outcome not recorded (a worker's); in a batch it is the error.
// plain: without savepoints (runPlain, which may return errPlainFailed).
func (s *Store) runTx(ctx context.Context, tx *txn, jobs []*job, alone, plain bool) error {
	if alone {
		j := jobs[0]
		if err := s.runOne(ctx, tx, j, nil, true); err != nil || tx.ended {
			return err
		}
		if err := tx.commit(); err != nil {
			if j.fenced && (!j.count.Sent || j.count.Err != nil) {
				// The COMMIT carried the held PROCESSED UPDATE, which did
				// not run (a statement held before it failed) or failed (the
				// lease is lost): nothing committed, and the outcome is
				// recorded apart, as when recordInTx's UPDATE fails.
				if j.count.Err != nil {
					err = j.count.Err
				}
				j.failed(s, fmt.Errorf("inbox: process: record outcome: %w", err))
				return nil
			}
			if j.claim != nil {
				j.done(Result{}, fmt.Errorf("inbox: process: commit: %w", err))
				return nil
			}
			// The commit itself failed (serialization failure, lost
			// connection): a technical failure of this attempt, or a commit
			// whose answer was lost (the failure record then finds the row).
			j.failed(s, fmt.Errorf("inbox: commit: %w", err))
		}
		return nil
	}
	if plain {
		return s.runPlain(ctx, tx, jobs)
	}
	var last *job // its handler returned nil (or its PROCESSED row is held): on PostgreSQL the transaction may be aborted all the same
	for _, j := range jobs {
		if !j.runs() {
			continue
		}
		if err := s.runOne(ctx, tx, j, last, false); err != nil {
			return err
		}
		last = nil
		if j.state == jobRan && j.v.Row == inboxkit.StatusProcessed && (j.claim == nil || j.fenced) {
			last = j
		}
	}
	if last != nil && s.q.releaseItem != "" {
		if _, err := tx.ExecContext(hold.Single(ctx), s.q.releaseItem); err != nil {
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

// runOne runs job j in tx: the claim of its marker's row, its handler,
// and what its verdict records in tx. Afterwards the transaction holds
// exactly the job's writes (alone: it was rolled back unless the handler
// succeeded); an error means the transaction is unusable. prev is the
// job before it whose handler returned nil (see aborted).
func (s *Store) runOne(ctx context.Context, tx *txn, j, prev *job, alone bool) error {
	undo, err := s.undoPoint(ctx, tx, j, prev, alone)
	if err != nil {
		return err
	}
	if j.claim == nil && !j.first && !j.claimed {
		// The marker left the row TECHNICAL_FAILURE: claim it as PROCESSED.
		claimed, err := s.claim(ctx, tx, j.e)
		if err != nil {
			return err
		}
		if !claimed {
			j.state = jobAgain
			if alone {
				tx.rollback()
				return nil
			}
			return undo.do()
		}
	}
	j.herr = j.h(j.ctx, tx.Tx)
	j.state = jobRan
	j.v = decide(facts{Ran: true, Decision: s.classify(j.herr), Attempts: j.started, MaxAttempts: s.cfg.Retry.MaxAttempts})
	if j.held {
		if err := s.heldRow(ctx, tx, j); err != nil {
			return err
		}
	}
	switch {
	case j.v.Row == inboxkit.StatusProcessed && j.claim != nil:
		// On PostgreSQL this UPDATE also fails when the handler returned
		// nil after a failed statement (the transaction is aborted). It
		// may be held (fenced): alone for the COMMIT (runTx), in a batch
		// for the next SAVEPOINT or the RELEASE (undoPoint, aborted).
		return s.recordInTx(ctx, tx, j, undo, args{{"now", s.t(s.now())}})
	case j.v.Row == inboxkit.StatusProcessed:
		return nil // an aborted transaction shows at the next statement
	case j.v.Row == inboxkit.StatusRejected && !alone:
		if err := undo.do(); err != nil {
			return err
		}
		return s.recordInTx(ctx, tx, j, undo, s.rejectArgs(j))
	}
	return undo.do() // recorded apart, after the business transaction
}

// undoPoint sets the point undo takes the transaction back to, before
// job j: in a batch its savepoint (set now; it stays, so undo may run
// again); alone the start of the transaction.
func (s *Store) undoPoint(ctx context.Context, tx *txn, j, prev *job, alone bool) (undo, error) {
	u := undo{s: s, ctx: ctx, tx: tx, j: j, alone: alone}
	if alone {
		return u, nil
	}
	_, err := tx.ExecContext(hold.Single(ctx), s.q.savepointItem)
	if err != nil && prev != nil && s.q.releaseItem != "" {
		// The previous handler returned nil but left the transaction
		// aborted, or the previous claim's held PROCESSED row failed: it
		// is the one that failed.
		if err := s.aborted(ctx, tx, prev, err); err != nil {
			return undo{}, err
		}
		_, err = tx.ExecContext(ctx, s.q.savepointItem)
	}
	if err != nil {
		return undo{}, fmt.Errorf("inbox: savepoint: %w", err)
	}
	return u, nil
}

// undo takes the transaction back to before its job (undoPoint): in a
// batch to the job's savepoint, a first delivery's row turned into the
// marker it skipped; alone the whole transaction is rolled back (a first
// delivery then has no row: rowless). A value, not a closure: the engine
// makes one per job.
type undo struct {
	s     *Store
	ctx   context.Context
	tx    *txn
	j     *job
	alone bool
}

func (u undo) do() error {
	if u.alone {
		u.tx.rollback()
		return nil
	}
	if _, err := u.tx.ExecContext(u.ctx, u.s.q.rollbackItem); err != nil {
		return fmt.Errorf("inbox: roll back a batch item: %w", err)
	}
	return u.s.unprocess(u.ctx, u.tx, u.j)
}

// aborted makes j, whose handler returned nil, a technical failure of its
// own: a statement after it failed with err because the handler left the
// transaction aborted (a failed statement it did not report; PostgreSQL)
// or, for a claim whose PROCESSED row was held (fenced), because that
// UPDATE failed: an aborted transaction, or a lost lease, which the
// outcome's record apart then tells (retryLater). The transaction is
// rolled back to j's savepoint, the latest one, so that the commit does
// not fail the whole batch.
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

// recordInTx records j's outcome in the business transaction: a worker's
// PROCESSED or REJECTED row on its lease, a transactional REJECTED row on
// its marker (set are the statement's arguments), and publishes a
// rejection. When that fails, undo takes the job's writes back and the job
// becomes: a lost lease, an outcome to give back (the publish failed, a
// transactional job), or a technical failure recorded apart.
func (s *Store) recordInTx(ctx context.Context, tx *txn, j *job, undo undo, set args) error {
	err := s.recordRow(ctx, tx, j, set)
	if err == nil && j.v.Row == inboxkit.StatusRejected && s.publishes(rejection) {
		j.res = j.v.result(inboxkit.StatusRejected, j.started, j.herr)
		if err = s.send(rejection, j, Record{}); err != nil && j.claim == nil {
			if uerr := undo.do(); uerr != nil {
				return uerr
			}
			j.state, j.err = jobBack, err
			return nil
		}
	}
	if err == nil {
		return nil
	}
	if uerr := undo.do(); uerr != nil {
		return uerr
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		j.done(Result{}, err)
	case j.v.Row == inboxkit.StatusRejected:
		j.failed(s, fmt.Errorf("inbox: record rejection (%v): %w", j.herr, err))
	default:
		j.failed(s, err)
	}
	return nil
}

// recordRow runs the UPDATE that records j's verdict (PROCESSED or
// REJECTED) through q: for a claim matched on its lease (ErrLeaseLost when
// it is no longer held; set are the arguments besides the lease's), its
// PROCESSED row by lease.fence where the dialect has it (j.fenced when the
// driver held it); for a transactional job on its marker's
// TECHNICAL_FAILURE row.
func (s *Store) recordRow(ctx context.Context, q execer, j *job, set args) error {
	if j.claim != nil {
		l := j.claim.lease()
		j.fenced = false
		switch {
		case j.v.Row == inboxkit.StatusRejected:
			return l.record(ctx, s, q, s.qq.rejected, set)
		case s.qq.processedFenced.text != "":
			var err error
			j.fenced, err = l.fence(ctx, s, q, &j.count, set)
			return err
		}
		return l.record(ctx, s, q, s.qq.processed, set)
	}
	res, err := s.verdict(ctx, q, s.q.rejectFromFail, set)
	if err != nil {
		return err
	}
	if k, _ := res.RowsAffected(); k != 1 {
		return fmt.Errorf("event %q for %q is no longer TECHNICAL_FAILURE", j.e.EventID, j.e.ConsumerName)
	}
	return nil
}

// rejectArgs are the arguments of j's rejection UPDATE.
func (s *Store) rejectArgs(j *job) args {
	set := args{{"reason", j.v.Reason}, {"error", nullString(s.truncate(j.herr.Error()))}, {"now", s.t(s.now())}}
	if j.claim != nil {
		return j.claim.lease().args(set)
	}
	return j.e.row(set...)
}

// settle records what the job's state and verdict leave to record after
// the business transaction, and sets its result.
func (s *Store) settle(ctx context.Context, j *job, alone bool) {
	if j.claim != nil {
		s.settleClaim(ctx, j, alone)
		return
	}
	switch j.state {
	case jobSolo:
		s.again(ctx, j)
	case jobAgain:
		// Our handler did not run: our marker is taken back whatever the
		// status, and the delivery runs again.
		if err := s.takeBack(ctx, j.e); err != nil {
			j.done(Result{}, err)
			return
		}
		s.again(ctx, j)
	case jobDecided:
		s.letter(ctx, j, deadLetter)
	case jobBack:
		s.ForgetAttempt(ctx, j.e, j.started)
	case jobRan:
		s.settleRan(ctx, j, alone)
	}
}

// settleRan settles a transactional job whose handler ran.
func (s *Store) settleRan(ctx context.Context, j *job, alone bool) {
	switch {
	case j.inTx(alone):
		j.done(j.v.result(j.v.Row, j.started, j.herr), nil)
	case j.v.Row == inboxkit.StatusRejected:
		s.reject(ctx, j, alone)
	case j.v.Class == inboxkit.ClassPoison:
		j.res = j.v.result(inboxkit.StatusTechnicalFailure, j.started, j.herr)
		if j.rowless(alone) {
			s.insertMarker(ctx, j) // the row a marker would have left, to dead-letter
			if j.state == jobDone {
				return
			}
		}
		s.letter(ctx, j, deadLetter)
	default:
		res, err := s.recordFailure(ctx, j.e, j.herr)
		if err != nil {
			s.ForgetAttempt(ctx, j.e, j.started)
			j.done(Result{}, err)
			return
		}
		j.res = res
		if res.Outcome == inboxkit.OutcomeDeadLetter {
			s.letter(ctx, j, deadLetter)
			return
		}
		j.state = jobDone
	}
}

// again runs a job alone once more: an event attempted before, or one
// whose row another delivery claimed after our marker. A few rounds at
// most: a delivery in another process can finish the event between our
// marker and our claim.
func (s *Store) again(ctx context.Context, j *job) {
	if j.rounds++; j.rounds > 5 {
		j.done(Result{}, fmt.Errorf("inbox: event %q for %q changed under us five times in a row; giving up this delivery", j.e.EventID, j.e.ConsumerName))
		return
	}
	j.state, j.first, j.claimed, j.started, j.v, j.herr = jobNew, false, false, 0, verdict{}, nil
	j.e.FirstDelivery = false // it ran, or its event has a row: the marked path
	if err := s.run(ctx, j.alone()); err != nil {
		j.done(Result{}, err)
	}
}

// handBack settles the jobs of a batch whose transaction did not commit;
// the caller hands every delivery back. Markers of handlers that did not
// fail technically, or did not run, are taken back (the database kept them
// from being recorded: no attempt, rule 5); a technical failure keeps its
// attempt and is recorded in its own transaction, as alone.
func (s *Store) handBack(ctx context.Context, jobs []*job) {
	for _, j := range jobs {
		switch {
		case j.started == 0, j.claim != nil:
		case j.state == jobAgain:
			_ = s.takeBack(ctx, j.e)
		case j.state == jobRan && j.v.Class == inboxkit.ClassTechnical:
			if _, err := s.recordFailure(ctx, j.e, j.herr); err != nil {
				s.ForgetAttempt(ctx, j.e, j.started)
			}
		default:
			s.ForgetAttempt(ctx, j.e, j.started)
		}
	}
}

// ErrNotRecorded is wrapped by the Err of a batch item's Result whose
// outcome could not be recorded after the batch's transaction (the
// database went away in between, a dead letter or rejection could not be
// published): hand the delivery back, as for an error of Process. Its
// attempt was taken back.
var ErrNotRecorded = errors.New("inbox: outcome not recorded")

// result is a transactional job's Result as ProcessBatch reports it.
func (j *job) result() Result {
	if j.err == nil {
		return j.res
	}
	return Result{Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical, Err: fmt.Errorf("%w: %w", ErrNotRecorded, j.err)}
}

// runClaims is the engine for a worker's claims: what the claim decides
// before the handler (a dead letter), the business transaction, what is
// recorded apart. Every job is settled; one whose outcome the business
// transaction would have recorded gets its error when it did not commit
// (the entry stays IN_PROGRESS and is claimed again after its lease).
func (s *Store) runClaims(jobs []*job) {
	alone := len(jobs) == 1
	for _, j := range jobs {
		v, cause := s.before(j.claim)
		if !v.Run {
			j.state, j.v, j.herr = jobDecided, v, cause
			continue
		}
		j.state, j.started = jobMarked, j.claim.Attempts
	}
	if i := slices.IndexFunc(jobs, (*job).runs); i >= 0 {
		if err := s.runJobsTx(jobs[i].ctx, jobs, alone); err != nil {
			for _, j := range jobs {
				if j.runs() || j.inTx(alone) {
					j.done(Result{}, err)
				}
			}
		}
	}
	for _, j := range jobs {
		s.settleClaim(j.ctx, j, alone)
	}
}

// settleClaim records what a claim's state and verdict leave to record
// after the business transaction, and sets its result.
func (s *Store) settleClaim(ctx context.Context, j *job, alone bool) {
	switch {
	case j.state == jobDone:
	case j.state == jobDecided, j.v.Row == inboxkit.StatusDeadLettered:
		s.letterClaim(ctx, j, deadLetter)
	case j.inTx(alone):
		j.done(j.v.result(j.v.Row, j.started, j.herr), nil)
	case j.v.Row == inboxkit.StatusRejected:
		s.letterClaim(ctx, j, rejection)
	default:
		j.done(s.retryLater(ctx, j.claim, j.v.Class, j.v.Reason, j.v.RetryAfter, j.v.Uncount, j.herr))
	}
}
