package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// TestRunParkKey (issue 28, item 4): `run --order-key header:grp
// --on-poison park-key` on RabbitMQ and PostgreSQL. Key K-1's head is
// malformed (poison): it is dead-lettered, K-1's two later messages follow
// it to the DLQ with reason KEY_PARKED, in order, while K-2's run. A second
// process, started after the first stopped, receives a fourth message of
// K-1 and parks it too. stats, the console's overview and /api/stats show
// the parked key. The operator gives the
// head up (dlq drop --archive) and replays the key (dlq replay --key K-1):
// the three run in order and the key is no longer parked.
func TestRunParkKey(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	dbURL := dbURL(t, db)
	queue := fmt.Sprintf("inboxctl.park.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	t.Cleanup(func() { dropQueue(t, rabbitURL, queue); dropQueue(t, rabbitURL, dlqName) })
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, "", "run", "--db", dbURL, "--broker", rabbitURL, "--queue", queue, "--on-poison", "park-key"), exitUsage,
		"--on-poison park-key parks a key: give --order-key too")
	wantCode(t, inboxctl(t, "", "run", "--db", dbURL, "--broker", rabbitURL, "--queue", queue, "--order-key", "header:grp", "--on-poison", "park"), exitUsage,
		`--on-poison "park" is unknown`)

	msg := func(ev, key string, body string) string {
		if body == "" {
			body = `{"invoiceNo":"` + ev + `","customerNo":"K-100","amount":"1.00","currency":"EUR","issuedAt":"2026-01-05"}`
		}
		return `{"headers":{"eventId":"` + ev + `","correlationId":"park-` + key + `","grp":"` + key + `"},"body":` + body + "}\n"
	}
	publish := func(lines ...string) {
		t.Helper()
		wantCode(t, inboxctl(t, strings.Join(lines, ""), "publish", "--broker", rabbitURL, "--queue", queue, "--file", "-"), 0,
			fmt.Sprintf("published %d message(s)", len(lines)))
	}
	publish(msg("P-1", "K-1", `"{not json"`), msg("P-2", "K-1", ""), msg("Q-1", "K-2", ""), msg("P-3", "K-1", ""), msg("Q-2", "K-2", ""))
	type row struct {
		EventID, Status, Reason, OrderKey string
		ProcessedAt                       *time.Time
	}
	rows := func(key string) map[string]row {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--order-key", key, "--json")
		var rs []row
		_ = json.Unmarshal([]byte(r.stdout), &rs)
		out := map[string]row{}
		for _, x := range rs {
			out[x.EventID] = x
		}
		return out
	}
	is := func(rs map[string]row, ev, status, reason string) bool {
		return rs[ev].Status == status && rs[ev].Reason == reason
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--db", dbURL, "--broker", rabbitURL, "--queue", queue, "--dlq", dlqName, "--concurrency", "4",
		"--order-key", "header:grp", "--on-poison", "park-key", "--log-level", "debug"}
	run1, logs1 := startRun(ctx, t, args...)
	waitFor(t, "K-1 parked and K-2 processed", func() bool {
		k1, k2 := rows("K-1"), rows("K-2")
		return is(k1, "P-1", "DEAD_LETTERED", "MALFORMED_PAYLOAD") && is(k1, "P-2", "DEAD_LETTERED", "KEY_PARKED") &&
			is(k1, "P-3", "DEAD_LETTERED", "KEY_PARKED") && is(k2, "Q-1", "PROCESSED", "") && is(k2, "Q-2", "PROCESSED", "")
	}, logs1)
	stopRun(t, run1, logs1)

	// A second process receives a later message of the parked key.
	run2, logs2 := startRun(ctx, t, args...)
	publish(msg("P-4", "K-1", ""), msg("Q-3", "K-2", ""))
	waitFor(t, "P-4 parked by the second process, Q-3 processed", func() bool {
		return is(rows("K-1"), "P-4", "DEAD_LETTERED", "KEY_PARKED") && is(rows("K-2"), "Q-3", "PROCESSED", "")
	}, logs2)

	r := inboxctl(t, "", "stats", "--db", dbURL, "-o", "json")
	var st statsReport
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, r)
	}
	if len(st.ParkedKeys) != 1 || st.ParkedKeys[0].OrderKey != "K-1" || st.ParkedKeys[0].DeadLetters != 4 || st.ParkedKeys[0].Parked != 3 || st.ParkedKeys[0].Head != "P-1" {
		t.Errorf("stats parked keys %+v, want K-1 with 4 dead letters, 3 parked, head P-1", st.ParkedKeys)
	}
	wantCode(t, inboxctl(t, "", "stats", "--db", dbURL), 0, "parked keys", "K-1", "P-1", "dlq replay --queue DLQ --key KEY")
	console := startConsole(t, "--db", dbURL)
	code, page, _ := call(t, "GET", console+"/", nil, "")
	wantStatus(t, "GET /", code, 200, page)
	if !strings.Contains(page, `<table id="parked-keys">`) || !strings.Contains(page, "<td>K-1</td>") || !strings.Contains(page, `href="/messages/P-1"`) {
		t.Errorf("the console's overview does not list K-1 as parked:\n%s", page)
	}
	var api statsReport
	code, body, _ := call(t, "GET", console+"/api/stats", nil, "")
	wantStatus(t, "GET /api/stats", code, 200, body)
	if err := json.Unmarshal([]byte(body), &api); err != nil || !slices.Equal(api.ParkedKeys, st.ParkedKeys) {
		t.Errorf("/api/stats parked keys %+v (%v), want those of inboxctl stats %+v", api.ParkedKeys, err, st.ParkedKeys)
	}
	r = inboxctl(t, "", "dlq", "list", "--broker", rabbitURL, "--queue", dlqName, "-o", "json")
	var es []dlqEntry
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil {
		t.Fatalf("dlq list: %v\n%s", err, r)
	}
	var order []string
	for _, e := range es {
		order = append(order, e.EventID+"/"+e.Reason)
	}
	if want := []string{"P-1/MALFORMED_PAYLOAD", "P-2/KEY_PARKED", "P-3/KEY_PARKED", "P-4/KEY_PARKED"}; !slices.Equal(order, want) {
		t.Errorf("the DLQ holds %v, want %v", order, want)
	}

	// The head is given up; replaying it alone would park it again, so
	// the key's other dead letters need the head's row archived.
	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", rabbitURL, "--queue", dlqName, "--event-id", "P-1", "--archive"), exitUsage, "give --db URL")
	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", rabbitURL, "--queue", dlqName, "--event-id", "P-1", "--archive", "--db", dbURL), 0,
		"1 dropped", "1 inbox row(s) archived")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitURL, "--queue", dlqName, "--key", "K-1", "--since", "1h", "--db", dbURL), exitUsage,
		"dlq replay needs one of")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitURL, "--queue", dlqName, "--key", "K-1", "--db", dbURL), 0,
		"replayed P-2\nreplayed P-3\nreplayed P-4\n", "3 replayed")
	waitFor(t, "P-2, P-3, P-4 processed", func() bool {
		k1 := rows("K-1")
		return k1["P-2"].Status == "PROCESSED" && k1["P-3"].Status == "PROCESSED" && k1["P-4"].Status == "PROCESSED"
	}, logs2)
	stopRun(t, run2, logs2)
	k1 := rows("K-1")
	if !k1["P-2"].ProcessedAt.Before(*k1["P-3"].ProcessedAt) || !k1["P-3"].ProcessedAt.Before(*k1["P-4"].ProcessedAt) {
		t.Errorf("K-1 processed out of order: P-2 %s, P-3 %s, P-4 %s", k1["P-2"].ProcessedAt, k1["P-3"].ProcessedAt, k1["P-4"].ProcessedAt)
	}
	r = inboxctl(t, "", "stats", "--db", dbURL, "-o", "json")
	st = statsReport{}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.ParkedKeys) != 0 {
		t.Errorf("stats after the release: parked keys %+v (%v), want none", st.ParkedKeys, err)
	}
}
