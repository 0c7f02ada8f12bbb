package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
)

const rabbitBroker = "amqp://guest:guest@127.0.0.1:5672/"

// plantDeadLetters writes, for each event id, a DEAD_LETTERED row of
// consumer c with the error text and last change at, and its dead letter
// (an inboxkit envelope for queue dest, body the event id) into the
// RabbitMQ queue dlqName.
func plantDeadLetters(t *testing.T, db *dbtest.DB, dlqName, dest, errText string, at time.Time, ids ...string) {
	t.Helper()
	ts := at.UTC().Format("2006-01-02 15:04:05.000000")
	var lines strings.Builder
	for _, id := range ids {
		execSQL(t, db, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, REASON_CODE, ERROR_CLASS, LAST_ERROR, ATTEMPTS, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT)
			VALUES (?, 'c', 'DEAD_LETTERED', 'MAX_ATTEMPTS', 'TECHNICAL', ?, 5, ?, ?, ?)`, id, errText, ts, ts, ts)
		h := map[string]string{"eventId": id, "inboxkit-dlq-reason": "MAX_ATTEMPTS", "inboxkit-dlq-class": "TECHNICAL", "inboxkit-dlq-consumer": "c",
			"inboxkit-dlq-event-id": id, "inboxkit-dlq-original-destination": dest, "inboxkit-dlq-error": errText, "inboxkit-dlq-attempts": "5",
			"inboxkit-dlq-time": at.UTC().Format(time.RFC3339Nano)}
		line, err := json.Marshal(map[string]any{"headers": h, "body": id})
		if err != nil {
			t.Fatal(err)
		}
		lines.Write(append(line, '\n'))
	}
	wantCode(t, inboxctl(t, lines.String(), "publish", "--broker", rabbitBroker, "--queue", dlqName, "--file", "-"), 0, fmt.Sprintf("published %d", len(ids)))
}

// drainRabbit takes every message of queue off RabbitMQ and counts them by
// body, with the time each was taken.
func drainRabbit(t *testing.T, queue string) map[string]int {
	t.Helper()
	conn, err := amqp.Dial(rabbitBroker)
	if err != nil {
		t.Fatalf("RabbitMQ not reachable at 127.0.0.1:5672 (start it with rabbitmq-server -detached): %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got[string(m.Body)]++
	}
}

// groupOf returns the id of the failure group whose fingerprint is fp.
func groupOf(t *testing.T, url, fp string, extra ...string) string {
	t.Helper()
	r := inboxctl(t, "", append([]string{"failures", "groups", "--db", url, "-o", "json"}, extra...)...)
	var rep failureGroupsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("failures groups: %v\n%s", err, r)
	}
	for _, g := range rep.Groups {
		if g.Fingerprint == fp {
			return g.ID
		}
	}
	t.Fatalf("no group %q in\n%s", fp, r)
	return ""
}

// reopenedItems returns the event ids of the replay items in state
// REOPENED (reopened, not marked SENT), in order.
func reopenedItems(ctx context.Context, t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT EVENT_ID FROM INBOXKIT_REPLAY_ITEM WHERE STATE = 'REOPENED' ORDER BY EVENT_ID`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// staleTime is the stale time of a replay job's heartbeat in these tests
// (staleEnv sets it for inboxctl).
const staleTime = 4 * time.Second

var staleEnv = []string{"INBOXKIT_REPLAY_STALE=" + staleTime.String()}

// A paced group replay killed with SIGKILL halfway and resumed replays
// every event of the group exactly once at the broker, and none of the
// others; a new replay of the queue is refused while the job is
// unfinished. PostgreSQL and RabbitMQ.
func TestReplayJobKillAndResume(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	url := dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0, "schema version 0 -> 10")
	queue := fmt.Sprintf("inboxctl.replayjob.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	rabbittest.Declare(t, queue)
	rabbittest.Declare(t, dlqName)
	const n = 30
	at := time.Now().Add(-time.Hour)
	// Interleaved: the unselected dead letters lie between the selected.
	for i := 1; i <= n; i += 10 {
		plantDeadLetters(t, db, dlqName, queue, "cause A", at, ids("a", i, i+9)...)
		plantDeadLetters(t, db, dlqName, queue, "cause B", at, ids("b", i/10*3+1, i/10*3+3)...)
	}
	group := groupOf(t, url, "cause A")
	// A dry run sees every dead letter once, although RabbitMQ puts each
	// one handed back at the head of the queue.
	r := inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--group", group, "--dry-run")
	wantCode(t, r, 0, "would replay a-1\n", "would replay a-30\n", "dry run, nothing changed: 30 would be replayed; 39 left")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startCommandEnv(ctx, t, staleEnv, "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--group", group, "--rate", "5/s", "--operator", "erin")
	sent := func() int {
		var k int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOXKIT_REPLAY_ITEM WHERE STATE = 'SENT'`).Scan(&k); err != nil {
			return -1
		}
		return k
	}
	for deadline := time.Now().Add(60 * time.Second); sent() < n/2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replay did not send %d events in 60 s:\n%s", n/2, logs)
		}
	}
	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the replay was not killed: %v\n%s", err, logs)
	}
	killedAt, killed := sent(), time.Now()
	r = inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs")
	wantCode(t, r, 0, "replay jobs of INBOX_EVENT_PROCESSING: 1", "RUNNING", "--resume 1")
	t.Logf("after kill -9 at %d of %d sent, dlq replay --jobs:\n%s", killedAt, n, r.stdout)
	var running []inbox.ReplayJob
	if err := json.Unmarshal([]byte(inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs", "-o", "json").stdout), &running); err != nil ||
		len(running) != 1 || running[0].Replayed != int64(killedAt) {
		t.Errorf("--jobs of the killed job: %+v %v; want %d replayed (its items)", running, err, killedAt)
	}
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all"), 2, "replay job 1 of "+dlqName+" is unfinished", "--resume 1")

	time.Sleep(time.Until(killed.Add(staleTime))) // the killed run's heartbeat goes stale
	r = inboxctlEnv(t, staleEnv, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1", "--operator", "erin")
	wantCode(t, r, 0, "replay job 1 DONE: 30 replayed in all its runs, 0 left with a reason, 0 failed again")
	t.Logf("dlq replay --resume 1:\n%s%s", r.stdout, r.stderr)
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1"), 0, "replay job 1 is DONE already")

	got := drainRabbit(t, queue)
	for _, id := range ids("a", 1, n) {
		if got[id] != 1 {
			t.Errorf("%s reached the broker %d times, want 1", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("the broker got %d distinct messages, want the %d of the group: %v", len(got), n, got)
	}
	left := drainRabbit(t, dlqName)
	if len(left) != 9 || left["b-1"] != 1 {
		t.Errorf("the DLQ holds %v, want the 9 dead letters of cause B", left)
	}
	var reopened, items int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'TECHNICAL_FAILURE' AND REPLAY_COUNT = 1`).Scan(&reopened); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOXKIT_REPLAY_ITEM WHERE JOB_ID = 1 AND STATE = 'SENT'`).Scan(&items); err != nil {
		t.Fatal(err)
	}
	if reopened != n || items != n {
		t.Errorf("%d rows reopened once, %d items sent; want %d and %d", reopened, items, n, n)
	}
	r = inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs", "-o", "json")
	var jobs []inbox.ReplayJob
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 || jobs[0].State != inbox.JobDone || jobs[0].Replayed != n || jobs[0].Operator != "erin" {
		t.Errorf("jobs: %v\n%s", err, r)
	}
	// The killed run recorded no action (the job row names its operator);
	// the resume records what it sent.
	wantCode(t, inboxctl(t, "", "audit", "--db", url, "--operator", "erin"), 0, "actions of operator erin: 1", "job 1: --group "+group, "(resumed)")
}

// A job replaying events that fail again stops at the threshold, a count
// (N) or a percentage (P%, judged after 20 events), is marked STOPPED with
// the reason naming the figure, exits 1, and leaves the rest on the queue.
// PostgreSQL, RabbitMQ, the invoice consumer of inboxctl run (poison
// messages are dead-lettered at once, so a replay fails again).
func TestReplayJobStopsOnFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, flag string
		n, min     int
		want       string
	}{
		{"count", "3", 20, 3, "failed again (--stop-after-failures 3)"},
		{"percentage", "50%", 30, 20, "%, more than 50% (--stop-after-failures 50%, judged after 20 events)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, dbtest.Postgres)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--seed-customers"), 0)
			queue := fmt.Sprintf("inboxctl.replaystop.%s.%d", tc.name, time.Now().UnixNano())
			dlqName := "DLQ." + queue
			rabbittest.Declare(t, queue)
			rabbittest.Declare(t, dlqName)
			n := tc.n
			wantCode(t, inboxctl(t, poisonLines("st", n), "publish", "--broker", rabbitBroker, "--queue", queue, "--file", "-"), 0, fmt.Sprintf("published %d", n))
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			run, logs := startRun(ctx, t, "--db", url, "--broker", rabbitBroker, "--queue", queue, "--log-format", "json")
			waitFor(t, "the dead letters", func() bool { return strings.Count(logs.String(), `"action":"dead-letter"`) == n }, logs)

			r := inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all", "--rate", "10/s", "--stop-after-failures", tc.flag)
			wantCode(t, r, 1, "replay job 1 STOPPED", tc.want, "replay job 1 stopped:", "--resume 1")
			t.Logf("dlq replay --stop-after-failures %s:\n%s%s", tc.flag, r.stdout, r.stderr)
			stopRun(t, run, logs)
			r = inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs", "-o", "json")
			var jobs []inbox.ReplayJob
			if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 {
				t.Fatalf("jobs: %v\n%s", err, r)
			}
			j := jobs[0]
			if j.State != inbox.JobStopped || j.FailedAgain < 3 || j.Replayed < int64(tc.min) || !strings.Contains(j.StopReason, tc.want) {
				t.Errorf("job after the stop: %+v", j)
			}
			// What was not replayed is still dead-lettered, with its dead letter.
			var dead int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'DEAD_LETTERED' AND REPLAY_COUNT = 0`).Scan(&dead); err != nil {
				t.Fatal(err)
			}
			if dead != n-int(j.Replayed) {
				t.Errorf("%d rows never replayed, want %d", dead, n-int(j.Replayed))
			}
			wantCode(t, inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs"), 0, "STOPPED", "--stop-after-failures "+tc.flag)
		})
	}
}

