package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// ahead is what markAhead did for a job alone.
type ahead struct {
	// can: the connection is hold.Ahead; nothing else is set otherwise.
	can bool
	// found, st, attempts, counted: the marker's row (pgMarkUpsert's
	// RETURNING); found false when it returned none.
	found    bool
	st       string
	attempts int
	counted  bool
	// ran: the marker counted, the claim took the row, and the business
	// transaction ran (runTx); runErr is runTx's error.
	ran    bool
	runErr error
}

// runAhead is start and runMarked for a job alone, where the driver's
// connection is hold.Ahead (driver/postgres's DriverName): the one-statement
// marker committed in a transaction of its own, then BEGIN and the claim of
// the row it left, in one round trip, and the handler in the claim's
// transaction. What it decides is what markOne and runOne decide, from the
// same two statements: a marker that did not count (a duplicate, an
// exhausted row) has its claim's transaction rolled back and is decided by
// found; a claim that took no row (a competing delivery finished it) makes
// the job jobAgain. It reports false, having changed nothing, where the
// connection is not hold.Ahead, where the dialect has no one-statement
// marker, for a first delivery (here its INSERT found the row: most likely
// a duplicate, which the marker alone answers in one round trip, where
// the claim sent with it would cost a second), and where the marker
// returned no row (markOne's rounds then decide).
func (s *Store) runAhead(ctx context.Context, j *job) (bool, error) {
	if j.state != jobNew || j.e.FirstDelivery || s.q.markUpsert.text == "" || s.d.foundByID || s.noAhead.Load() {
		return false, nil
	}
	if err := s.applyForgotten(ctx, j.e); err != nil {
		return true, err
	}
	// The connection is back in the pool before anything below uses the
	// pool: a pool of one connection must not wait for itself.
	a, err := s.markAhead(ctx, j)
	var then *hold.ThenError
	switch {
	case !a.can:
		s.noAhead.Store(true)
		return false, nil
	case a.ran:
		if a.runErr != nil {
			s.handBack(ctx, j.alone())
		}
		return true, a.runErr
	case errors.As(err, &then) && a.found && a.counted:
		// Our marker counted an attempt whose handler never ran: taken
		// back (rule 5), as runMarked does when its claim fails.
		j.state, j.started = jobMarked, a.attempts
		s.handBack(ctx, j.alone())
		return true, fmt.Errorf("inbox: claim event: %w", then.Err)
	case then != nil:
		return false, nil // the marker counted nothing: decide one by one
	case err != nil:
		return true, err
	case !a.found:
		return false, nil // inserted by another delivery after the marker's snapshot
	case !a.counted:
		m, err := s.found(ctx, s.db, j.e, inboxkit.Status(a.st), a.attempts)
		if err != nil {
			return true, err
		}
		if m.again {
			return false, nil
		}
		m.apply(j)
		return true, nil
	}
	// Counted, and the claim took no row: a competing delivery finished the
	// event after our marker.
	j.state, j.started = jobAgain, a.attempts
	return true, nil
}

// markAhead sends the marker and the claim through one connection of the
// pool (hold.Ahead), and where the marker counted and the claim took the
// row, runs the business transaction the claim began (runTx).
func (s *Store) markAhead(ctx context.Context, j *job) (a ahead, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return ahead{can: true}, fmt.Errorf("inbox: start attempt: %w", err)
	}
	defer conn.Close()
	now := s.t(s.now())
	mark := hold.Stmt{Query: s.q.markUpsert.text, Args: s.q.markUpsert.bind(j.e.row(arg{"marker", markerError}, arg{"now", now}, arg{"max", s.cfg.Retry.MaxAttempts}))}
	claim := hold.Stmt{Query: s.q.processFromFail.text, Args: s.q.processFromFail.bind(j.e.row(arg{"now", now}))}
	var claimed int64
	err = conn.Raw(func(dc any) error {
		h, ok := dc.(hold.Ahead)
		if !ok {
			return nil
		}
		a.can = true
		var err error
		a.found, claimed, err = h.BeginAfter(ctx, mark, []any{&a.st, &a.attempts, &a.counted}, claim)
		return err
	})
	var then *hold.ThenError
	switch {
	case errors.As(err, &then):
		return a, err
	case err != nil:
		// The connection failed (Raw may not have reached the driver):
		// a.can set or not, this says nothing of the driver.
		return ahead{can: true}, fmt.Errorf("inbox: start attempt: %w", err)
	case !a.can:
		return a, nil
	}
	// The claim's transaction is open on conn: BeginTx returns it.
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		// conn goes back to the pool with the transaction open, and the
		// pool closes it; runAhead takes a counted attempt back.
		if a.counted {
			j.state, j.started = jobMarked, a.attempts
		}
		a.ran, a.runErr = true, fmt.Errorf("inbox: process: begin: %w", err)
		return a, nil
	}
	t := &txn{Tx: tx}
	defer t.rollback()
	if !a.found || !a.counted || claimed != 1 {
		return a, nil
	}
	j.state, j.started, j.claimed = jobMarked, a.attempts, true
	a.ran = true
	a.runErr = s.runTx(ctx, t, j.alone(), true, false)
	return a, nil
}
