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
