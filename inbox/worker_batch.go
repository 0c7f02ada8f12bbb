package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
)

// claimJob is one claim of a worker's batch on its way through
// processBatch.
type claimJob struct {
	c   Claimed
	ctx context.Context // the handler's (see WorkerConfig.ObserveFunc)
	// v is the verdict, herr the handler's error (or the error that kept
	// its outcome from being recorded); cause is the cause of a dead letter
	// decided before the handler.
	v     verdict
	herr  error
	cause error
	ran   bool
	// inTx: the outcome UPDATE is in the batch's transaction; err: the
	// outcome could not be recorded (the lease was lost).
	inTx bool
	err  error
}

// processBatch runs the handlers of claims in one transaction, each behind
// its own savepoint, and records each outcome as Process does for one
// claim: results[i] and errs[i] are what Process would have returned for
// claims[i], with ctxs[i] as its context. A rejection, a poison message or
// a technical failure rolls back only its own writes. One commit records
// the processed and rejected entries; failures and dead letters are then
// recorded in their own transactions (rule 4). When the commit fails, the
// entries it would have recorded stay IN_PROGRESS and are claimed again
// after their lease, as after a failed Process.
func (w *Worker) processBatch(ctxs []context.Context, claims []Claimed) ([]Result, []error) {
	jobs := make([]*claimJob, len(claims))
	for i, c := range claims {
		j := &claimJob{c: c, ctx: ctxs[i]}
		j.v, j.cause = w.before(c)
		jobs[i] = j
	}
	broken := w.runClaims(jobs)
	results, errs := make([]Result, len(claims)), make([]error, len(claims))
	for i, j := range jobs {
		switch {
		case !j.ran && !j.v.Run: // decided before the handler
			results[i], errs[i] = w.deadLetter(j.ctx, j.c, j.v.Class, j.v.Reason, j.cause)
		case !j.ran:
			errs[i] = broken // not run: IN_PROGRESS until the lease ends
		case j.err != nil:
			errs[i] = j.err
		case j.inTx && broken == nil:
			results[i] = j.v.result(j.v.Row, j.c.Attempts, j.herr)
		case j.inTx:
			errs[i] = broken // not recorded: IN_PROGRESS until the lease ends
		default:
			results[i], errs[i] = w.apart(j.ctx, j.c, j.v, j.herr)
		}
	}
	return results, errs
}

// runClaims runs the jobs in one transaction; the error says why it did not
// commit (nil when it did, or when no job ran).
func (w *Worker) runClaims(jobs []*claimJob) error {
	var tx *txn
	defer func() {
		if tx != nil {
			tx.rollback()
		}
	}()
	for _, j := range jobs {
		if !j.v.Run {
			continue // dead-lettered apart, without running
		}
		if tx == nil {
			var err error
			if tx, err = w.s.begin(j.ctx, "process batch", nil); err != nil {
				return err
			}
		}
		if err := w.runClaim(tx, j); err != nil {
			return err
		}
	}
	if tx == nil {
		return nil
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("inbox: process batch: commit: %w", err)
	}
	return nil
}

// runClaim runs one job in the batch's transaction behind the savepoint
// inbox_item. Afterwards the transaction holds exactly the job's writes; an
// error means the transaction is unusable.
func (w *Worker) runClaim(tx *txn, j *claimJob) error {
	s, ctx := w.s, j.ctx
	undo, err := s.itemSavepoint(ctx, tx, nil)
	if err != nil {
		return err
	}
	j.ran = true
	j.herr = w.cfg.HandleFunc(ctx, tx.Tx, j.c.Message)
	j.v = decide(facts{Ran: true, Decision: s.classify(j.herr), Attempts: j.c.Attempts, MaxAttempts: s.cfg.Retry.MaxAttempts})
	now := s.now()
	l := leaseOf(j.c)
	switch j.v.Row {
	case inboxkit.StatusProcessed:
		// On PostgreSQL this UPDATE also fails when the handler returned
		// nil after a failed statement (the transaction is aborted).
		err = w.record(ctx, tx, l, w.q.processed, args{"now": s.t(now)})
	case inboxkit.StatusRejected:
		if err = undo(); err != nil {
			return err
		}
		err = w.record(ctx, tx, l, w.q.rejected, args{"reason": j.v.Reason, "error": nullString(s.truncate(j.herr.Error())), "now": s.t(now)})
		if publish := w.publishReject(ctx, j.c, j.v, j.herr); err == nil && publish != nil {
			if perr := publish(); perr != nil {
				err = fmt.Errorf("inbox: process: publish rejection: %w", perr)
			}
		}
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			err = fmt.Errorf("inbox: record rejection (%v): %w", j.herr, err)
		}
	default:
		return undo() // recorded apart after the commit
	}
	if err == nil {
		j.inTx = true
		return nil
	}
	if uerr := undo(); uerr != nil {
		return uerr
	}
	if errors.Is(err, ErrLeaseLost) {
		j.err = err
		return nil
	}
	j.herr, j.v = err, w.technical(j.c) // not recorded: a technical failure
	return nil
}
