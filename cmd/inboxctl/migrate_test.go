package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// TestMigrateSeedTable runs what a team with the seed's table does: every
// command but the read-only ones (audit, stats) refuses the old schema
// (exit 2, "run inboxctl migrate"), status and --dry-run show the steps,
// migrate upgrades in place, then audit works on the old rows.
func TestMigrateSeedTable(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			ctx := context.Background()
			_, err := db.ExecContext(ctx, dbtest.SeedDDL(backend))
			dbtest.Must(t, err, "seed DDL")
			_, err = db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT)
				VALUES ('ev-old-1', 'invoice-consumer', 'PROCESSED', 'order-1', CURRENT_TIMESTAMP)`)
			dbtest.Must(t, err, "seed row")
			url := dbURL(t, db)

			for _, args := range [][]string{
				{"check", "--db", url},
				{"purge", "--db", url, "--older-than", "720h", "--dry-run"},
				// issue 11.9: run refuses before it touches the broker.
				{"run", "--db", url, "--broker", "stomp://127.0.0.1:1", "--queue", "invoices"},
			} {
				wantCode(t, inboxctl(t, "", args...), 2, "schema of INBOX_EVENT_PROCESSING is at version 0", "run inboxctl migrate")
			}
			// The read-only commands read the seed table as it is (issue 23.10).
			wantCode(t, inboxctl(t, "", "audit", "--db", url, "--correlation-id", "order-1"), 0, "ev-old-1", "read as it is")
			if r := inboxctl(t, "", "audit", "--db", url, "--correlation-id", "order-1"); !strings.Contains(r.stdout, "ev-old-1  -  ") {
				t.Errorf("audit of a legacy row shows an id source:\n%s", r)
			}
			wantCode(t, inboxctl(t, "", "stats", "--db", url), 0, "PROCESSED", "read as it is")
			wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url), 1, "schema version 0, this build needs 10", "pending  2")
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--dry-run"), 0,
				"-- step 2: attempt counting", "ALTER TABLE INBOX_EVENT_PROCESSING ADD ATTEMPTS", "UPDATE INBOX_EVENT_PROCESSING SET ATTEMPTS = 1",
				"-- step 10: INBOXKIT_ATTEMPT", "CREATE INDEX INBOX_EVENT_PROCESSING_OKEY ON INBOX_EVENT_PROCESSING (ORDER_KEY, CONSUMER_NAME, STATUS)")
			wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url), 1, "schema version 0") // the dry run changed nothing
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0, "applied step 10", "schema version 0 -> 10")
			r := inboxctl(t, "", "migrate", "status", "--db", url, "--json")
			wantCode(t, r, 0)
			var st struct {
				Current, Latest int
				Applied         []struct{ Version int }
				Pending         []struct{ Version int }
				Drift           *[]string // issue 16: always present, [] when there is none
			}
			if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
				t.Fatalf("status --json: %v\n%s", err, r)
			}
			if st.Current != 10 || st.Latest != 10 || len(st.Applied) != 10 || len(st.Pending) != 0 {
				t.Errorf("status after migrate: %+v", st)
			}
			if st.Drift == nil || len(*st.Drift) != 0 || !strings.Contains(r.stdout, `"drift": []`) {
				t.Errorf("status --json: want \"drift\": [] after a clean migrate\n%s", r.stdout)
			}
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--dry-run"), 0, "nothing to do")
			wantCode(t, inboxctl(t, "", "audit", "--db", url, "--correlation-id", "order-1"), 0, "ev-old-1")
		})
	}
}

func TestRunRefusesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	wantCode(t, inboxctl(t, "", "run", "--db", dbURL(t, db), "--broker", "stomp://127.0.0.1:1", "--queue", "invoices"), 2,
		"the inbox table INBOX_EVENT_PROCESSING does not exist", "run inboxctl migrate")
}
