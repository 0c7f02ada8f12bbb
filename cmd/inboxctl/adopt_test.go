package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Issue 23: what an adopted legacy table brings.

// seedAdopted creates the seed table with what a legacy invoice bean left,
// in January: a FAILED row, an IN_PROGRESS row it never finished, a
// lower-case processed, and a PROCESSED row whose letter the bean wrote
// elsewhere (no shipping_letters row).
func seedAdopted(t *testing.T, db *dbtest.DB) {
	t.Helper()
	const jan = "2026-01-05 10:00:00"
	dbtest.SeedLegacy(t, db, jan, dbtest.LegacyRow{EventID: "INV-9006", Status: "FAILED"}, dbtest.LegacyRow{EventID: "INV-9007", Status: "IN_PROGRESS"},
		dbtest.LegacyRow{EventID: "INV-9008", Status: "processed", ProcessedAt: jan}, dbtest.LegacyRow{EventID: "INV-9009", Status: "PROCESSED", ProcessedAt: jan})
}

// tableDump is the inbox table's columns and rows, and whether the
// version table exists.
func tableDump(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	return dbtest.Dump(t, db, "INBOX_EVENT_PROCESSING", "INBOXKIT_SCHEMA_VERSION")
}

// TestMigrateAdoptedTable: migrate status and migrate list the statuses the
// state machine does not know with their rows; migrate and --dry-run stop
// (exit 1, nothing changed) until --map-status maps them; a target that is
// no status is exit 2 naming the valid ones; the mapping runs in the same
// migration and is shown by --dry-run. After the adoption, audit shows no
// id source for the legacy rows, and check does not take the legacy
// PROCESSED row for a split transaction (--since all does).
func TestMigrateAdoptedTable(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			seedAdopted(t, db)
			url := dbURL(t, db)
			before := tableDump(t, db)
			listing := []string{"FAILED", "IN_PROGRESS (no payload, no lease: a legacy row)", "processed", "1 row(s)"}
			wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url), 1, append(listing, "status values the state machine does not know")...)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 1, append(listing, "nothing was changed",
				"--map-status 'FAILED=TECHNICAL_FAILURE,IN_PROGRESS=TECHNICAL_FAILURE,processed=PROCESSED'")...)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--dry-run"), 1, listing...)
			r := inboxctl(t, "", "migrate", "--db", url, "--json")
			wantCode(t, r, 1)
			var rep struct {
				UnknownStatuses []struct {
					Status string
					Orphan bool
					Rows   int
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.UnknownStatuses) != 3 || rep.UnknownStatuses[1].Status != "IN_PROGRESS" || !rep.UnknownStatuses[1].Orphan {
				t.Errorf("migrate --json: %v %+v\n%s", err, rep, r)
			}
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", "FAILED=DONE,IN_PROGRESS=TECHNICAL_FAILURE,processed=PROCESSED"), 2,
				`"DONE" is not a status to map to`, "TECHNICAL_FAILURE, PROCESSED, REJECTED, DEAD_LETTERED")
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", "FAILED"), 2, "FROM=TO pairs")
			const mapping = "FAILED=TECHNICAL_FAILURE,IN_PROGRESS=TECHNICAL_FAILURE,processed=PROCESSED"
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--dry-run", "--map-status", mapping), 0,
				"-- status mapping", "UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'TECHNICAL_FAILURE'", "= 'IN_PROGRESS' AND PAYLOAD_HASH IS NULL")
			if got := tableDump(t, db); got != before {
				t.Fatalf("a refused migrate or a dry run changed the table:\n--- before\n%s--- after\n%s", before, got)
			}

			// The read-only commands read the table as it is.
			wantCode(t, inboxctl(t, "", "stats", "--db", url), 0, "FAILED", "processed", "read as it is")

			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", mapping), 0,
				"mapped status FAILED -> TECHNICAL_FAILURE (1 row(s); recorded in INBOXKIT_HISTORY)", "mapped status processed -> PROCESSED (1 row(s)", "schema version 0 -> 10")
			wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url), 0, "schema version 10")

			// Adopted: legacy rows have no id source; the legacy PROCESSED
			// rows' letters are not inboxkit's to check.
			wantCode(t, inboxctl(t, "", "audit", "--db", url, "--event-id", "INV-9009"), 0)
			if r := inboxctl(t, "", "audit", "--db", url, "--event-id", "INV-9009"); !regexp.MustCompile(`INV-9009\s+-\s+invoice-consumer\s+PROCESSED`).MatchString(r.stdout) {
				t.Errorf("audit of a legacy row shows an id source:\n%s", r)
			}
			wantCode(t, inboxctl(t, "", "check", "--db", url), 0, "ok    processed-without-letter", "only rows finished since", "ok    unknown-status")
			wantCode(t, inboxctl(t, "", "check", "--db", url, "--since", "all"), 1, "FOUND processed-without-letter", "INV-9008", "INV-9009")
			wantCode(t, inboxctl(t, "", "check", "--db", url, "--since", "yesterday"), 2, "--since")
			// A row the legacy bean writes beside the consumer afterwards.
			_, err := db.Exec(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS) VALUES ('INV-9020', 'invoice-consumer', 'PENDING')`)
			dbtest.Must(t, err, "legacy row")
			wantCode(t, inboxctl(t, "", "check", "--db", url), 1, "FOUND unknown-status", "status PENDING (1 row)", "INV-9020 (invoice-consumer): PENDING")
			wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url), 1, "PENDING")
		})
	}
}

// TestCheckTiesDuplicatesToThePurge: a purge with a window inside the
// real redelivery horizon (the guard lowered with --horizon) deletes an
// event's row, the event comes again and is processed a second time:
// check reports the duplicate letters and names the purge run.
func TestCheckTiesDuplicatesToThePurge(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			d, err := inbox.DialectByName(backend)
			dbtest.Must(t, err, "dialect")
			ins := func(q string, args ...any) {
				t.Helper()
				_, err := db.Exec(d.Rebind(q), args...)
				dbtest.Must(t, err, "insert")
			}
			at := func(d time.Duration) string { return time.Now().UTC().Add(d).Format("2006-01-02 15:04:05") }
			processed := func(event, invoice, letter, when string) {
				ins(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT, ATTEMPTS, PAYLOAD_HASH) VALUES (?, 'invoice-consumer', 'PROCESSED', ?, ?, 1, ?)`, event, when, when, "h-"+event)
				ins(`INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES (?, ?, 'K-100', ?, ?)`, letter, invoice, event, when)
			}
			processed("ev-p1", "INV-P1", "L-1", at(-2*time.Hour))
			processed("ev-p2", "INV-P2", "L-3", at(-2*time.Hour))
			wantCode(t, inboxctl(t, "", "check", "--db", url), 0, "ok    purged-then-redelivered")
			wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "1h", "--horizon", "1h"), 0, "deleted 2 terminal row(s)")
			// The broker redelivers ev-p1: a new row, a second letter.
			processed("ev-p1", "INV-P1", "L-2", at(time.Second))
			// And ev-p2, whose second letter the business table refused:
			// its row is a technical failure.
			ins(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, REASON_CODE, CREATED_AT, ATTEMPTS) VALUES ('ev-p2', 'invoice-consumer', 'TECHNICAL_FAILURE', 'CONSTRAINT_VIOLATION', ?, 1)`, at(time.Second))
			// A later purge run, after both came again, with another
			// window: the duplicates are not its doing, and stay tied to
			// the first run (the last before their rows were created).
			ins(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT, ATTEMPTS) VALUES ('ev-p3', 'invoice-consumer', 'PROCESSED', ?, ?, 1)`, at(-3*time.Hour), at(-3*time.Hour))
			time.Sleep(2 * time.Second) // the run's time is after the rows created at +1s
			wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "90m", "--horizon", "90m"), 0, "deleted 1 terminal row(s)")
			r := inboxctl(t, "", "check", "--db", url)
			wantCode(t, r, 1, "FOUND duplicate-letters", "INV-P1: 2 rows, event ids ev-p1, ev-p1",
				"FOUND purged-then-redelivered", "INV-P1: 2 rows for event ev-p1; its first inbox row was deleted by the purge of ",
				"(window 1h0m0s, horizon 1h0m0s: rows finished before ", "deleted, 2 rows); processed again at ",
				"ev-p2: has its business row, but its inbox row, created again at ", "is TECHNICAL_FAILURE (CONSTRAINT_VIOLATION): it ran a second time")
			t.Logf("check:\n%s", r.stdout)
		})
	}
}

