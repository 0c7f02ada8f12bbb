package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

func TestStuckFailuresAndPayloadHashReuse(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		ctx := context.Background()
		// Two event ids with the same payload (a resend with a new id).
		a, b := entry("resend-a"), entry("resend-b")
		a.PayloadHash, b.PayloadHash = "same-hash", "same-hash"
		wantOutcome(t, mustProcess(t, s, a, insertBusiness(db, "resend-a", "")), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, mustProcess(t, s, b, insertBusiness(db, "resend-b", "")), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, mustProcess(t, s, entry("single"), insertBusiness(db, "single", "")), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)

		// A message that fails up to the threshold and is never marked
		// dead-lettered (the DLQ publish failed, the consumer died).
		fail := func(context.Context, *sql.Tx) error { return errors.New("letter service down") }
		mustProcess(t, s, entry("stuck"), fail)
		res := mustProcess(t, s, redelivered("stuck"), fail)
		if res.Outcome != inboxkit.OutcomeDeadLetter {
			t.Fatalf("second failure: %+v, want DEAD_LETTER", res)
		}
		mustProcess(t, s, entry("retrying"), fail) // one attempt: not stuck

		stuck, err := s.StuckFailures(ctx, 0)
		dbtest.Must(t, err, "stuck failures")
		if len(stuck) != 1 || stuck[0].EventID != "stuck" || stuck[0].Attempts != 2 || stuck[0].LastError == "" {
			t.Fatalf("StuckFailures = %+v, want the row of event stuck with 2 attempts", stuck)
		}

		reuse, err := s.PayloadHashReuse(ctx)
		dbtest.Must(t, err, "payload hash reuse")
		if len(reuse) != 1 || reuse[0].PayloadHash != "same-hash" || reuse[0].ConsumerName != consumerName ||
			!slices.Equal(reuse[0].EventIDs, []string{"resend-a", "resend-b"}) {
			t.Fatalf("PayloadHashReuse = %+v", reuse)
		}
	})
}
