package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Deliveries of one poison event that ask for its dead letter at the same
// moment publish it once (issue 23, item 13): the one whose write holds
// the row publishes and commits, the others find it DEAD_LETTERED. The
// letter protocol here is Store.DeadLetter's, the one of every dead letter
// of a store with ports; it takes no turns, as deliveries in two processes
// take none.
func TestDeadLetterOnce(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		var published atomic.Int32
		s, err := s.WithPorts(inbox.Ports{DeadLetterQueue: "DLQ.test", DeadLetters: publishFunc(func(map[string]string, []byte) error {
			published.Add(1)
			return nil
		})})
		dbtest.Must(t, err, "ports")
		for _, id := range []string{"MARKED", "NO-ROW"} {
			published.Store(0)
			if id == "MARKED" {
				res, err := s.Process(ctx, entry(id), func(context.Context, *sql.Tx) error { return errors.New("letter service timeout") })
				dbtest.Must(t, err, "process")
				wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
			}
			var dup atomic.Int32
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					res, err := s.DeadLetter(ctx, inbox.DeadLetter{Entry: entry(id), Class: inboxkit.ClassPoison, Reason: "MALFORMED_PAYLOAD"})
					if err != nil {
						t.Errorf("%s: %v", id, err)
					}
					if res.Outcome == inboxkit.OutcomeDuplicate && res.Status == inboxkit.StatusDeadLettered {
						dup.Add(1)
					}
				})
			}
			wg.Wait()
			if published.Load() != 1 || dup.Load() != 3 {
				t.Errorf("%s: published %d times, %d found it dead-lettered; want 1 and 3", id, published.Load(), dup.Load())
			}
			if r := get(t, s, id); r.Status != inboxkit.StatusDeadLettered || r.ReasonCode != "MALFORMED_PAYLOAD" {
				t.Errorf("%s: row %s %s", id, r.Status, r.ReasonCode)
			}
		}
	})
}