// TestAdoptedInvoiceEndToEnd is issue 23's reproduction with inboxctl on
// ActiveMQ: a legacy table with INV-9006 FAILED, migrated with a mapping;
// INV-9006 published without eventId is processed once (a resend is a
// duplicate); a row the legacy bean writes later in a status nobody knows
// makes its message a dead letter (UNKNOWN_STATUS, logged as an error naming
// --map-status, the row left), which after a mapping replays and is
// processed once; and a purge inside the redelivery horizon lets INV-9006
// run a second time (its letter, keyed by the event, is refused: a
// technical failure), which check ties to that purge.
func TestAdoptedInvoiceEndToEnd(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.SQLite)
	url := dbURL(t, db)
	seedAdopted(t, db)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.adopt.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--seed-customers"), 1, "FAILED")
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--seed-customers", "--map-status", "FAILED=TECHNICAL_FAILURE,IN_PROGRESS=TECHNICAL_FAILURE,processed=PROCESSED"), 0, "schema version 0 -> 10")

	line := func(inv string) string {
		return `{"headers":{"correlationId":"order-` + inv[4:] + `"},"body":{"invoiceNo":"` + inv + `","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}}` + "\n"
	}
	publish := func(lines string) {
		t.Helper()
		wantCode(t, inboxctl(t, lines, "publish", "--broker", broker, "--queue", queue, "--file", "-", "--allow-invalid"), 0, "published")
	}
	letters := func(inv string) int {
		var n int
		dbtest.Must(t, db.QueryRow(`SELECT COUNT(*) FROM shipping_letters WHERE invoice_no = ?`, inv).Scan(&n), "letters")
		return n
	}
	status := func(id string) string {
		var st string
		dbtest.Must(t, db.QueryRow(`SELECT STATUS FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = ?`, id).Scan(&st), "status")
		return st
	}
	publish(line("INV-9006") + line("INV-9006"))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", url, "--broker", broker, "--queue", queue, "--dlq", dlqName, "--log-format", "json",
		"--event-id-from", "json:invoiceNo", "--log-level", "debug")
	settled := func(n int) func() bool {
		return func() bool { return strings.Count(logs.String(), `"msg":"settled"`) >= n }
	}
	waitFor(t, "both copies of INV-9006 settled", settled(2), logs)
	if status("INV-9006") != "PROCESSED" || letters("INV-9006") != 1 || !strings.Contains(logs.String(), `"outcome":"DUPLICATE"`) {
		t.Fatalf("INV-9006: %s, %d letter(s); want PROCESSED, 1 letter, the copy a duplicate\n%s", status("INV-9006"), letters("INV-9006"), logs)
	}

	// The legacy bean, still running, leaves a row in a status of its own.
	_, err := db.Exec(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID) VALUES ('INV-9012', 'invoice-consumer', 'PENDING', 'order-9012')`)
	dbtest.Must(t, err, "legacy row")
	publish(line("INV-9012"))
	waitFor(t, "INV-9012 settled", settled(3), logs)
	for _, w := range []string{`"level":"ERROR","msg":"settled"`, `"event_id":"INV-9012"`, `"action":"dead-letter"`, `"status":"PENDING"`, `"reason":"UNKNOWN_STATUS"`, "inboxctl migrate --map-status 'PENDING=TECHNICAL_FAILURE'"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %s:\n%s", w, logs)
		}
	}
	if status("INV-9012") != "PENDING" || letters("INV-9012") != 0 {
		t.Errorf("INV-9012: %s, %d letter(s); want the row left PENDING, no letter", status("INV-9012"), letters("INV-9012"))
	}
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName), 0, "INV-9012", "UNKNOWN_STATUS")
	wantCode(t, inboxctl(t, "", "check", "--db", url), 1, "FOUND unknown-status", "PENDING")
	// A replay before the mapping keeps the dead letter.
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "INV-9012", "--db", url), 1, "map it first")
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", "PENDING=TECHNICAL_FAILURE"), 0, "mapped status PENDING -> TECHNICAL_FAILURE (1 row(s)")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "INV-9012", "--db", url, "--operator", "carol"), 0, "replayed INV-9012")
	wantCode(t, inboxctl(t, "", "audit", "--db", url, "--event-id", "INV-9012"), 0, "operator actions on event id INV-9012: 1", "carol", "dlq-replay", "queue "+dlqName+", --event-id INV-9012")
	wantCode(t, inboxctl(t, "", "audit", "--db", url, "--operator", "carol"), 0, "actions of operator carol: 1", "dlq-replay", "INV-9012")
	waitFor(t, "the replayed INV-9012 processed", func() bool { return status("INV-9012") == "PROCESSED" }, logs)
	if letters("INV-9012") != 1 {
		t.Errorf("INV-9012 has %d letters after its replay, want 1", letters("INV-9012"))
	}

	// A purge inside the redelivery horizon, then the broker brings
	// INV-9006 again: processed a second time, and check says why.
	time.Sleep(1100 * time.Millisecond)
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "1s", "--horizon", "1s"), 0, "deleted")
	n := strings.Count(logs.String(), `"msg":"settled"`)
	publish(line("INV-9006"))
	waitFor(t, "INV-9006 again", settled(n+1), logs)
	// It runs again; its second letter, keyed by the event, is refused.
	if status("INV-9006") != "TECHNICAL_FAILURE" || letters("INV-9006") != 1 || !strings.Contains(logs.String(), `UNIQUE constraint failed: shipping_letters.letter_id`) {
		t.Fatalf("INV-9006 after the purge: row %s, %d letter(s); want it run again and its letter refused\n%s", status("INV-9006"), letters("INV-9006"), logs)
	}
	r := inboxctl(t, "", "check", "--db", url)
	wantCode(t, r, 1, "FOUND purged-then-redelivered", "INV-9006: has its business row, but its inbox row, created again at ",
		"after the purge of ", "(window 1s, horizon 1s", "is TECHNICAL_FAILURE (CONSTRAINT_VIOLATION)")
	t.Logf("check:\n%s", r.stdout)
	stopRun(t, run, logs)
}
