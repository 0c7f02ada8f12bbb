package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// seedTable creates INBOX_EVENT_PROCESSING from the design document's seed
// DDL and fills it with rows an older consumer wrote.
func seedTable(t *testing.T, db *sql.DB, backend string) {
	t.Helper()
	ctx := context.Background()
	_, err := db.ExecContext(ctx, dbtest.SeedDDL(backend))
	dbtest.Must(t, err, "seed DDL")
	for _, q := range []string{
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT) VALUES ('ev-old-1', 'invoice-consumer', 'PROCESSED', 'order-1', CURRENT_TIMESTAMP)`,
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, PROCESSED_AT) VALUES ('ev-old-2', 'invoice-consumer', 'REJECTED', 'order-2', 'CUSTOMER_UNKNOWN', CURRENT_TIMESTAMP)`,
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS) VALUES ('ev-old-3', 'invoice-consumer', 'TECHNICAL_FAILURE')`,
	} {
		_, err := db.ExecContext(ctx, q)
		dbtest.Must(t, err, "seed row")
	}
}

func newStore(t *testing.T, db *sql.DB, backend string) *inbox.Store {
	t.Helper()
	d, err := inbox.DialectByName(backend)
	dbtest.Must(t, err, "dialect")
	s, err := inbox.New(db, d, inbox.Config{})
	dbtest.Must(t, err, "new store")
	return s
}

func TestMigrateUpgradesSeedTable(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		seedTable(t, db.DB, db.Backend)
		s := newStore(t, db.DB, db.Backend)

		// Behind: the typed error that inboxctl maps to "run inboxctl migrate".
		err := s.CheckSchema(ctx)
		var se *inbox.SchemaError
		if !errors.Is(err, inbox.ErrSchemaOutdated) || !errors.As(err, &se) || se.Current != 0 || se.TableMissing {
			t.Fatalf("CheckSchema on the seed table = %v, want a SchemaError at version 0", err)
		}
		if !strings.Contains(err.Error(), "run inboxctl migrate") {
			t.Errorf("error %q does not say what to do", err)
		}

		p, err := s.PlanMigration(ctx)
		dbtest.Must(t, err, "plan")
		text := p.Text()
		for _, want := range []string{"ADD ATTEMPTS", "UPDATE INBOX_EVENT_PROCESSING SET ATTEMPTS = 1", "ADD EVENT_ID_SOURCE", "CREATE INDEX INBOX_EVENT_PROCESSING_CORR",
			"CREATE INDEX INBOX_EVENT_PROCESSING_OKEY ON INBOX_EVENT_PROCESSING (ORDER_KEY, CONSUMER_NAME, STATUS)", inbox.AttemptTable + "_EVENT"} {
			if !strings.Contains(text, want) {
				t.Errorf("dry-run text lacks %q:\n%s", want, text)
			}
		}
		if strings.Contains(text, "CREATE TABLE INBOX_EVENT_PROCESSING") || strings.Contains(text, "CREATE TABLE IF NOT EXISTS INBOX_EVENT_PROCESSING") {
			t.Errorf("the plan recreates the existing table:\n%s", text)
		}

		dbtest.Must(t, s.Migrate(ctx), "migrate the seed table")
		dbtest.Must(t, s.CheckSchema(ctx), "check after migrate")
		p, err = s.PlanMigration(ctx)
		dbtest.Must(t, err, "plan again")
		if len(p.Steps) != 0 || len(p.Prelude) != 0 {
			t.Errorf("second plan not empty:\n%s", p.Text())
		}
		dbtest.Must(t, s.Migrate(ctx), "migrate again")

		// Rows kept and backfilled.
		r, err := s.Get(ctx, "ev-old-1", consumerName)
		dbtest.Must(t, err, "get old row")
		if r.Status != inboxkit.StatusProcessed || r.Attempts != 1 || r.UpdatedAt == nil || r.ProcessedAt == nil || !r.UpdatedAt.Equal(*r.ProcessedAt) || r.CorrelationID != "order-1" {
			t.Errorf("old PROCESSED row after migrate = %+v", r)
		}
		r, err = s.Get(ctx, "ev-old-3", consumerName)
		dbtest.Must(t, err, "get old failure")
		if r.Attempts != 1 || r.UpdatedAt == nil || !r.UpdatedAt.Equal(r.CreatedAt) {
			t.Errorf("old TECHNICAL_FAILURE row after migrate = %+v", r)
		}

		// The pre-existing PROCESSED row makes a redelivery a duplicate.
		ran := 0
		h := func(context.Context, *sql.Tx) error { ran++; return nil }
		res := mustProcess(t, s, redelivered("ev-old-1"), h)
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		res = mustProcess(t, s, entry("ev-old-1"), h)
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		res = mustProcess(t, s, entry("ev-old-2"), h)
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusRejected)
		if ran != 0 {
			t.Errorf("handler ran %d times for duplicates of seed rows", ran)
		}
		// A new event is processed.
		res = mustProcess(t, s, entry("ev-new-1"), h)
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		// The old failure fails again (its history starts), then finishes.
		res = mustProcess(t, s, redelivered("ev-old-3"), func(context.Context, *sql.Tx) error { return errors.New("still down") })
		wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		wantHistory(t, s, "ev-old-3", "2/0/TECHNICAL_FAILURE/TECHNICAL//still down")
		res = mustProcess(t, s, redelivered("ev-old-3"), h)
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if ran != 2 {
			t.Errorf("handler ran %d times, want 2 (ev-new-1, ev-old-3)", ran)
		}

		// The seed's primary key is kept under its own name.
		if db.Backend == dbtest.Postgres {
			var n int
			dbtest.Must(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
				WHERE n.nspname = current_schema() AND c.conname = 'pk_inbox_event' AND c.contype = 'p'`).Scan(&n), "constraint")
			if n != 1 {
				t.Errorf("primary key PK_INBOX_EVENT: %d found", n)
			}
		}
		st, err := s.SchemaStatus(ctx)
		dbtest.Must(t, err, "status")
		if st.Current != inbox.SchemaVersion || len(st.Applied) != inbox.SchemaVersion || len(st.Pending) != 0 {
			t.Errorf("status = %+v", st)
		}
	})
}