// --stop-after-failures reads N or P%, and refuses anything else naming
// both forms.
func TestParseStopAfter(t *testing.T) {
	for _, tc := range []struct {
		in  string
		n   int
		pct float64
		bad bool
	}{{"", 0, 0, false}, {"0", 0, 0, false}, {"10", 10, 0, false}, {"12.5%", 0, 12.5, false}, {"5%", 0, 5, false},
		{"-1", 0, 0, true}, {"ten", 0, 0, true}, {"0%", 0, 0, true}, {"100%", 0, 0, true}, {"x%", 0, 0, true}, {"%", 0, 0, true}} {
		n, pct, err := parseStopAfter(tc.in)
		if (err != nil) != tc.bad || n != tc.n || pct != tc.pct {
			t.Errorf("parseStopAfter(%q) = %d, %g, %v", tc.in, n, pct, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "10%") || !strings.Contains(err.Error(), tc.in)) {
			t.Errorf("parseStopAfter(%q): the error names neither the value nor the forms: %v", tc.in, err)
		}
	}
}

// plantedQueue makes a migrated PostgreSQL database, a RabbitMQ queue
// named after name and its dead-letter queue DLQ.<queue>, and n DEAD_LETTERED
// rows a-1 ... a-n of cause A with their dead letters.
func plantedQueue(t *testing.T, name string, n int) (db *dbtest.DB, url, queue, dlqName string) {
	t.Helper()
	db = dbtest.New(t, dbtest.Postgres)
	url = dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
	queue = fmt.Sprintf("inboxctl.%s.%d", name, time.Now().UnixNano())
	dlqName = "DLQ." + queue
	rabbittest.Declare(t, queue)
	rabbittest.Declare(t, dlqName)
	plantDeadLetters(t, db, dlqName, queue, "cause A", time.Now().Add(-time.Hour), ids("a", 1, n)...)
	return db, url, queue, dlqName
}

