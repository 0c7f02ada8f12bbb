package inbox_test

import (
	"context"
	"database/sql"
	"errors"
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
