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
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{}) // horizon: 7 days; clock: 2026-03-01 09:00
		ctx := context.Background()
		const old = "2026-01-01 00:00:00.000000"
		// 100,000 purgeable rows; 10,000 under -short (./scripts/test
		// purges all 100,000).
		k := 10
		if testing.Short() {
			k = 1
		}
		purgeable := 10000 * k
		bulkInsert(t, db, "P", 6000*k, inboxkit.StatusProcessed, old)
		bulkInsert(t, db, "R", 2500*k, inboxkit.StatusRejected, old)
		bulkInsert(t, db, "D", 1500*k, inboxkit.StatusDeadLettered, old)
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
		if n != int64(purgeable) {
			t.Fatalf("dry run counts %d, want %d", n, purgeable)
		}
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, BatchSize: 1000, MaxBatches: 3})
		dbtest.Must(t, err, "bounded purge")
		if n != 3000 {
			t.Fatalf("3 batches of 1000 deleted %d", n)
		}
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, BatchSize: 5000})
		dbtest.Must(t, err, "purge")
		if n != int64(purgeable-3000) {
			t.Fatalf("purge deleted %d, want %d", n, purgeable-3000)
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

// The pause after a batch makes the batch and the pause together last as
// long as its rows take at the cap: rows/MaxRowsPerSecond.
func TestPurgePause(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		took    time.Duration
		rows    int64
		maxRate int
		want    time.Duration
	}{
		{2 * time.Millisecond, 1000, 100_000, 8 * time.Millisecond},
		{2 * time.Millisecond, 500, 100_000, 3 * time.Millisecond},
		{2 * time.Millisecond, 1000, 1_000_000, 0}, // slower than the cap: no pause
		{2 * time.Millisecond, 1000, 400_000, 500 * time.Microsecond},
		{2 * time.Millisecond, 1000, -1, 0}, // no cap
	} {
		if got := inbox.PurgePause(c.took, c.rows, c.maxRate); got != c.want {
			t.Errorf("pause after %d rows in %s at %d rows/s = %s, want %s", c.rows, c.took, c.maxRate, got, c.want)
		}
	}
}

// Purge pauses between batches (not after the last one) unless
// MaxRowsPerSecond is negative, and stops in a pause when the context
// ends. The pauses are recorded, not waited out.
func TestPurgeRateCap(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		bulkInsert(t, db, "P", 3500, inboxkit.StatusProcessed, "2026-01-01 00:00:00.000000")
		var pauses []time.Duration
		inbox.SetPurgeWait(s, func(_ context.Context, d time.Duration) error {
			pauses = append(pauses, d)
			return nil
		})
		window := 30 * 24 * time.Hour

		n, err := s.Purge(ctx, inbox.PurgeOptions{OlderThan: window, BatchSize: 1000, MaxBatches: 2, MaxRowsPerSecond: -1})
		dbtest.Must(t, err, "purge without a cap")
		if n != 2000 || len(pauses) != 0 {
			t.Fatalf("no cap: deleted %d with %d pauses, want 2000 and none", n, len(pauses))
		}

		// A cap of 10 rows/s: a batch of 1000 rows takes 100 s with its
		// pause, so the pause is the 100 s less the batch's own time.
		n, err = s.Purge(ctx, inbox.PurgeOptions{OlderThan: window, BatchSize: 1000, MaxRowsPerSecond: 10})
		dbtest.Must(t, err, "capped purge")
		if n != 1500 || len(pauses) != 1 || pauses[0] <= 90*time.Second || pauses[0] >= 100*time.Second {
			t.Fatalf("cap 10 rows/s: deleted %d with pauses %v, want 1500 and one pause of almost 100s (none after the last batch)", n, pauses)
		}

		bulkInsert(t, db, "Q", 3000, inboxkit.StatusProcessed, "2026-01-01 00:00:00.000000")
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		inbox.SetPurgeWait(s, func(ctx context.Context, d time.Duration) error {
			cancel()
			return ctx.Err()
		})
		n, err = s.Purge(cctx, inbox.PurgeOptions{OlderThan: window, BatchSize: 500, MaxRowsPerSecond: 10})
		if !errors.Is(err, context.Canceled) || n != 500 {
			t.Fatalf("cancelled in the first pause: deleted %d, err %v; want 500 and context.Canceled", n, err)
		}
	})
}

// PostgreSQL's purge batch commits with synchronous_commit off for its own
// transaction only: what the pool's connection runs next commits
// synchronously again.
func TestPurgeLeavesSynchronousCommitOn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	db.DB.SetMaxOpenConns(1) // the purge and the check share one connection
	s, _ := setup(t, db, inbox.Config{})
	bulkInsert(t, db, "P", 1500, inboxkit.StatusProcessed, "2026-01-01 00:00:00.000000")
	n, err := s.Purge(context.Background(), inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour, MaxRowsPerSecond: -1})
	dbtest.Must(t, err, "purge")
	var after string
	dbtest.Must(t, db.DB.QueryRow(`SHOW synchronous_commit`).Scan(&after), "show")
	if n != 1500 || after != "on" {
		t.Fatalf("purge deleted %d and left synchronous_commit %q; want 1500 and on", n, after)
	}
}
