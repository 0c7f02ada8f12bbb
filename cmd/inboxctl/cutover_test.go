package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/outbox"
)

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

func writeReport(t *testing.T, path string, events, unexpected int64, span time.Duration) {
	t.Helper()
	now := time.Now().UTC()
	rep := golden.ReconcileReport{Legacy: "legacy", Shadow: "shadow", GeneratedAt: now,
		Counts: golden.Counts{Events: events, Identical: events - unexpected, Unexpected: unexpected},
		Span:   &golden.Span{From: now.Add(-span), To: now}}
	for i := range unexpected {
		rep.UnexpectedEvents = append(rep.UnexpectedEvents, fmt.Sprintf("E-%d", i))
	}
	b, err := json.Marshal(rep)
	dbtest.Must(t, err, "report")
	dbtest.Must(t, os.WriteFile(path, b, 0o644), "write report")
}

// TestCutoverCheck rehearses the switch-over: every check fails, each is
// fixed the way its fix line says, and then all hold (exit 0).
func TestCutoverCheck(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	ctx := context.Background()
	db := dbtest.New(t, dbtest.SQLite)
	url := dbURL(t, db)
	broker := "stomp://" + stompAddr
	dlqName := fmt.Sprintf("inboxctl.test.cutover.%d.DLQ", time.Now().UnixNano())
	report := filepath.Join(t.TempDir(), "diff.json")

	// The legacy table, not yet adopted, with a status the machine does
	// not know.
	dbtest.SeedLegacy(t, db, "2026-01-05 10:00:00", dbtest.LegacyRow{EventID: "old-1", Status: "FAILED"})
	// An outbox message nobody sent for an hour.
	ob, err := outbox.New(db.DB, inbox.SQLite, outbox.Config{Clock: fixedClock(time.Now().Add(-time.Hour))})
	dbtest.Must(t, err, "outbox")
	_, err = ob.Migrate(ctx)
	dbtest.Must(t, err, "outbox migrate")
	tx, err := db.BeginTx(ctx, nil)
	dbtest.Must(t, err, "begin")
	_, err = ob.Add(inboxkit.ContextWithMessage(ctx, inboxkit.Message{ID: "E-1"}), tx, outbox.Message{ID: "m-1", Destination: "letters", Body: []byte("{}")})
	dbtest.Must(t, err, "add")
	dbtest.Must(t, tx.Commit(), "commit")
	// The legacy dead-letter queue: one message with an event id, one
	// without (the producer never set one).
	lines := `{"headers":{"eventId":"dlq-1"},"body":{"invoiceNo":"INV-D1"}}` + "\n" + `{"headers":{},"body":{"invoiceNo":"INV-D2"}}` + "\n"
	wantCode(t, inboxctl(t, lines, "publish", "--broker", broker, "--queue", dlqName, "--file", "-", "--allow-invalid"), 0, "published 2")
	t.Cleanup(func() { inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--all") })
	// A shadow diff with unexpected events.
	writeReport(t, report, 20000, 3, 8*24*time.Hour)

	args := func(extra ...string) []string {
		return append([]string{"cutover", "check", "--db", url, "--shadow-report", report, "--min-events", "10000", "--min-days", "7",
			"--redelivery-window", "1d", "--rollback-window", "7d", "--broker", broker, "--legacy-dlq", dlqName, "--outbox-max-age", "5m"}, extra...)
	}
	r := inboxctl(t, "", args("--retention", "2d")...)
	wantCode(t, r, 1,
		"✗ shadow-diff-clean", "3 unexpected", "E-0, E-1, E-2",
		"✗ inbox-adopted", "inboxctl migrate",
		"✗ retention-covers-windows", "shorter than 7d",
		"✗ legacy-dlq-replayable", "1 without an event id", "--event-id-from",
		"✗ outbox-relays-healthy", "older than --outbox-max-age",
		"0 of 5 checks hold")
	if n := strings.Count(r.stdout, "fix:"); n != 5 {
		t.Fatalf("want a fix per failing check, got %d\n%s", n, r)
	}
	t.Logf("before:\n%s", r.stdout)

	// Fixed one by one, as the fix lines say.
	writeReport(t, report, 20000, 0, 8*24*time.Hour)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--map-status", "FAILED=TECHNICAL_FAILURE"), 0)
	_, err = db.ExecContext(ctx, `UPDATE INBOXKIT_OUTBOX SET STATUS = 'SENT'`) // the relay caught up
	dbtest.Must(t, err, "relay")
	r = inboxctl(t, "", args("--retention", "14d")...)
	wantCode(t, r, 1, "✓ shadow-diff-clean", "✓ inbox-adopted", "✓ retention-covers-windows", "✗ legacy-dlq-replayable", "✓ outbox-relays-healthy", "4 of 5 checks hold")

	r = inboxctl(t, "", args("--retention", "14d", "--event-id-from", "header:eventId,json:invoiceNo")...)
	wantCode(t, r, 0, "✓ legacy-dlq-replayable", "holds 2 message(s)", "all 5 checks hold")
	t.Logf("after:\n%s", r.stdout)

	// JSON, and --skip: a skipped check is shown and not counted.
	r = inboxctl(t, "", append(args("--retention", "14d", "--skip", "legacy-dlq-replayable"), "-o", "json")...)
	wantCode(t, r, 0)
	var checks []cutoverCheck
	dbtest.Must(t, json.Unmarshal([]byte(r.stdout), &checks), "json %s", r.stdout)
	if len(checks) != 5 || !checks[3].Skipped || !checks[0].Holds {
		t.Fatalf("json checks %+v", checks)
	}

	// A report too small, too short or a calibration does not hold.
	writeReport(t, report, 500, 0, 8*24*time.Hour)
	wantCode(t, inboxctl(t, "", args("--retention", "14d", "--skip", "legacy-dlq-replayable")...), 1, "fewer than --min-events 10000")
	writeReport(t, report, 20000, 0, 2*24*time.Hour)
	wantCode(t, inboxctl(t, "", args("--retention", "14d", "--skip", "legacy-dlq-replayable")...), 1, "shorter than --min-days 7")
	wantCode(t, inboxctl(t, "", "cutover", "check", "--db", url), 2, "--retention, --redelivery-window and --rollback-window are required")
	wantCode(t, inboxctl(t, "", "cutover", "check", "--db", url, "--skip", "nope"), 2, `--skip "nope": not a check`)
}
