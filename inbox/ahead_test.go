package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // pgx's plain "pgx", beside dbtest's inboxkit-pgx

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Through inboxkit-pgx a delivery without FirstDelivery sends its marker
// and its claim in one round trip (runAhead); through pgx's plain driver
// one by one. Both decide alike: the marker is committed (another
// connection sees it) while the handler runs in the claim's transaction,
// a duplicate runs nothing, an exhausted row is dead-lettered and left as
// it was (the claim the round trip sent is rolled back), a competing
// delivery's row is left to it, and a pool of one connection is enough.
func TestMarkedDeliveryAheadAndOneByOne(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	for _, tc := range []struct {
		driver string
		ahead  bool
	}{{db.Driver, true}, {"pgx", false}} {
		t.Run(tc.driver, func(t *testing.T) {
			s := storeThrough(t, db, tc.driver, "AHEAD_"+map[bool]string{true: "A", false: "B"}[tc.ahead])
			ctx := context.Background()
			other := db.Open(t)
			o, err := inbox.New(other, inbox.Postgres, s.Config())
			dbtest.Must(t, err, "second store")

			var seen, inTx inbox.Record
			res, err := s.Process(ctx, redelivered("M-1"), func(ctx context.Context, tx *sql.Tx) error {
				var err error
				if seen, err = o.Get(ctx, "M-1", consumerName); err != nil {
					return err
				}
				var st string
				err = tx.QueryRowContext(ctx, `SELECT STATUS FROM `+s.Config().Table+` WHERE EVENT_ID = 'M-1'`).Scan(&st)
				inTx.Status = inboxkit.Status(st)
				return err
			})
			dbtest.Must(t, err, "Process")
			wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			if seen.Status != inboxkit.StatusTechnicalFailure || seen.Attempts != 1 || inTx.Status != inboxkit.StatusProcessed {
				t.Errorf("while the handler ran: another connection saw %s with %d attempts, the handler's transaction %s; want TECHNICAL_FAILURE, 1 (the marker committed) and PROCESSED (claimed)", seen.Status, seen.Attempts, inTx.Status)
			}
			if got := inbox.Ahead(s); got != tc.ahead {
				t.Errorf("marker and claim in one round trip: %v, want %v", got, tc.ahead)
			}

			ran := false
			h := func(context.Context, *sql.Tx) error { ran = true; return nil }
			res, err = s.Process(ctx, redelivered("M-1"), h)
			dbtest.Must(t, err, "duplicate")
			if res.Outcome != inboxkit.OutcomeDuplicate || ran {
				t.Errorf("duplicate: %+v, handler ran %v; want a duplicate and no run", res, ran)
			}

			// An exhausted row: the marker does not count it, and the claim
			// sent with it must not make it PROCESSED.
			_, err = other.Exec(`INSERT INTO `+s.Config().Table+` (EVENT_ID, CONSUMER_NAME, STATUS, CREATED_AT, UPDATED_AT, ATTEMPTS, ERROR_CLASS) VALUES ('M-2', $1, 'TECHNICAL_FAILURE', now(), now(), 3, 'TECHNICAL')`, consumerName)
			dbtest.Must(t, err, "exhausted row")
			res, err = s.Process(ctx, redelivered("M-2"), h)
			dbtest.Must(t, err, "exhausted")
			if res.Outcome != inboxkit.OutcomeDeadLetter || ran {
				t.Errorf("exhausted row: %+v, handler ran %v; want a dead letter and no run", res, ran)
			}
			if r := get(t, o, "M-2"); r.Status != inboxkit.StatusTechnicalFailure || r.Attempts != 3 {
				t.Errorf("exhausted row after the dead letter: %s with %d attempts, want TECHNICAL_FAILURE with 3 (unchanged)", r.Status, r.Attempts)
			}

			// A handler's business rejection and a technical failure.
			res, err = s.Process(ctx, redelivered("M-3"), func(context.Context, *sql.Tx) error { return errors.New("boom") })
			dbtest.Must(t, err, "technical")
			if res.Outcome != inboxkit.OutcomeRetry || get(t, o, "M-3").Attempts != 1 {
				t.Errorf("technical failure: %+v, want a retry with the row at 1 attempt", res)
			}
			res, err = s.Process(ctx, redelivered("M-3"), h)
			dbtest.Must(t, err, "again")
			if res.Outcome != inboxkit.OutcomeProcessed || res.Attempts != 2 || !ran {
				t.Errorf("the retry: %+v, ran %v; want processed at attempt 2", res, ran)
			}
		})
	}
}

// storeThrough is a migrated Store on table in db's schema, opened through
// the database/sql driver named driver with a pool of one connection, the
// backout threshold at 3.
func storeThrough(t *testing.T, db *dbtest.DB, driver, table string) *inbox.Store {
	t.Helper()
	pool, err := sql.Open(driver, db.DSN)
	dbtest.Must(t, err, "open")
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(1)
	s, err := inbox.New(pool, inbox.Postgres, inbox.Config{Table: table, Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, s.Migrate(context.Background()), "migrate")
	return s
}
