package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	wantCode(t, inboxctl(t, "", "--version"), 0, "inboxctl ", "revision ")
	wantCode(t, inboxctl(t, "", "version"), 0, "inboxctl ", "revision ")
	wantCode(t, inboxctl(t, "", "version", "-o", "json"), 0, `"version":`, `"revision":`)
	wantCode(t, inboxctl(t, "", "version", "-o", "yaml"), 2, `use text or json`)
}

func TestParseDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "720h": 720 * time.Hour, "0d": 0, "90m": 90 * time.Minute,
	} {
		if got, err := parseDays(in); err != nil || got != want {
			t.Errorf("parseDays(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "3x", "1d3x", "1.5d"} {
		if _, err := parseDays(in); err == nil {
			t.Errorf("parseDays(%q) accepted", in)
		}
	}
}

// DATABASE_URL is used when neither --db nor INBOXKIT_DB is given, and
// purge takes days.
func TestDatabaseURLAndDays(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	run := func(env []string, args ...string) result { return inboxctlEnv(t, env, "", args...) }
	wantCode(t, run([]string{"DATABASE_URL=" + url}, "migrate"), 0, "migrated")
	r := run([]string{"DATABASE_URL=" + url}, "purge", "--older-than", "30d", "--dry-run")
	wantCode(t, r, 0, "older than 720h0m0s")
	r = run([]string{"DATABASE_URL=sqlite:/nonexistent/dir/x.db", "INBOXKIT_DB=" + url}, "purge", "--older-than", "30d", "--dry-run")
	wantCode(t, r, 0, "would be deleted") // INBOXKIT_DB wins
	if !strings.Contains(inboxctl(t, "", "purge", "--help").stdout, "30d") {
		t.Error("purge --help does not mention days")
	}
}

// decodeJSON decodes r's stdout into v, failing the test with the transcript.
func decodeJSON(t *testing.T, r result, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r)
	}
}

// Issue 16.6: -o json (and --json) on purge, migrate, migrate status:
// stable field names, [] not null.
func TestJSONOutputPurgeMigrate(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "j.db")
	r := inboxctl(t, "", "migrate", "--db", url, "--no-invoice-tables", "--dry-run", "-o", "json")
	wantCode(t, r, 0, `"dryRun": true`, `"steps": [`, `"invoiceStatements": []`)
	r = inboxctl(t, "", "migrate", "--db", url, "-o", "json")
	wantCode(t, r, 0, `"from": 0`, `"invoiceTables": true`)
	var m struct {
		From, To int
		Steps    []struct{ Version int }
	}
	decodeJSON(t, r, &m)
	if m.To < 1 || len(m.Steps) != m.To {
		t.Errorf("migrate -o json: %+v\n%s", m, r)
	}
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--json"), 0, `"steps": []`, `"from": `+fmt.Sprint(m.To))
	wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url, "-o", "json"), 0, `"pending": []`, `"applied": [`)
	wantCode(t, inboxctl(t, "", "migrate", "status", "--db", url, "-o", "yaml"), 2, "use text or json")

	for _, args := range [][]string{{"-o", "json"}, {"--json"}} {
		r = inboxctl(t, "", append([]string{"purge", "--db", url, "--older-than", "30d"}, args...)...)
		wantCode(t, r, 0, `"rows": 0`, `"durationSeconds": `, `"olderThan": "720h0m0s"`, `"dryRun": false`)
	}
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "30d", "--dry-run", "-o", "json"), 0, `"dryRun": true`)
}

// Issue 16.6: dlq replay -o json: [] for nothing replayed, no HTML escaping.
func TestJSONOutputDLQReplay(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "r.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	broker := "embedded:" + filepath.Join(t.TempDir(), "js")
	wantCode(t, inboxctl(t, invoiceLine("a<b>&c", "corr-j", "INV-J1", "K-100")+"\n", "publish", "--broker", broker, "--queue", "DLQ.j<&>", "--file", "-"), 0)
	r := inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", "DLQ.j<&>", "--event-id", "a<b>&c", "--db", sqlite, "-o", "json")
	wantCode(t, r, 1, `"replayed": []`, `"queue": "DLQ.j<&>"`)
	var rep struct {
		Queue    string
		Replayed []string
		Left     []string
	}
	decodeJSON(t, r, &rep)
	if rep.Queue != "DLQ.j<&>" || rep.Replayed == nil || len(rep.Left) != 1 {
		t.Errorf("dlq replay -o json: %+v\n%s", rep, r)
	}
}

// Issue 16.6: "not found" (exit 1) and "unreachable" (exit 2) read apart,
// for the database (audit) and the broker (dlq replay).
func TestNotFoundVersusUnreachable(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "n.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	wantCode(t, inboxctl(t, "", "audit", "--db", sqlite, "--event-id", "ev-missing"), 1, "no row for event id ev-missing in INBOX_EVENT_PROCESSING")
	wantCode(t, inboxctl(t, "", "audit", "--db", sqlite, "--event-id", "ev-missing", "-o", "json"), 1, "no row for event id ev-missing")
	down := "postgres://app:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"
	wantCode(t, inboxctl(t, "", "audit", "--db", down, "--event-id", "ev-missing"), 2, "database postgres://app:xxxxx@127.0.0.1:1/", "unreachable: ", "check the URL and that the database runs")

	broker := "embedded:" + filepath.Join(t.TempDir(), "js")
	deadLetter := `{"headers":{"eventId":"ev-here","inboxkit-dlq-reason":"poison","inboxkit-dlq-event-id":"ev-here"},"body":{}}` + "\n"
	wantCode(t, inboxctl(t, deadLetter, "publish", "--broker", broker, "--queue", "DLQ.n", "--file", "-"), 0)
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", "DLQ.n", "--event-id", "ev-missing", "--db", sqlite), 1, `no dead letter with event id "ev-missing" in DLQ.n`)
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", "amqp://guest:guest@127.0.0.1:1/", "--queue", "DLQ.n", "--event-id", "ev-missing", "--db", sqlite), 2,
		"broker amqp://guest:xxxxx@127.0.0.1:1/ unreachable", "check the URL and that the broker runs")
}
