package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Every path that writes a row stores the entry's order key in ORDER_KEY
// (migration step 7), and an entry without one leaves it NULL.
func TestOrderKeyIsStored(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		keyed := func(id string, first bool) inbox.Entry {
			e := entry(id)
			e.OrderKey, e.FirstDelivery = "customer-"+id, first
			return e
		}
		ok := func(context.Context, *sql.Tx) error { return nil }
		fail := func(context.Context, *sql.Tx) error { return errors.New("downstream timeout") }
		mustProcess(t, s, keyed("K-first", true), ok)   // the first delivery's row
		mustProcess(t, s, keyed("K-marked", false), ok) // the attempt marker's row
		mustProcess(t, s, keyed("K-failed", true), fail)
		_, err := s.ProcessBatch(ctx, []inbox.BatchItem{{Entry: keyed("K-batch-1", true), Handler: ok}, {Entry: keyed("K-batch-2", false), Handler: ok}})
		dbtest.Must(t, err, "process batch")
		_, _, err = s.Receive(ctx, keyed("K-stored", false), nil, []byte("{}"))
		dbtest.Must(t, err, "receive")
		mustProcess(t, s, entry("unkeyed"), ok)
		for _, id := range []string{"K-first", "K-marked", "K-failed", "K-batch-1", "K-batch-2", "K-stored"} {
			if r := get(t, s, id); r.OrderKey != "customer-"+id {
				t.Errorf("%s: ORDER_KEY %q, want %q", id, r.OrderKey, "customer-"+id)
			}
		}
		if r := get(t, s, "unkeyed"); r.OrderKey != "" {
			t.Errorf("unkeyed: ORDER_KEY %q, want NULL", r.OrderKey)
		}
	})
}

// A table at version 6 (before ORDER_KEY) with a row: CheckSchema names
// the one pending step, Migrate adds the column, the old row reads with no
// order key and a new one stores its key.
func TestOrderKeyMigrationFromVersion6(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		ok := func(context.Context, *sql.Tx) error { return nil }
		mustProcess(t, s, entry("before"), ok)
		undoStep10(t, db)
		_, err := db.ExecContext(ctx, `ALTER TABLE `+inbox.DefaultTable+` DROP COLUMN ORDER_KEY`)
		dbtest.Must(t, err, "drop ORDER_KEY")
		_, err = db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE VERSION >= 7`, inbox.VersionTable))
		dbtest.Must(t, err, "delete versions 7 and later")
		_, err = db.ExecContext(ctx, `DROP TABLE `+inbox.ActionTable) // step 8's
		dbtest.Must(t, err, "drop the action table")
		var se *inbox.SchemaError
		if err := s.CheckSchema(ctx); !errors.As(err, &se) || se.Current != 6 || len(se.Pending) != inbox.SchemaVersion-6 || !strings.Contains(se.Pending[0], "ORDER_KEY") {
			t.Fatalf("CheckSchema at version 6 = %v, want step 7 (ORDER_KEY) and the later steps pending", err)
		}
		dbtest.Must(t, s.Migrate(ctx), "migrate to 7")
		dbtest.Must(t, s.CheckSchema(ctx), "check")
		e := entry("after")
		e.OrderKey = "K-1"
		mustProcess(t, s, e, ok)
		if r := get(t, s, "before"); r.OrderKey != "" {
			t.Errorf("the old row's ORDER_KEY is %q, want NULL", r.OrderKey)
		}
		if r := get(t, s, "after"); r.OrderKey != "K-1" {
			t.Errorf("the new row's ORDER_KEY is %q, want K-1", r.OrderKey)
		}
	})
}
