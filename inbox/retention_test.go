package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// bulkInsert writes n rows of the given status with a literal terminal time,
// 500 rows per statement, in one transaction.
func bulkInsert(t *testing.T, db *dbtest.DB, prefix string, n int, status inboxkit.Status, at string) {
	t.Helper()
	tx, err := db.Begin()
	dbtest.Must(t, err, "begin")
	defer tx.Rollback()
	for start := 0; start < n; start += 500 {
		var b strings.Builder
		b.WriteString("INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT, ATTEMPTS) VALUES ")
		for i := start; i < min(start+500, n); i++ {
			if i > start {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "('%s-%d', '%s', '%s', '%s', '%s', 1)", prefix, i, consumerName, status, at, at)
		}
		_, err := tx.Exec(b.String())
		dbtest.Must(t, err, "bulk insert")
	}
	dbtest.Must(t, tx.Commit(), "commit")
}

func TestRetention(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{}) // horizon: 7 days; clock: 2026-03-01 09:00
		ctx := context.Background()
		const old = "2026-01-01 00:00:00.000000"
		bulkInsert(t, db, "P", 60000, inboxkit.StatusProcessed, old)
		bulkInsert(t, db, "R", 25000, inboxkit.StatusRejected, old)
		bulkInsert(t, db, "D", 15000, inboxkit.StatusDeadLettered, old)
		bulkInsert(t, db, "F", 300, inboxkit.StatusTechnicalFailure, old)
		bulkInsert(t, db, "N", 200, inboxkit.StatusProcessed, "2026-02-28 09:00:00.000000")
		// A failure whose first try was long ago is still expected: kept.
		mustProcess(t, s, entry("TF"), func(context.Context, *sql.Tx) error { return errors.New("down") })

		_, err := s.Purge(ctx, inbox.PurgeOptions{OlderThan: time.Hour})
		if !errors.Is(err, inbox.ErrWindowTooShort) || !strings.Contains(err.Error(), "168h") {
			t.Fatalf("1h window: err = %v, want ErrWindowTooShort naming the horizon", err)
		}
		_, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 7*24*time.Hour - time.Second})
		if !errors.Is(err, inbox.ErrWindowTooShort) {
			t.Fatalf("window one second under the horizon accepted: %v", err)
		}

		n, err := s.Purge(ctx, inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, DryRun: true})
		dbtest.Must(t, err, "dry run")
		if n != 100000 {
			t.Fatalf("dry run counts %d, want 100000", n)
		}
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, BatchSize: 1000, MaxBatches: 3})
		dbtest.Must(t, err, "bounded purge")
		if n != 3000 {
			t.Fatalf("3 batches of 1000 deleted %d", n)
		}
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, BatchSize: 5000})
		dbtest.Must(t, err, "purge")
		if n != 97000 {
			t.Fatalf("purge deleted %d, want 97000", n)
		}
		counts, err := s.CountByStatus(ctx)
		dbtest.Must(t, err, "count")
		if counts[inboxkit.StatusTechnicalFailure] != 301 || counts[inboxkit.StatusProcessed] != 200 || len(counts) != 2 {
			t.Fatalf("left after purge: %v; want 301 TECHNICAL_FAILURE (never deleted) and 200 recent PROCESSED", counts)
		}
		// Even a window that covers everything never deletes failures.
		b.clock.Add(365 * 24 * time.Hour)
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 8 * 24 * time.Hour})
		dbtest.Must(t, err, "purge all")
		counts, _ = s.CountByStatus(ctx)
		if n != 200 || counts[inboxkit.StatusTechnicalFailure] != 301 {
			t.Fatalf("deleted %d, left %v", n, counts)
		}
	})
}
