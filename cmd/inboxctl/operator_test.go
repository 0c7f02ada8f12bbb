package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Every state-changing command without a broker records who did what:
// purge, migrate --map-status, outbox retry and drop; audit --operator
// lists an operator's actions, audit --event-id the event's. On every
// database; $USER is the operator where --operator is not given.
func TestOperatorActions(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0, "schema version 0 -> 10")
			exec := func(q string, args ...any) { t.Helper(); execSQL(t, db, q, args...) }
			old := time.Now().UTC().Add(-40 * 24 * time.Hour).Format("2006-01-02 15:04:05.000000")
			exec(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT) VALUES ('old-1', 'c', 'PROCESSED', ?, ?)`, old, old)
			exec(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS) VALUES ('legacy-1', 'c', 'FAILED')`)
			for _, k := range []string{"k1", "k2"} {
				exec(`INSERT INTO INBOXKIT_OUTBOX (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, BODY, STATUS, ATTEMPTS, CAUSE_EVENT_ID, CREATED_AT, UPDATED_AT) VALUES (?, ?, 1, 'letters', ?, 'PARKED', 3, 'ev-1', ?, ?)`, "m-"+k, k, []byte("{}"), old, old)
				exec(`INSERT INTO INBOXKIT_OUTBOX_KEY (MSG_KEY, LAST_SEQ, DONE_SEQ) VALUES (?, 1, 0)`, k)
			}

			wantCode(t, inboxctl(t, "", "audit", "--db", url, "--operator", "alice"), 1, `no action of operator "alice"`)
			wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "30d", "--operator", "alice"), 0, "deleted 1")
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", "FAILED=TECHNICAL_FAILURE", "--operator", "alice"), 0, "mapped status FAILED")
			wantCode(t, inboxctl(t, "", "outbox", "retry", "--db", url, "--message-id", "m-k1", "--operator", "alice"), 0, "retried 1")
			wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "30d", "--dry-run", "--operator", "alice"), 0, "dry run")
			wantCode(t, inboxctlEnv(t, []string{"USER=bob"}, "", "outbox", "drop", "--db", url, "--key", "k2"), 0, "dropped 1")

			r := inboxctl(t, "", "audit", "--db", url, "--operator", "alice")
			wantCode(t, r, 0, "actions of operator alice: 3", "purge", "map-status", "FAILED -> TECHNICAL_FAILURE", "outbox-retry", "m-k1")
			t.Logf("inboxctl audit --operator alice:\n%s", r.stdout)
			r = inboxctl(t, "", "audit", "--db", url, "--operator", "bob", "-o", "json")
			wantCode(t, r, 0)
			var as []inbox.Action
			if err := json.Unmarshal([]byte(r.stdout), &as); err != nil {
				t.Fatalf("audit --operator -o json: %v\n%s", err, r)
			}
			if len(as) != 1 || as[0].Action != "outbox-drop" || as[0].Rows != 1 || as[0].Table != "INBOXKIT_OUTBOX" || as[0].Detail != "--key k2" || as[0].At.IsZero() {
				t.Errorf("bob's actions: %+v", as)
			}
			r = inboxctl(t, "", "audit", "--db", url, "--operator", "alice", "-o", "json")
			as = nil
			if err := json.Unmarshal([]byte(r.stdout), &as); err != nil || len(as) != 3 {
				t.Fatalf("alice's actions: %v\n%s", err, r)
			}
			if as[0].Action != "purge" || as[0].Rows != 1 || as[1].Action != "map-status" || as[1].Rows != 1 || as[2].Action != "outbox-retry" {
				t.Errorf("alice's actions, oldest first: %+v", as)
			}
			wantCode(t, inboxctl(t, "", "audit", "--db", url, "--operator", "alice", "--event-id", "m-k1"), 0, "actions of operator alice: 1", "outbox-retry")
		})
	}
}

// execSQL runs q, written with ? placeholders, on db.
func execSQL(t *testing.T, db *dbtest.DB, q string, args ...any) {
	t.Helper()
	if db.Backend == dbtest.Postgres {
		n := 0
		q = regexp.MustCompile(`\?`).ReplaceAllStringFunc(q, func(string) string { n++; return fmt.Sprintf("$%d", n) })
	}
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
