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

// HoldGroup makes the next Worker.Receive calls of s that would wait
// behind a running statement wait for one that never runs, every one of
// them where all is true (as if more than groupAfter were being stored),
// and reports each statement of more than one row to ran. Queued tells how
// many wait; Release hands the statement over to the first of them, which
// stores all that wait (up to the group's limits) in one statement, and
// restores groupAfter.
func HoldGroup(s *Store, all bool, ran func(rows int, err error)) (queued func() int, release func()) {
	g := s.group
	g.mu.Lock()
	g.running, g.ran = 1, ran
	if all {
		g.after = 0
	}
	g.mu.Unlock()
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.q)
	}
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.after = groupAfter
		if len(g.q) == 0 {
			g.running--
			return
		}
		next := g.q[0]
		g.q = g.q[1:]
		next.done <- groupAnswer{lead: true}
	}
	return queued, release
}

// GroupAfter is groupAfter.
const GroupAfter = groupAfter
