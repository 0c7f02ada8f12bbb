package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

func first(id string) inbox.Entry {
	e := entry(id)
	e.FirstDelivery = true
	return e
}

// While the handler of a first delivery runs, no marker is committed: the
// event has no row another connection can see. A delivery without
// FirstDelivery (a redelivery) commits its marker first. Both through
// Process and ProcessBatch.
func TestFirstDeliveryCommitsNoMarker(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		if db.Backend == dbtest.SQLite {
			t.Skip("SQLite: a second connection cannot read while the handler's write transaction holds the database")
		}
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		seen := map[string]string{}
		look := func(id string) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx) error {
				r, err := s.Get(ctx, id, consumerName) // the pool, not tx
				switch {
				case err == nil:
					seen[id] = string(r.Status)
				case errors.Is(err, inbox.ErrNotFound):
					seen[id] = "no row"
				default:
					return err
				}
				return nil
			}
		}
		for _, e := range []inbox.Entry{first("P-FIRST"), redelivered("P-AGAIN")} {
			res, err := s.Process(ctx, e, look(e.EventID))
			dbtest.Must(t, err, "Process %s", e.EventID)
			wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		}
		for _, items := range [][]inbox.Entry{{first("B-FIRST-1"), first("B-FIRST-2")}, {first("B-MIXED"), redelivered("B-AGAIN")}} {
			var batch []inbox.BatchItem
			for _, e := range items {
				batch = append(batch, inbox.BatchItem{Entry: e, Handler: look(e.EventID)})
			}
			res, err := s.ProcessBatch(ctx, batch)
			dbtest.Must(t, err, "ProcessBatch")
			for _, r := range res {
				wantOutcome(t, r, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			}
		}
		want := map[string]string{
			"P-FIRST": "no row", "P-AGAIN": "TECHNICAL_FAILURE",
			"B-FIRST-1": "no row", "B-FIRST-2": "no row",
			// A batch with one redelivery takes the marked path whole.
			"B-MIXED": "TECHNICAL_FAILURE", "B-AGAIN": "TECHNICAL_FAILURE",
		}
		for id, w := range want {
			if seen[id] != w {
				t.Errorf("%s: another connection saw %q while its handler ran, want %q", id, seen[id], w)
			}
		}
	})
}

// A first delivery that kills the process leaves no count; its
// redeliveries (flagged by the broker, so without FirstDelivery) are
// counted, and it is dead-lettered after Retry.MaxAttempts + 1 deaths. The
// death is runtime.Goexit in the handler, as in
// TestProcessBatchCrashChargesNeighboursOnce.
func TestFirstDeliveryKillerIsCountedFromItsRedelivery(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
		ctx := context.Background()
		kill := func(context.Context, *sql.Tx) error { runtime.Goexit(); return nil }
		deaths := 0
		var final *inbox.Result
		for delivery := 1; delivery <= 10 && final == nil; delivery++ {
			e := redelivered("KILLER")
			if delivery == 1 {
				e = first("KILLER")
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err := s.Process(ctx, e, kill)
				dbtest.Must(t, err, "Process")
				final = &res
			}()
			<-done
			if final == nil {
				deaths++
			}
			if delivery == 1 {
				if _, err := s.Get(ctx, "KILLER", consumerName); !errors.Is(err, inbox.ErrNotFound) {
					t.Errorf("after the first delivery's death: Get = %v, want ErrNotFound (no marker)", err)
				}
			}
		}
		if final == nil {
			t.Fatal("the killer still ran after 10 deliveries")
		}
		if final.Outcome != inboxkit.OutcomeDeadLetter || final.Reason != inboxkit.ReasonMaxAttemptsExceeded || final.Attempts != 3 {
			t.Errorf("killer: %s, want DEAD_LETTER %s at attempts 3", comparable(*final), inboxkit.ReasonMaxAttemptsExceeded)
		}
		if deaths != 4 {
			t.Errorf("the killer died %d times, want MaxAttempts + 1 = 4", deaths)
		}
	})
}

// On PostgreSQL a batch that looks up the rows its INSERT found (an IN
// list of keys) first makes the server plan for the values at hand
// (plan_cache_mode force_custom_plan, for its own transaction): the cached
// generic plan of such a lookup, made while the table was small, went on
// scanning the whole table after it had grown. A batch without such rows
// pays nothing for it.
func TestFirstBatchLooksUpWithCustomPlans(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	s, _ := setup(t, db, inbox.Config{})
	ctx := context.Background()
	mode := map[string]string{}
	read := func(id string) inbox.Handler {
		return func(ctx context.Context, tx *sql.Tx) error {
			var m string
			err := tx.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&m)
			mode[id] = m
			return err
		}
	}
	_, err := s.Process(ctx, first("DONE"), read("DONE"))
	dbtest.Must(t, err, "Process")
	for _, batch := range [][]string{{"NEW-1", "NEW-2"}, {"NEW-3", "DONE"}} {
		var items []inbox.BatchItem
		for _, id := range batch {
			items = append(items, inbox.BatchItem{Entry: first(id), Handler: read(id)})
		}
		_, err := s.ProcessBatch(ctx, items)
		dbtest.Must(t, err, "ProcessBatch")
	}
	for id, want := range map[string]string{"NEW-1": "auto", "NEW-2": "auto", "NEW-3": "force_custom_plan"} {
		if mode[id] != want {
			t.Errorf("%s: plan_cache_mode %q in its batch, want %q", id, mode[id], want)
		}
	}
	var after string
	dbtest.Must(t, db.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&after), "read after")
	if after != "auto" {
		t.Errorf("plan_cache_mode %q after the batch, want auto (local to the batch's transaction)", after)
	}
}

