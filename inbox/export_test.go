package inbox

import (
	"context"
	"time"
)

// SetPurgeWait replaces the timer Purge waits on between batches, so that a
// test sees the pauses without waiting them out.
func SetPurgeWait(s *Store, wait func(ctx context.Context, d time.Duration) error) {
	s.purgeWait = wait
}

// PurgePause is purgePause, the pause after a batch.
var PurgePause = purgePause

// WithoutAggregateMemory is s without its dialect's aggregateMemory, for
// the benchmark that compares FailureGroups with and without it.
func WithoutAggregateMemory(s *Store) *Store {
	c := *s
	c.d.aggregateMemory = ""
	return &c
}

// Ahead reports whether s sends a delivery's attempt marker and claim in
// one round trip (runAhead): false once its driver's connection was found
// not to be hold.Ahead.
func Ahead(s *Store) bool { return !s.noAhead.Load() }

// ReadsMet reports whether a first delivery alone reads the row its
// INSERT skipped in its transaction.
func ReadsMet(s *Store) bool { return s.readsMet() }

// HoldGroup makes the next Worker.Receive calls of s wait for a
// statement that never runs (as they wait behind a running one), and
// reports each statement of more than one row to ran. Queued tells how
// many wait; Release hands the statement over to the first of them, which
// stores all that wait (up to the group's limits) in one statement.
func HoldGroup(s *Store, ran func(rows int, err error)) (queued func() int, release func()) {
	g := s.group
	g.mu.Lock()
	g.busy, g.ran = true, ran
	g.mu.Unlock()
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.q)
	}
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.q) == 0 {
			g.busy = false
			return
		}
		next := g.q[0]
		g.q = g.q[1:]
		next.done <- groupAnswer{lead: true}
	}
	return queued, release
}
