package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// The PostgreSQL marker commits with synchronous_commit off for its own
// transaction only: the business transaction after it, on the same
// connection, must still commit synchronously (rule 2's durability), and so
// must anything else the pool's connection runs later.
func TestMarkerLeavesSynchronousCommitOn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	db.DB.SetMaxOpenConns(1) // the marker, the handler and the check share one connection
	s, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, s.Migrate(context.Background()), "migrate")
	var inHandler string
	res, err := s.Process(context.Background(), inbox.Entry{EventID: "E-1", ConsumerName: "c"}, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&inHandler)
	})
	if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
		t.Fatalf("Process: %v %+v", err, res)
	}
	var after string
	dbtest.Must(t, db.DB.QueryRow(`SHOW synchronous_commit`).Scan(&after), "show")
	if inHandler != "on" || after != "on" {
		t.Fatalf("synchronous_commit is %q in the business transaction and %q after it; want on and on (the marker's setting must stay in the marker's transaction)", inHandler, after)
	}
	// A duplicate goes through the same statement.
	res, err = s.Process(context.Background(), inbox.Entry{EventID: "E-1", ConsumerName: "c"}, func(context.Context, *sql.Tx) error { return nil })
	if err != nil || res.Outcome != inboxkit.OutcomeDuplicate || res.Status != inboxkit.StatusProcessed || res.Attempts != 1 {
		t.Fatalf("duplicate: %v %+v", err, res)
	}
	dbtest.Must(t, db.DB.QueryRow(`SHOW synchronous_commit`).Scan(&after), "show")
	if after != "on" {
		t.Fatalf("synchronous_commit is %q after a duplicate; want on", after)
	}
}