// Two runners of one job: a resume (and an abandon) while the job's
// process runs is refused with its heartbeat's age and the time to wait;
// killed with SIGKILL, the job is still refused until its heartbeat is
// stale (INBOXKIT_REPLAY_STALE, 6s here), then taken over: two resumes
// started at once, exactly one runs the job and the other is refused.
// Every event reaches the broker once, except what operations.md ("Replay
// jobs") leaves open: an event the killed process had published but not
// yet marked SENT (its item REOPENED at the kill) may reach it twice, the
// second copy from the resume. The kill lands in that window by chance
// (more often under load); the test logs the items REOPENED at the kill
// and what reached the broker of each. PostgreSQL, RabbitMQ.
func TestReplayJobOneRunner(t *testing.T) {
	t.Parallel()
	const n = 40
	db, url, queue, dlqName := plantedQueue(t, "replayone", n)
	const stale = 6 * time.Second
	env := []string{"INBOXKIT_REPLAY_STALE=" + stale.String()}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	sent := func() int {
		var k int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOXKIT_REPLAY_ITEM WHERE STATE = 'SENT'`).Scan(&k); err != nil {
			return -1
		}
		return k
	}
	run, logs := startCommandEnv(ctx, t, env, "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all", "--rate", "5/s")
	waitFor(t, "5 events sent", func() bool { return sent() >= 5 }, logs)
	held := []string{"replay job 1 is being run (heartbeat ", "; wait, or if that process is gone, retry after "}
	r := inboxctlEnv(t, env, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1")
	wantCode(t, r, 2, held...)
	t.Logf("--resume 1 while the job runs:\n%s", r.stderr)
	wantCode(t, inboxctlEnv(t, env, "", "dlq", "replay", "--db", url, "--abandon", "1"), 2, held...)
	wantCode(t, inboxctlEnv(t, env, "", "dlq", "replay", "--db", url, "--jobs"), 0, "job 1 is RUNNING (heartbeat ")
	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = run.Wait()
	killed := time.Now()
	r = inboxctlEnv(t, env, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1")
	if time.Since(killed) < stale-time.Second { // the refusal is certain only within the stale time
		wantCode(t, r, 2, held...)
	}
	killedAt := sent()
	// The items the killed process reopened but did not mark SENT: each
	// was published by it or not (killed between the reopen and the mark).
	openAtKill := map[string]bool{}
	for _, id := range reopenedItems(ctx, t, db) {
		openAtKill[id] = true
	}
	// What the killed process sent (a publish it made before the kill may
	// reach the queue after this drain: then it counts as the resume's).
	byKilled := drainRabbit(t, queue)
	time.Sleep(time.Until(killed.Add(stale)))

	type outcome struct {
		code int
		out  string
	}
	var runs []*exec.Cmd
	var outs []*lockedBuffer
	for range 2 {
		c, o := startCommandEnv(ctx, t, env, "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1")
		runs, outs = append(runs, c), append(outs, o)
	}
	var got []outcome
	for i, c := range runs {
		err := c.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, outcome{code, outs[i].String()})
	}
	slices.SortFunc(got, func(a, b outcome) int { return a.code - b.code })
	if got[0].code != 0 || !strings.Contains(got[0].out, "replay job 1 DONE: 40 replayed in all its runs") ||
		got[1].code != 2 || !strings.Contains(got[1].out, held[0]) {
		t.Fatalf("two resumes at once, after the kill at %d sent: want one DONE and one refused, got\n%+v", killedAt, got)
	}
	t.Logf("killed at %d of %d sent; two resumes at once: exit %d and %d; the refused one said: %s", killedAt, n, got[0].code, got[1].code, got[1].out)
	at := drainRabbit(t, queue)
	for id, k := range byKilled {
		at[id] += k
	}
	for id := range openAtKill {
		t.Logf("%s: REOPENED, not SENT at the kill; at the broker from the killed process %d, in all %d (2: killed between the broker's confirm and the mark)",
			id, byKilled[id], at[id])
	}
	for _, id := range ids("a", 1, n) {
		switch {
		case openAtKill[id] && (at[id] == 1 || at[id] == 2):
		case openAtKill[id]:
			t.Errorf("%s (REOPENED at the kill) reached the broker %d times, want 1, or 2 if the killed process had sent it", id, at[id])
		case at[id] != 1:
			t.Errorf("%s reached the broker %d times, want 1 (its item was not REOPENED at the kill)", id, at[id])
		}
	}
	if left := drainRabbit(t, dlqName); len(left) != 0 {
		t.Errorf("the DLQ still holds %v", left)
	}
}

// A runner paused (SIGSTOP) for longer than the stale time, its job taken
// over meanwhile by a resume, sends at most one more event when it goes on
// (SIGCONT): a write of its job follows each event, and that write is
// refused (the claim was lost), so it stops. PostgreSQL, RabbitMQ.
func TestReplayJobPausedRunnerStops(t *testing.T) {
	t.Parallel()
	db, url, queue, dlqName := plantedQueue(t, "replaypause", 30)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startCommandEnv(ctx, t, staleEnv, "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all", "--rate", "5/s")
	waitFor(t, "3 events sent", func() bool {
		var k int
		return db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOXKIT_REPLAY_ITEM WHERE STATE = 'SENT'`).Scan(&k) == nil && k >= 3
	}, logs)
	if err := run.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	t.Cleanup(func() { _ = run.Process.Signal(syscall.SIGCONT) })
	time.Sleep(time.Until(paused.Add(staleTime + time.Second)))
	before := drainRabbit(t, queue) // what it sent before the pause
	r := inboxctlEnv(t, staleEnv, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1")
	wantCode(t, r, 0, "replay job 1 DONE")
	t.Logf("--resume 1 while the first runner is paused:\n%s", r.stdout)
	byResume := drainRabbit(t, queue)
	if err := run.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := run.Wait()
	if err == nil || !strings.Contains(logs.String(), "claim was lost") {
		t.Errorf("the paused runner went on: %v, want its lost claim\n%s", err, logs)
	}
	after := drainRabbit(t, queue)
	t.Logf("the paused runner, woken: sent %v, then: %s", after, strings.TrimSpace(logs.String()))
	if len(after) > 1 {
		t.Errorf("the paused runner sent %d events after its job was taken over, want at most 1: %v", len(after), after)
	}
	for id, k := range after {
		if before[id]+byResume[id]+k > 2 {
			t.Errorf("%s reached the broker %d times", id, before[id]+byResume[id]+k)
		}
	}
}

