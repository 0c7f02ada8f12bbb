package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// dlq replay --group replays exactly the dead letters of a failure group,
// --reason those of a reason, --limit at most so many, --dry-run nothing;
// each run is recorded with its operator and selection.
func TestDLQReplaySelection(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.SQLite)
	sqlite := dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite, "--seed-customers"), 0)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.replaysel.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	wantCode(t, inboxctl(t, poisonLines("rs", 4), "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 4")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", sqlite, "--broker", broker, "--queue", queue, "--log-format", "json")
	waitFor(t, "4 dead letters", func() bool { return strings.Count(logs.String(), `"action":"dead-letter"`) == 4 }, logs)
	stopRun(t, run, logs)
	defer inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--all")

	// rs-4's row is made a group of its own: the group of rs-1..3 must not
	// take its dead letter.
	r := inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName, "-o", "json")
	var es []dlqEntry
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil || len(es) != 4 {
		t.Fatalf("dlq list: %v\n%s", err, r)
	}
	reason := es[0].Reason
	execSQL(t, db, `UPDATE INBOX_EVENT_PROCESSING SET LAST_ERROR = 'another cause' WHERE EVENT_ID = 'rs-4'`)
	r = inboxctl(t, "", "failures", "groups", "--db", sqlite, "-o", "json")
	var rep failureGroupsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Groups) != 2 || rep.Groups[0].Rows != 3 {
		t.Fatalf("failures groups: %v\n%s", err, r)
	}
	group := rep.Groups[0].ID

	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--group", "000000000000"), 2, `no such failure group "000000000000"`)
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--group", group, "--all"), 2, "needs one of")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--reason", reason, "--rate", "fast"), 2, `--rate "fast"`)
	r = inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--group", group, "--dry-run")
	wantCode(t, r, 0, "would replay rs-1", "would replay rs-2", "would replay rs-3", "dry run, nothing changed: 3 would be replayed; 4 left")
	if strings.Contains(r.stdout, "rs-4") {
		t.Errorf("the group's dry run takes rs-4:\n%s", r)
	}
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--reason", "NO_SUCH_REASON"), 0, "0 replayed; 4 left")
	r = inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--group", group, "--limit", "2", "--rate", "4/s", "--operator", "dave")
	wantCode(t, r, 0, "2 replayed; 2 left")
	r = inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--db", sqlite, "--group", group, "--operator", "dave")
	wantCode(t, r, 0, "1 replayed; 1 left")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName), 0, "rs-4", dlqName+": 1 message(s)")
	r = inboxctl(t, "", "audit", "--db", sqlite, "--operator", "dave")
	wantCode(t, r, 0, "actions of operator dave: 2", "--group "+group, "--limit 2, --rate 4/s")
	t.Logf("audit --operator dave:\n%s", r.stdout)
}

// poisonLines is a publish file of n undecodable invoices, event ids
// prefix-1 to prefix-n, correlation id c-prefix: each a dead letter.
func poisonLines(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"headers":{"eventId":"%s-%d","correlationId":"c-%s"},"body":"{not json"}`+"\n", prefix, i, prefix)
	}
	return b.String()
}
