package golden

import (
	"context"
	"fmt"
	"testing"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// TestReconcileLegacyEvents: with LegacyEvents only the events the legacy
// side has a row of are compared (the reverse shadow); the shadow side's
// others are skipped, and an event the legacy side has and the shadow
// lacks is still unexpected.
func TestReconcileLegacyEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	legacy, shadow := dbtest.New(t, dbtest.SQLite), dbtest.New(t, dbtest.SQLite)
	for _, db := range []*dbtest.DB{legacy, shadow} {
		_, err := db.ExecContext(ctx, `CREATE TABLE fx (k VARCHAR(20), v VARCHAR(20))`)
		dbtest.Must(t, err, "create")
	}
	ins := func(db *dbtest.DB, keys ...string) {
		for _, k := range keys {
			_, err := db.ExecContext(ctx, `INSERT INTO fx VALUES (?, 'same')`, k)
			dbtest.Must(t, err, "insert")
		}
	}
	ins(legacy, "E-3", "E-4", "E-5")
	ins(shadow, "E-1", "E-2", "E-3", "E-4") // E-1, E-2: before the legacy side started; E-5 lost
	c, err := ParseReconcileConfig([]byte(`{"effects":[{"legacy":{"table":"fx","key":"k","columns":["v"]}}]}`))
	dbtest.Must(t, err, "config")
	sides := []Side{{DB: legacy.DB, Dialect: inbox.SQLite}, {DB: shadow.DB, Dialect: inbox.SQLite}}
	rep, err := Reconcile(ctx, c, sides[0], sides[1], ReconcileOptions{LegacyEvents: true})
	dbtest.Must(t, err, "reconcile")
	if got := fmt.Sprintf("%+v %v", rep.Counts, rep.UnexpectedEvents); got != "{Events:3 Identical:2 Expected:0 Unexpected:1 Skipped:2} [E-5]" {
		t.Fatalf("with LegacyEvents: %s", got)
	}
	rep, err = Reconcile(ctx, c, sides[0], sides[1], ReconcileOptions{})
	dbtest.Must(t, err, "reconcile")
	if got := fmt.Sprintf("%+v %v", rep.Counts, rep.UnexpectedEvents); got != "{Events:5 Identical:2 Expected:0 Unexpected:3 Skipped:0} [E-1 E-2 E-5]" {
		t.Fatalf("without: %s", got)
	}
}