// A first delivery alone whose INSERT meets the event's row (a producer's
// resend) reads that row: through pgx's plain driver in its transaction,
// through inboxkit-pgx, which holds statements, with its rollback. A
// terminal row is the duplicate it is and nothing is written to it (the
// marker, an upsert, would have locked it: its xmax would change); a row to
// retry runs at its next attempt; a legacy RECEIVED row (no store-then-process
// lease) is dead-lettered as an unknown status and left as it is.
func TestFirstDeliveryMeetsItsRow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	for _, tc := range []struct {
		driver string
		reads  bool
	}{{db.Driver, false}, {"pgx", true}} {
		t.Run(tc.driver, func(t *testing.T) {
			s := storeThrough(t, db, tc.driver, "MEETS_"+map[bool]string{true: "R", false: "H"}[tc.reads])
			if got := inbox.ReadsMet(s); got != tc.reads {
				t.Fatalf("reads the row its INSERT met: %v, want %v", got, tc.reads)
			}
			ctx := context.Background()
			table := s.Config().Table
			for _, row := range []string{
				`'F-PROC', $1, 'PROCESSED', 1, NULL`, `'F-REJ', $1, 'REJECTED', 1, 'BUSINESS'`,
				`'F-FAIL', $1, 'TECHNICAL_FAILURE', 1, 'TECHNICAL'`, `'F-LEGACY', $1, 'RECEIVED', 0, NULL`,
			} {
				_, err := s.DB().ExecContext(ctx, `INSERT INTO `+table+` (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, ERROR_CLASS, CREATED_AT, UPDATED_AT) VALUES (`+row+`, now(), now())`, consumerName)
				dbtest.Must(t, err, "row %s", row)
			}
			xmax := func(id string) string {
				var x string
				dbtest.Must(t, s.DB().QueryRowContext(ctx, `SELECT xmax::text FROM `+table+` WHERE EVENT_ID = $1`, id).Scan(&x), "xmax of %s", id)
				return x
			}
			for _, tt := range []struct {
				id      string
				outcome inboxkit.Outcome
				status  inboxkit.Status
				ran     bool
			}{
				{"F-PROC", inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed, false},
				{"F-REJ", inboxkit.OutcomeDuplicate, inboxkit.StatusRejected, false},
				{"F-FAIL", inboxkit.OutcomeProcessed, inboxkit.StatusProcessed, true},
				{"F-LEGACY", inboxkit.OutcomeDeadLetter, inboxkit.StatusReceived, false},
			} {
				before := xmax(tt.id)
				ran := false
				res, err := s.Process(ctx, first(tt.id), func(context.Context, *sql.Tx) error { ran = true; return nil })
				dbtest.Must(t, err, "Process %s", tt.id)
				if res.Outcome != tt.outcome || ran != tt.ran {
					t.Errorf("%s: %s, handler ran %v; want %s, ran %v", tt.id, res.Outcome, ran, tt.outcome, tt.ran)
				}
				if r := get(t, s, tt.id); r.Status != tt.status {
					t.Errorf("%s: row %s afterwards, want %s", tt.id, r.Status, tt.status)
				}
				if tt.ran && res.Attempts != 2 {
					t.Errorf("%s: ran at attempt %d, want 2 (the marker counted it)", tt.id, res.Attempts)
				}
				if tt.outcome == inboxkit.OutcomeDuplicate && xmax(tt.id) != before {
					t.Errorf("%s: a duplicate locked or wrote its row (xmax %s, was %s); want it only read", tt.id, xmax(tt.id), before)
				}
			}
		})
	}
}

// A resend whose context ends while its business transaction runs (a
// consumer shutting down) fails with the context's error, and the store
// keeps reading resends with the rollback and running marked deliveries
// ahead through inboxkit-pgx: a statement that never reached the driver
// says nothing of what the driver can. Before, one such resend turned both
// off for the store's lifetime (a duplicate then cost the marker).
func TestFirstDeliveryCanceledKeepsAhead(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	s := storeThrough(t, db, db.Driver, "CANCELED_AHEAD")
	ctx := context.Background()
	_, err := s.Process(ctx, first("C-1"), func(context.Context, *sql.Tx) error { return nil })
	dbtest.Must(t, err, "new event")
	cctx, cancel := context.WithCancel(ctx)
	_, err = s.ProcessInTx(cctx, first("C-1"), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT 1`) // sends the held INSERT, which finds the row
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("resend canceled in its handler: %v, want context.Canceled", err)
	}
	if !inbox.Ahead(s) {
		t.Error("the store stopped running ahead after a canceled resend, want it running ahead")
	}
	if r := get(t, s, "C-1"); r.Status != inboxkit.StatusProcessed || r.Attempts != 1 {
		t.Errorf("row %s at %d attempts after the canceled resend, want PROCESSED at 1", r.Status, r.Attempts)
	}
	res, err := s.Process(ctx, first("C-1"), func(context.Context, *sql.Tx) error { return nil })
	dbtest.Must(t, err, "resend")
	wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
}