// Abandon: refused while the job's process runs; after its kill and the
// stale time the job is ABANDONED, the action recorded, the events it
// reopened but did not mark sent listed (exit 1: to be checked), --jobs
// shows it, it is not resumed, and a new bulk replay of the queue is no
// longer refused. PostgreSQL, RabbitMQ.
func TestReplayJobAbandon(t *testing.T) {
	t.Parallel()
	db, url, _, dlqName := plantedQueue(t, "replayabandon", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	run, logs := startCommandEnv(ctx, t, staleEnv, "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all", "--rate", "5/s", "--operator", "erin")
	waitFor(t, "3 events sent", func() bool {
		var k int
		return db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOXKIT_REPLAY_ITEM WHERE STATE = 'SENT'`).Scan(&k) == nil && k >= 3
	}, logs)
	wantCode(t, inboxctlEnv(t, staleEnv, "", "dlq", "replay", "--db", url, "--abandon", "1", "--operator", "gus"), 2, "replay job 1 is being run (heartbeat ")
	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = run.Wait()
	killed := time.Now()
	// The state a kill between the broker's confirm and the mark leaves.
	execSQL(t, db, `UPDATE INBOXKIT_REPLAY_ITEM SET STATE = 'REOPENED', SENT_AT = NULL WHERE EVENT_ID = 'a-1'`)
	reopened := reopenedItems(ctx, t, db)
	time.Sleep(time.Until(killed.Add(staleTime)))

	r := inboxctlEnv(t, staleEnv, "", "dlq", "replay", "--db", url, "--abandon", "1", "--operator", "gus")
	want := []string{"replay job 1 ABANDONED (abandoned by gus)", fmt.Sprintf("%d event(s) reopened", len(reopened)), "a new bulk replay of " + dlqName + " may start"}
	for _, id := range reopened {
		want = append(want, "reopened, not sent: "+id+" (consumer c)")
	}
	wantCode(t, r, 1, want...)
	t.Logf("dlq replay --abandon 1:\n%s", r.stdout)
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--db", url, "--abandon", "1"), 2, "replay job 1 is ABANDONED")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1"), 2, "replay job 1 is ABANDONED (abandoned by gus)")
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--db", url, "--jobs"), 0, "ABANDONED", "abandoned by gus")
	wantCode(t, inboxctl(t, "", "audit", "--db", url, "--operator", "gus"), 0, "dlq-replay-abandon", "a-1", "job 1: --all")
	// A new bulk replay of the queue: not refused, it takes what is left.
	r = inboxctl(t, "", "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all")
	wantCode(t, r, 0, "replay job 2 DONE")
	if left := drainRabbit(t, dlqName); len(left) != 0 {
		t.Errorf("the DLQ still holds %v", left)
	}
}

// failures archive hides a group from failures groups and from the bulk
// replays until failures restore; --since and --until select by the
// failure's last time, --dry-run prints exactly the events and changes
// nothing. Every database (MariaDB, PostgreSQL, SQLite), RabbitMQ.
func TestFailuresArchiveAndTimeWindow(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0, "schema version 0 -> 10")
			queue := fmt.Sprintf("inboxctl.archive.%s.%d", backend, time.Now().UnixNano())
			dlqName := "DLQ." + queue
			rabbittest.Declare(t, dlqName)
			t0 := time.Date(2026, 1, 31, 8, 0, 0, 0, time.UTC)
			plantDeadLetters(t, db, dlqName, queue, "customer K-1 unknown", t0, "x-1", "x-2")
			plantDeadLetters(t, db, dlqName, queue, "customer K-7 unknown", t0.Add(time.Hour), "x-3")
			plantDeadLetters(t, db, dlqName, queue, "timeout after 30 s", t0.Add(2*time.Hour), "y-1", "y-2")
			gx, gy := groupOf(t, url, "customer <id> unknown"), groupOf(t, url, "timeout after <n> s")
			replay := func(args ...string) result {
				return inboxctl(t, "", append([]string{"dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--dry-run"}, args...)...)
			}

			r := replay("--since", "2026-01-31T08:30:00Z", "--until", "2026-01-31T10:00:00Z")
			wantCode(t, r, 0, "would replay x-3\n", "dry run, nothing changed: 1 would be replayed")
			r = replay("--group", gx, "--until", "2026-01-31T08:30:00Z")
			wantCode(t, r, 0, "would replay x-1\n", "would replay x-2\n", "2 would be replayed")
			wantCode(t, replay("--reason", "MAX_ATTEMPTS", "--since", "2026-01-31T10:00:00Z"), 0, "would replay y-1\n", "would replay y-2\n", "2 would be replayed")
			wantCode(t, replay("--since", "2026-01-31T11:00:00Z", "--until", "2026-01-31T10:00:00Z"), 2, "is not before --until")

			wantCode(t, inboxctl(t, "", "failures", "archive", "--db", url, "--group", gx, "--operator", "fay"), 0, "archived group "+gx, "3 row(s)")
			r = inboxctl(t, "", "failures", "groups", "--db", url)
			wantCode(t, r, 0, gy, "2 failed row(s) in 1 group(s)")
			if strings.Contains(r.stdout, gx) {
				t.Errorf("the archived group is listed:\n%s", r)
			}
			wantCode(t, inboxctl(t, "", "failures", "groups", "--db", url, "--archived"), 0, "archived failures", gx, "3 failed row(s) in 1 group(s)")
			r = replay("--all")
			wantCode(t, r, 0, "would replay y-1\n", "would replay y-2\n", "2 would be replayed; 5 left")
			if strings.Contains(r.stdout, "x-") {
				t.Errorf("--all takes archived failures:\n%s", r)
			}
			wantCode(t, replay("--group", gx), 2, "no such failure group")
			wantCode(t, inboxctl(t, "", "failures", "archive", "--db", url, "--group", gx), 2, "no such failure group")

			wantCode(t, inboxctl(t, "", "failures", "restore", "--db", url, "--group", gx, "--operator", "fay"), 0, "restored group "+gx, "3 row(s)")
			wantCode(t, replay("--all"), 0, "5 would be replayed")
			wantCode(t, inboxctl(t, "", "failures", "groups", "--db", url), 0, gx, gy, "5 failed row(s) in 2 group(s)")
			r = inboxctl(t, "", "audit", "--db", url, "--operator", "fay")
			wantCode(t, r, 0, "actions of operator fay: 2", "failures-archive", "failures-restore", "x-1 x-2 x-3")
			var jobs int
			if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM INBOXKIT_REPLAY_JOB`).Scan(&jobs); err != nil || jobs != 0 {
				t.Errorf("dry runs recorded %d job(s): %v", jobs, err)
			}
			if got := drainRabbit(t, dlqName); len(got) != 5 {
				t.Errorf("the dry runs changed the DLQ: %v", got)
			}
		})
	}
}