// Several instances (separate pools) start at once on the seed table: the
// lock lets exactly one migrate; every step is recorded once.
func TestMigrateConcurrentInstances(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		seedTable(t, db.DB, db.Backend)
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			pool := db.Open(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, _ := inbox.DialectByName(db.Backend)
				errs[i] = inbox.Migrate(ctx, pool, d, "")
			}()
		}
		wg.Wait()
		for i, err := range errs {
			dbtest.Must(t, err, "instance %d", i)
		}
		var rows, versions int
		dbtest.Must(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING`).Scan(&rows), "count")
		dbtest.Must(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+inbox.VersionTable).Scan(&versions), "versions")
		if rows != 3 || versions != inbox.SchemaVersion {
			t.Errorf("after %d concurrent migrations: %d rows (want 3), %d version rows (want %d)", n, rows, versions, inbox.SchemaVersion)
		}
		dbtest.Must(t, newStore(t, db.DB, db.Backend).CheckSchema(ctx), "check")
	})
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		s := newStore(t, db.DB, db.Backend)
		var se *inbox.SchemaError
		if err := s.CheckSchema(ctx); !errors.As(err, &se) || !se.TableMissing {
			t.Fatalf("CheckSchema on an empty database = %v, want TableMissing", err)
		}
		dbtest.Must(t, s.Migrate(ctx), "migrate")
		dbtest.Must(t, s.CheckSchema(ctx), "check")
		// A version behind: the last step's row removed by hand.
		_, err := db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE VERSION = %d`, inbox.VersionTable, inbox.SchemaVersion))
		dbtest.Must(t, err, "delete version row")
		if err := s.CheckSchema(ctx); !errors.As(err, &se) || se.Current != inbox.SchemaVersion-1 || len(se.Pending) != 1 {
			t.Errorf("CheckSchema one version behind = %v", err)
		}
		dbtest.Must(t, s.Migrate(ctx), "migrate back")
		dbtest.Must(t, s.CheckSchema(ctx), "check")
	})
}
