package inbox_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Deliveries of one poison event that ask for its dead letter at the same
// moment publish it once (issue 23, item 13): the one whose write holds
// the row publishes and commits, the others find it DEAD_LETTERED.
func TestPublishDeadLetterOnce(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		for _, id := range []string{"MARKED", "NO-ROW"} {
			if id == "MARKED" {
				res, err := s.Process(ctx, entry(id), func(context.Context, *sql.Tx) error { return poison("MALFORMED_PAYLOAD") })
				dbtest.Must(t, err, "process")
				wantOutcome(t, res, inboxkit.OutcomeDeadLetter, inboxkit.StatusTechnicalFailure)
			}
			var published, dup atomic.Int32
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dl := inbox.DeadLetter{Entry: entry(id), Class: inboxkit.ClassPoison, Reason: "MALFORMED_PAYLOAD"}
					st, ok, err := s.PublishDeadLetter(ctx, dl, func(context.Context, inbox.DeadLetter, inbox.Record) error {
						published.Add(1)
						return nil
					})
					if err != nil {
						t.Errorf("%s: %v", id, err)
					}
					if !ok && st == inboxkit.StatusDeadLettered {
						dup.Add(1)
					}
				}()
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