// The two crash windows of a job, each hit for sure by a failpoints build
// (the process sends itself SIGKILL there) and resumed by the plain
// binary: killed after the reopen, before the send, every event reaches
// the broker once; killed after the broker's confirm, before the mark
// SENT, that event reaches it twice (the documented exception) and every
// other once; killed after the mark, before the dead letter's removal,
// the resume removes it without a send. No event is reopened twice.
// PostgreSQL, RabbitMQ.
func TestReplayJobCrashWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short skips the failpoints build of inboxctl")
	}
	t.Parallel()
	bin := t.TempDir() + "/inboxctl-failpoints"
	build := exec.Command("go", "build", "-tags", "failpoints", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags failpoints: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		point string
		twice int // events at the broker twice
		want  string
	}{{"replay-after-reopen", 0, "5 replayed"}, {"replay-after-send", 1, "5 replayed"}, {"replay-after-mark", 0, "removed 1 dead letter(s) without a send"}} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, dbtest.Postgres)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			queue := fmt.Sprintf("inboxctl.replaycrash.%d", time.Now().UnixNano())
			dlqName := "DLQ." + queue
			rabbittest.Declare(t, queue)
			rabbittest.Declare(t, dlqName)
			plantDeadLetters(t, db, dlqName, queue, "cause A", time.Now().Add(-time.Hour), ids("a", 1, 5)...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all")
			cmd.Env = append(cleanEnv(), "INBOXKIT_FAILPOINTS="+tc.point+":1")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "inboxkit failpoint: "+tc.point) {
				t.Fatalf("the failpoint did not kill the replay: %v\n%s", err, out)
			}
			time.Sleep(staleTime) // the killed run's heartbeat goes stale
			r := inboxctlEnv(t, staleEnv, "", "dlq", "replay", "--broker", rabbitBroker, "--db", url, "--resume", "1")
			wantCode(t, r, 0, "replay job 1 DONE: 5 replayed in all its runs", tc.want)
			t.Logf("killed at %s, then dlq replay --resume 1:\n%s", tc.point, r.stdout)
			got := drainRabbit(t, queue)
			twice := 0
			for _, id := range ids("a", 1, 5) {
				switch got[id] {
				case 1:
				case 2:
					twice++
				default:
					t.Errorf("%s reached the broker %d times", id, got[id])
				}
			}
			if twice != tc.twice || len(got) != 5 {
				t.Errorf("at the broker: %v; want every event once, %d of them twice", got, tc.twice)
			}
			var once int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE REPLAY_COUNT = 1`).Scan(&once); err != nil || once != 5 {
				t.Errorf("%d rows reopened exactly once (%v), want 5", once, err)
			}
			if left := drainRabbit(t, dlqName); len(left) != 0 {
				t.Errorf("the DLQ still holds %v", left)
			}
		})
	}
}

// The rate of a paced replay as the receiver sees it: 500 dead letters
// replayed with --rate 50/s into a RabbitMQ queue a consumer reads,
// stamped on arrival. A measurement, not a test (no assertion on time):
// INBOXKIT_MEASURE_REPLAY=1 go test ./cmd/inboxctl/ -run TestReplayRateAtBroker -v
func TestReplayRateAtBroker(t *testing.T) {
	if os.Getenv("INBOXKIT_MEASURE_REPLAY") == "" {
		t.Skip("a measurement: INBOXKIT_MEASURE_REPLAY=1 runs it")
	}
	for _, rate := range []string{"50/s", ""} {
		measureReplayRate(t, rate)
	}
}

// measureReplayRate replays 500 dead letters at rate ("": no limit) and
// logs the arrival rate at a consumer of the destination queue.
func measureReplayRate(t *testing.T, rate string) {
	db := dbtest.New(t, dbtest.Postgres)
	url := dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
	queue := fmt.Sprintf("inboxctl.replayrate.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	rabbittest.Declare(t, queue)
	rabbittest.Declare(t, dlqName)
	const n = 500
	plantDeadLetters(t, db, dlqName, queue, "cause A", time.Now().Add(-time.Hour), ids("a", 1, n)...)
	conn, err := amqp.Dial(rabbitBroker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan []time.Time)
	go func() {
		var at []time.Time
		for range ds {
			at = append(at, time.Now())
			if len(at) == n {
				break
			}
		}
		arrived <- at
	}()
	start := time.Now()
	args := []string{"dlq", "replay", "--broker", rabbitBroker, "--queue", dlqName, "--db", url, "--all"}
	if rate != "" {
		args = append(args, "--rate", rate)
	}
	r := inboxctl(t, "", args...)
	wantCode(t, r, 0, "500 replayed")
	took := time.Since(start)
	at := <-arrived
	gaps := make([]time.Duration, 0, n-1)
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	slices.Sort(gaps)
	span := at[len(at)-1].Sub(at[0])
	perSecond := map[int]int{}
	for _, a := range at {
		perSecond[int(a.Sub(at[0])/time.Second)]++
	}
	var buckets []string
	for s := 0; s <= int(span/time.Second); s++ {
		buckets = append(buckets, fmt.Sprint(perSecond[s]))
	}
	t.Logf("--rate %q, %d events: command %.2fs; at the receiver first to last %.3fs = %.2f/s over %d gaps; gap p50 %s p99 %s max %s min %s; per second: %s",
		rate, len(at), took.Seconds(), span.Seconds(), float64(len(at)-1)/span.Seconds(), len(gaps), gaps[len(gaps)/2].Round(time.Microsecond),
		gaps[len(gaps)*99/100].Round(time.Microsecond), gaps[len(gaps)-1].Round(time.Microsecond), gaps[0].Round(time.Microsecond), strings.Join(buckets, " "))
}

// Two new bulk replays of one queue started at the same moment both pass
// unfinishedJob's check; the later one (the higher id) withdraws once it
// is recorded, and the earlier one goes on.
func TestReplayJobYieldsToAnEarlierJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, "sqlite")
	st, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, st.Migrate(ctx), "migrate")
	first, err := st.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: "{}", Operator: "ann"})
	dbtest.Must(t, err, "first job")
	second, err := st.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: "{}", Operator: "bob"})
	dbtest.Must(t, err, "second job")
	other, err := st.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.other", Selection: "{}", Operator: "cy"})
	dbtest.Must(t, err, "a job of another queue")

	if err := yieldToEarlierJob(ctx, st, &first); err != nil {
		t.Fatalf("the earlier job was withdrawn: %v", err)
	}
	if err := yieldToEarlierJob(ctx, st, &other); err != nil {
		t.Fatalf("a job of another queue was withdrawn: %v", err)
	}
	err = yieldToEarlierJob(ctx, st, &second)
	if err == nil || !strings.Contains(err.Error(), "replay job 1 of DLQ.q started at the same moment as this one (job 2, withdrawn)") {
		t.Fatalf("the later job was not withdrawn naming the earlier: %v", err)
	}
	for id, want := range map[int64]string{1: inbox.JobRunning, 2: inbox.JobAbandoned, 3: inbox.JobRunning} {
		j, err := st.ReplayJob(ctx, id)
		dbtest.Must(t, err, "job %d", id)
		if j.State != want {
			t.Errorf("job %d is %s, want %s (%s)", id, j.State, want, j.StopReason)
		}
	}
}
