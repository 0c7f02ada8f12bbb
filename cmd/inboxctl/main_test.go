package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

var binary string

// shortParallel is -test.parallel under -short when it is not given: the
// tests here mostly wait for the binary they start and for the brokers,
// not for the two cores GOMAXPROCS allows by default.
const shortParallel = 6

// TestMain builds inboxctl once; every test runs the binary.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if testing.Short() && !given {
		_ = flag.Set("test.parallel", strconv.Itoa(shortParallel))
	}
	dir, err := os.MkdirTemp("", "inboxctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "inboxctl")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build inboxctl: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// inboxctl runs the binary with args (stdin may be "") and no INBOXKIT_* environment.
func inboxctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return inboxctlEnv(t, nil, stdin, args...)
}

// inboxctlEnv is inboxctl with env added to the clean environment.
func inboxctlEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run inboxctl %v: %v", args, err)
	}
	return r
}

// startRun starts `inboxctl run args...` under ctx with the clean
// environment and returns it with its log, which the process writes while
// the test reads it. The process is killed when the test ends, if it still
// runs.
func startRun(ctx context.Context, t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	return startCommand(ctx, t, append([]string{"run"}, args...)...)
}

// startCommand is startRun for any command that runs until SIGTERM.
func startCommand(ctx context.Context, t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	return startCommandEnv(ctx, t, nil, args...)
}

// startCommandEnv is startCommand with env added to the clean environment.
func startCommandEnv(ctx context.Context, t *testing.T, env []string, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	return startBinary(ctx, t, binary, env, args...)
}

// startBinary is startCommandEnv for another build of inboxctl (bin).
func startBinary(ctx context.Context, t *testing.T, bin string, env []string, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	run := exec.CommandContext(ctx, bin, args...)
	run.Env = append(cleanEnv(), env...)
	logs := &lockedBuffer{}
	run.Stdout, run.Stderr = logs, logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	return run, logs
}

// metricsBase waits for the "serving metrics and health" line of an
// inboxctl run started with --log-format json --metrics-addr 127.0.0.1:0
// and returns the server's base URL.
func metricsBase(t *testing.T, logs *lockedBuffer) string {
	t.Helper()
	addrRe := regexp.MustCompile(`"msg":"serving metrics and health".*?"addr":"([^"]+)"`)
	var base string
	waitFor(t, "the metrics address in the log", func() bool {
		m := addrRe.FindStringSubmatch(logs.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	}, logs)
	return base
}

// waitForMetrics waits until base's /metrics has every line of want and
// returns the body.
func waitForMetrics(t *testing.T, base string, logs *lockedBuffer, want []string) string {
	t.Helper()
	var metrics string
	waitFor(t, "the mix on /metrics", func() bool {
		_, metrics = httpGet(t, base+"/metrics")
		for _, w := range want {
			if !strings.Contains(metrics, w+"\n") {
				return false
			}
		}
		return true
	}, dump(func() string {
		return fmt.Sprintf("want:\n%s\n/metrics:\n%s\nlog:\n%s", strings.Join(want, "\n"), metrics, logs.String())
	}))
	return metrics
}

// knownMix is the publish file of the tests' known mix, event ids p-1 to
// p-4 in correlation corr-p: two new invoices, a resend of the first (a
// duplicate), an unknown customer (rejected) and a body that is not JSON
// (dead-lettered).
func knownMix(p string) string {
	corr, inv := "corr-"+p, "INV-"+strings.ToUpper(p)
	return strings.Join([]string{
		invoiceLine(p+"-1", corr, inv+"1", "K-100"),
		invoiceLine(p+"-1", corr, inv+"1", "K-100"), // resend: a duplicate
		invoiceLine(p+"-2", corr, inv+"2", "K-100"),
		invoiceLine(p+"-3", corr, inv+"3", "K-999"), // unknown customer: rejected
		`{"headers":{"eventId":"` + p + `-4","correlationId":"` + corr + `"},"body":"{not json"}`,
	}, "\n") + "\n"
}

// readinessCheck is one check of a /readyz body.
type readinessCheck struct {
	Name  string
	OK    bool
	Error string
}

// wantOnlyFailing reads a /readyz body and wants exactly the check named
// failing to fail; it returns the checks for further looks.
func wantOnlyFailing(t *testing.T, body, failing string) []readinessCheck {
	t.Helper()
	var r struct{ Checks []readinessCheck }
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	for _, c := range r.Checks {
		if (c.Name == failing) == c.OK {
			t.Errorf("during the %s outage check %s ok=%v (%s)", failing, c.Name, c.OK, c.Error)
		}
	}
	return r.Checks
}

// stopRun sends SIGTERM to an inboxctl run and wants it to exit 0.
func stopRun(t *testing.T, run *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(); err != nil {
		t.Fatalf("run did not exit 0 after SIGTERM: %v\n%s", err, logs.String())
	}
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		// CI and the golden settings would change what golden approve does
		// on the test's own copy of a case.
		if !strings.HasPrefix(kv, "INBOXKIT_DB=") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "INBOXKIT_BROKER=") &&
			!strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "INBOXKIT_UPDATE_GOLDEN=") && !strings.HasPrefix(kv, "INBOXKIT_GOLDEN_BACKENDS=") {
			env = append(env, kv)
		}
	}
	return env
}

func wantCode(t *testing.T, r result, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	all := r.stdout + r.stderr
	for _, s := range contains {
		if !strings.Contains(all, s) {
			t.Fatalf("output lacks %q:\n%s", s, r)
		}
	}
}

const stompAddr = "127.0.0.1:61613"

// needActiveMQ fails the test loudly when the broker is not running.
func needActiveMQ(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", stompAddr, 3*time.Second)
	if err != nil {
		t.Fatalf("ActiveMQ does not answer on %s (%v): start it with scripts/activemq start (scripts/test does it)", stompAddr, err)
	}
	c.Close()
}

func TestDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := inboxctl(t, "", "demo", "--dir", dir)
	wantCode(t, r, 0,
		"ev-1003  DUPLICATE", // the redelivery after the crash
		"ev-1001  DUPLICATE", // the producer resend
		"dead-letter queue DLQ.invoices: 1 message(s)",
		"audit of correlation id order-6: 1 row(s)",
		// Issue 23.11: the delivery lines have column headers, and the
		// demo ends with what to look at next.
		"    EVENT    CORRELATION  WHAT HAPPENS\n",
		"    EVENT    OUTCOME      INBOX STATUS       BROKER ACTION\n",
		"==> next steps")
	legacyCheck := regexp.MustCompile(`inboxctl (check --db sqlite:\S+legacy\.db)\s+# `).FindStringSubmatch(r.stdout)
	if legacyCheck == nil {
		t.Fatalf("the next steps do not point to check on the legacy database:\n%s", r.stdout)
	}
	// The command it prints finds the legacy bean's double letters; the
	// same check on the inbox database finds nothing.
	wantCode(t, inboxctl(t, "", strings.Fields(legacyCheck[1])...), 1, "FOUND duplicate-letters", "INV-1001: 2 rows", "INV-1003: 2 rows")
	wantCode(t, inboxctl(t, "", "check", "--db", "sqlite:"+filepath.Join(dir, "inbox.db")), 0, "no findings")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", "embedded:"+filepath.Join(dir, "jetstream"), "--queue", "DLQ.invoices"), 0,
		"DLQ.invoices: 1 message(s)", "ev-1005")
	for _, re := range []string{
		`ev-1001\s+order-1\s+PROCESSED\s+-\s+1`,
		`ev-1004\s+order-4\s+REJECTED\s+CUSTOMER_UNKNOWN\s+1`,
		`ev-1005\s+order-5\s+DEAD_LETTERED\s+MALFORMED_PAYLOAD\s+1`,
		`ev-1006\s+order-6\s+PROCESSED\s+-\s+1`, // the outage fails no event: the relay tries the letter again
		`ev-1006\s+[0-9a-f]{32}\s+SENT\s+3\s+letter service unavailable`,
		`letters sent\s+6\s+4`,
		`shipping_letters rows\s+6\s+4`, // the legacy bean sends before its writes: a failed send leaves no row
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("demo output lacks %s:\n%s", re, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "inbox.db")); err != nil {
		t.Errorf("--dir did not keep inbox.db: %v", err)
	}
	wantCode(t, inboxctl(t, "", "demo", "--dir", dir), 2, "already holds a demo")
}

func invoiceLine(eventID, corr, inv, cust string) string {
	return fmt.Sprintf(`{"headers":{"eventId":%q,"correlationId":%q},"body":{"invoiceNo":%q,"customerNo":%q,"amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}}`,
		eventID, corr, inv, cust)
}

// TestRunPublishAuditPostgresActiveMQ is the operations round trip: migrate,
// publish, run, audit, dlq list, dlq replay, drain on SIGTERM.
func TestRunPublishAuditPostgresActiveMQ(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transactional", "store-then-process"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			runRoundTrip(t, mode)
		})
	}
}

func runRoundTrip(t *testing.T, mode string) {
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	dbURL := db.DSN
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.test.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	rejName := queue + ".rejected"

	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated", "seeded 2 demo customers")
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL), 0, "migrated") // idempotent

	events := strings.Join([]string{
		invoiceLine("rt-1", "corr-rt", "INV-RT1", "K-100"),
		invoiceLine("rt-1", "corr-rt", "INV-RT1", "K-100"), // producer resend
		invoiceLine("rt-2", "corr-rt", "INV-RT2", "K-999"), // unknown customer
		`{"headers":{"eventId":"rt-3","correlationId":"corr-rt"},"body":"{not json"}`,
	}, "\n") + "\n"
	wantCode(t, inboxctl(t, events, "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 4 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, binary, "run", "--db", dbURL, "--broker", broker, "--queue", queue, "--reject-queue", rejName, "--log-format", "json", "--mode", mode, "--log-level", "debug")
	run.Env = cleanEnv()
	var logs bytes.Buffer
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = run.Process.Kill()
			_ = run.Wait()
		}
	}()

	type row struct{ EventID, Status, Reason string }
	var rows []row
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "corr-rt", "--json")
		rows = nil
		_ = json.Unmarshal([]byte(r.stdout), &rows)
		terminal := 0
		for _, r := range rows {
			if r.Status == "PROCESSED" || r.Status == "REJECTED" || r.Status == "DEAD_LETTERED" {
				terminal++
			}
		}
		if terminal == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit never showed 3 terminal rows: %s\nrun log:\n%s", r, logs.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.EventID] = r.Status + "/" + r.Reason
	}
	want := map[string]string{"rt-1": "PROCESSED/", "rt-2": "REJECTED/CUSTOMER_UNKNOWN", "rt-3": "DEAD_LETTERED/MALFORMED_PAYLOAD"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("audit %s = %q, want %q", k, got[k], v)
		}
	}
	wantCode(t, inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "corr-rt"), 0, "audit of correlation id corr-rt: 3 row(s)", "dead-lettered (POISON, MALFORMED_PAYLOAD)")
	wantCode(t, inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "nope"), 1, "no row for correlation id nope")

	// the DLQ holds the malformed message with its reason
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName), 0, "1 message(s)", "rt-3", "MALFORMED_PAYLOAD")
	// replay sends it back; it is dead-lettered again (still malformed), with a replay trace
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "rt-3", "--db", dbURL), 0, "replayed rt-3", "1 replayed")
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "corr-rt")
		if strings.Contains(r.stdout, "replayed 1 time(s)") && strings.Contains(r.stdout, "dead-lettered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replayed rt-3 was not dead-lettered again: %s", r)
		}
		time.Sleep(300 * time.Millisecond)
	}
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "absent", "--db", dbURL), 1, "no dead letter with event id")

	// The rejection is on the reject queue (in both modes). Once the customer
	// exists, replaying it reopens the REJECTED row and it is processed once
	// (issue 11, item 2).
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", rejName), 0, "1 message(s)", "rt-2", "CUSTOMER_UNKNOWN")
	if _, err := db.Exec(`INSERT INTO invoice_customers (customer_no, name, address) VALUES ('K-999', 'Neukunde AG', 'Seestrasse 9, 8002 Zuerich')`); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", rejName, "--event-id", "rt-2", "--db", dbURL), 0, "replayed rt-2", "1 replayed")
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "corr-rt", "--json")
		rows = nil
		_ = json.Unmarshal([]byte(r.stdout), &rows)
		done := false
		for _, row := range rows {
			done = done || (row.EventID == "rt-2" && row.Status == "PROCESSED")
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replayed rejection rt-2 was not processed: %s\nrun log:\n%s", r, logs.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	wantCode(t, inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "corr-rt"), 0, "rejected, replayed from the reject queue", "replayed 1 time(s)", "rejected CUSTOMER_UNKNOWN")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", rejName), 0, "0 message(s)")

	// check: the round trip left a consistent database
	wantCode(t, inboxctl(t, "", "check", "--db", dbURL), 0, "no findings")

	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := run.Wait()
	stopped = true
	if err != nil {
		t.Fatalf("run did not exit 0 after SIGTERM: %v\n%s", err, logs.String())
	}
	settled := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, `"msg":"consumer started"`) || strings.Contains(line, `"msg":"consumer stopped: drained"`) ||
			strings.Contains(line, `"msg":"draining 0 deliveries"`) || strings.Contains(line, `"msg":"outbox relay started"`) ||
			strings.Contains(line, `"msg":"summary"`) {
			continue
		}
		if strings.Contains(line, `"msg":"settled"`) {
			settled++
		}
		if !strings.Contains(line, `"event_id":"rt-`) || !strings.Contains(line, `"correlation_id":"corr-rt"`) {
			t.Errorf("log line without event id and correlation id: %s", line)
		}
	}
	if settled < 5 {
		t.Errorf("want at least 5 settled log lines, got %d:\n%s", settled, logs.String())
	}
	if !strings.Contains(logs.String(), "drained") {
		t.Errorf("run did not log its drain:\n%s", logs.String())
	}
}

// plant inserts one of each inconsistency check looks for.
func plant(t *testing.T, db *dbtest.DB) {
	t.Helper()
	ctx := context.Background()
	ins := func(q string, args ...any) {
		t.Helper()
		if db.Backend == dbtest.Postgres {
			n := 0
			q = regexp.MustCompile(`\?`).ReplaceAllStringFunc(q, func(string) string { n++; return fmt.Sprintf("$%d", n) })
		}
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("plant %s: %v", q, err)
		}
	}
	now := time.Now().UTC().Format("2006-01-02 15:04:05")
	inbox := `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, ATTEMPTS, PAYLOAD_HASH) VALUES (?, 'invoice-consumer', ?, 'c', ?, ?, ?)`
	letter := `INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES (?, ?, 'K-100', ?, ?)`
	// a consistent event
	ins(inbox, "ok-1", "PROCESSED", now, 1, "h-ok")
	ins(letter, "L-ok", "INV-OK", "ok-1", now)
	// split transaction: PROCESSED, no letter
	ins(inbox, "split-1", "PROCESSED", now, 1, "h-split")
	// business duplicate: two letters for INV-DUP (a resend with a new id after a purge)
	ins(inbox, "dup-a", "PROCESSED", now, 1, "h-dup-a")
	ins(inbox, "dup-b", "PROCESSED", now, 1, "h-dup-b")
	ins(letter, "L-dup-a", "INV-DUP", "dup-a", now)
	ins(letter, "L-dup-b", "INV-DUP", "dup-b", now)
	// the same payload under two event ids
	ins(inbox, "hash-a", "REJECTED", now, 1, "h-same")
	ins(inbox, "hash-b", "REJECTED", now, 1, "h-same")
	// stuck at the backout threshold
	ins(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, LAST_ERROR) VALUES ('stuck-1', 'invoice-consumer', 'TECHNICAL_FAILURE', 5, 'letter service down')`)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			wantCode(t, inboxctl(t, "", "check", "--db", url), 0, "no findings", "ok    processed-without-letter")
			plant(t, db)
			r := inboxctl(t, "", "check", "--db", url, "--json")
			wantCode(t, r, 1)
			var rep struct {
				Findings []finding
				Total    int
			}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("check --json: %v\n%s", err, r)
			}
			want := map[string]string{
				"processed-without-letter": "split-1",
				"duplicate-letters":        "INV-DUP: 2 rows, event ids dup-a, dup-b",
				"payload-hash-reuse":       "event ids hash-a, hash-b",
				"stuck-technical-failure":  "stuck-1 (invoice-consumer): 5 attempts, letter service down",
			}
			for _, f := range rep.Findings {
				w, ok := want[f.Check]
				if !ok {
					if f.Count != 0 {
						t.Errorf("unexpected finding %q: %+v", f.Check, f)
					}
					continue
				}
				delete(want, f.Check)
				if f.Count != 1 || len(f.Samples) != 1 || !strings.Contains(f.Samples[0], w) {
					t.Errorf("%s: count %d samples %q, want 1 sample with %q", f.Check, f.Count, f.Samples, w)
				}
			}
			for k := range want {
				t.Errorf("check %s missing from the report", k)
			}
			wantCode(t, inboxctl(t, "", "check", "--db", url), 1, "FOUND processed-without-letter", "4 finding(s)")
			// a higher threshold no longer counts stuck-1
			wantCode(t, inboxctl(t, "", "check", "--db", url, "--max-attempts", "6"), 1, "ok    stuck-technical-failure")
		})
	}
}

// dbURL is the inboxctl URL of a test database.
func dbURL(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	switch db.Backend {
	case dbtest.Postgres:
		return db.DSN
	case dbtest.SQLite:
		path := strings.TrimPrefix(db.DSN, "file:")
		return "sqlite:" + path[:strings.IndexByte(path, '?')]
	case dbtest.MySQL:
		// root@tcp(127.0.0.1:3306)/t_xxx?parseTime=...
		m := regexp.MustCompile(`^(.*)@tcp\(([^)]*)\)/([^?]*)`).FindStringSubmatch(db.DSN)
		if m == nil {
			t.Fatalf("cannot turn %q into a mysql:// URL", db.DSN)
		}
		return "mysql://" + m[1] + "@" + m[2] + "/" + m[3]
	}
	t.Fatalf("backend %s", db.Backend)
	return ""
}

func TestPurge(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	url := dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
	old := time.Now().UTC().Add(-40 * 24 * time.Hour).Format("2006-01-02 15:04:05.000000")
	if _, err := db.Exec(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT) VALUES ('old-1', 'c', 'PROCESSED', ?), ('old-2', 'c', 'TECHNICAL_FAILURE', ?)`, old, old); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "24h"), 2, "refusing to purge", "redelivery horizon 168h0m0s", "--older-than 168h0m0s or more")
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "48h", "--horizon", "72h"), 2, "refusing to purge")
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "720h", "--dry-run"), 0, "dry run: 1 terminal row(s)")
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "720h", "--max-rows-per-second", "0"), 2, "--max-rows-per-second must not be 0")
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "720h", "--max-rows-per-second", "-1"), 0, "deleted 1 terminal row(s)")
	wantCode(t, inboxctl(t, "", "purge", "--db", url, "--older-than", "720h"), 0, "deleted 0 terminal row(s)")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"unknown command", "", []string{"frobnicate"}, []string{"unknown command", "inboxctl --help"}},
		{"unknown flag", "", []string{"check", "--bogus"}, []string{"unknown flag: --bogus", "inboxctl check --help"}},
		{"bad duration", "", []string{"purge", "--db", sqlite, "--older-than", "soon"}, []string{"invalid argument", "--older-than"}},
		{"no db", "", []string{"check"}, []string{"--db URL", "INBOXKIT_DB"}},
		{"oracle", "", []string{"migrate", "--db", "oracle://scott:tiger@127.0.0.1:1/ORCL"}, []string{"database oracle://scott:xxxxx@127.0.0.1:1/ORCL unreachable"}},
		{"godror", "", []string{"migrate", "--db", "godror://scott:tiger@db:1521/ORCL"}, []string{"-tags godror"}},
		{"unknown scheme", "", []string{"check", "--db", "redis://x"}, []string{"not supported", "sqlite:"}},
		{"no correlation id", "", []string{"audit", "--db", sqlite}, []string{"--correlation-id"}},
		{"no older-than", "", []string{"purge", "--db", sqlite}, []string{"--older-than DURATION"}},
		{"bad broker", "", []string{"dlq", "list", "--broker", "kafka://x", "--queue", "q"}, []string{"broker scheme \"kafka\" is not supported"}},
		{"replay without selection", "", []string{"dlq", "replay", "--broker", "stomp://" + stompAddr, "--queue", "q", "--db", sqlite}, []string{"--event-id ID", "--all"}},
		{"bad publish line", "{\"headers\":{},\"body\":{}}\n\nnot json\n", []string{"publish", "--broker", "stomp://" + stompAddr, "--queue", "q", "--file", "-"}, []string{"stdin line 3", "nothing was published"}},
		{"publish body number", `{"headers":{},"body":42}` + "\n", []string{"publish", "--broker", "stomp://" + stompAddr, "--queue", "q", "--file", "-"}, []string{"line 1", "body must be a JSON object or a string"}},
		{"run mode", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--mode", "fast"}, []string{"--mode \"fast\" is unknown", "store-then-process"}},
		{"run lease transactional", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--lease", "1m"}, []string{"--lease 1m0s", "needs --mode store-then-process"}},
		{"run lease short", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--mode", "store-then-process", "--lease", "10s"}, []string{"--lease 10s is not above --process-timeout 30s"}},
		{"run batch 0", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--batch", "0"}, []string{"--batch must be at least 1"}},
		{"run max attempts 0", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--max-attempts", "0"}, []string{"--max-attempts must be at least 1"}},
		{"check max attempts -1", "", []string{"check", "--db", sqlite, "--max-attempts", "-1"}, []string{"--max-attempts must be at least 1"}},
		{"run no queue", "", []string{"run", "--db", sqlite, "--broker", "embedded"}, []string{"--queue NAME"}},
		{"log format", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--log-format", "xml"}, []string{"--log-format \"xml\""}},
		{"golden no dir", "", []string{"golden", "verify", "/nonexistent/cases"}, []string{"no such file"}},
		{"golden args", "", []string{"golden", "verify"}, []string{"accepts 1 arg"}},
		{"golden record in process", "", []string{"golden", "record", "../../testdata/golden"}, []string{"record needs --black-box", "inboxctl golden approve DIR"}},
		{"golden black box no exec", "", []string{"golden", "verify", "--black-box", "../../testdata/golden"}, []string{"--black-box needs --exec COMMAND"}},
		{"golden black box broker", "", []string{"golden", "verify", "--black-box", "--exec", "true", "--broker", "amqp://x", "../../testdata/golden"}, []string{"speaks STOMP to ActiveMQ"}},
		{"run relay lease", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--relay-lease", "0s"}, []string{"--relay-lease (0s) and --relay-retry-delay (1s) must be positive"}},
		{"relay retry delay", "", []string{"relay", "--db", sqlite, "--retry-delay", "-1s"}, []string{"--lease (30s) and --retry-delay (-1s) must be positive"}},
		{"relay max attempts", "", []string{"relay", "--db", sqlite, "--max-attempts", "0"}, []string{"--max-attempts of the relay must be at least 1"}},
		{"run requeue delay", "", []string{"run", "--db", sqlite, "--broker", "embedded", "--queue", "q", "--requeue-delay", "0s"}, []string{"--requeue-delay must be positive"}},
		{"broker down", "", []string{"dlq", "list", "--broker", "stomp://admin:supersecret@127.0.0.1:1", "--queue", "q"}, []string{"broker stomp://admin:xxxxx@127.0.0.1:1", "check the URL and that the broker runs"}},
		{"db down", "", []string{"check", "--db", "postgres://app:supersecret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, []string{"unreachable", "app:xxxxx@127.0.0.1:1"}},
		// issue 11.6: messages must not vanish into a server that is gone when the command ends
		{"publish embedded", invoiceLine("e-1", "c-1", "INV-1", "K-100") + "\n", []string{"publish", "--broker", "embedded", "--queue", "q", "--file", "-"}, []string{"publish --broker embedded", "embedded:DIR"}},
		{"dlq list embedded", "", []string{"dlq", "list", "--broker", "embedded", "--queue", "DLQ.q"}, []string{"dlq list --broker embedded", "embedded:DIR"}},
		{"dlq replay embedded", "", []string{"dlq", "replay", "--broker", "embedded", "--queue", "DLQ.q", "--all", "--db", sqlite}, []string{"dlq replay --broker embedded", "embedded:DIR"}},
		// issue 11.3: a one-letter password masked every "p" ("xxxxxostgres", "dial tcxxxxx")
		{"db down, one-letter password", "", []string{"check", "--db", "postgres://u:p@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"}, []string{"database postgres://u:xxxxx@127.0.0.1:1/postgres?", "dial tcp 127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := inboxctl(t, tt.stdin, tt.args...)
			wantCode(t, r, 2, tt.want...)
			for _, secret := range []string{"supersecret", "tiger"} {
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("output shows a password:\n%s", r)
				}
			}
		})
	}
}

func TestHelpHasExamples(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{}, {"demo"}, {"migrate"}, {"run"}, {"publish"}, {"audit"}, {"dlq"}, {"dlq", "list"}, {"dlq", "replay"}, {"purge"}, {"check"}, {"stats"}, {"golden"}, {"golden", "verify"}, {"golden", "approve"}, {"golden", "record"}} {
		r := inboxctl(t, "", append(cmd, "--help")...)
		wantCode(t, r, 0, "Examples:")
	}
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	cmd := exec.Command(binary, "migrate")
	cmd.Env = append(cleanEnv(), "INBOXKIT_DB="+dbURL(t, db))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "migrated") {
		t.Fatalf("migrate with INBOXKIT_DB: %v\n%s", err, out)
	}
}

func TestGolden(t *testing.T) {
	t.Parallel()
	src := filepath.Join("..", "..", "testdata", "golden", "producer-resend")
	dir := filepath.Join(t.TempDir(), "producer-resend")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"scenario", "approved.legacy.txt", "approved.refactored.txt"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatalf("the approval case %s is missing: %v", src, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, inboxctl(t, "", "golden", "verify", dir), 0, "verified 1 case(s)")
	approved := filepath.Join(dir, "approved.refactored.txt")
	if err := os.WriteFile(approved, []byte("something else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "golden", "verify", dir), 1, "differs from", "inboxctl golden approve "+dir)
	if _, err := os.Stat(filepath.Join(dir, "received.refactored.txt")); err != nil {
		t.Errorf("verify wrote no received file: %v", err)
	}
	r := inboxctl(t, "", "golden", "approve", dir)
	wantCode(t, r, 0, "approved 1 case(s)")
	wantCode(t, inboxctl(t, "", "golden", "verify", dir), 0, "verified 1 case(s)")
}

// TestAMQP10PublishAndList: the amqp10:// scheme reaches RabbitMQ's AMQP 1.0
// plugin: publish (which declares the missing queue durable) and dlq list;
// a broker that is down is reported with the password redacted.
func TestAMQP10PublishAndList(t *testing.T) {
	t.Parallel()
	queue := fmt.Sprintf("inboxctl.amqp10.%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/"); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
			}
			conn.Close()
		}
	})
	broker := "amqp10://guest:guest@127.0.0.1:5672"
	events := `{"headers": {"eventId": "a10-1", "correlationId": "order-a10"}, "body": {"invoiceNo": "INV-1"}}` + "\n"
	wantCode(t, inboxctl(t, events, "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 1 message(s)")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", queue), 0, "1 message(s)", "a10-1")
	down := inboxctl(t, "", "dlq", "list", "--broker", "amqp10://guest:topsecret@127.0.0.1:1", "--queue", queue)
	wantCode(t, down, 2, "amqp10://guest:xxxxx@127.0.0.1:1", "check the URL and that the broker runs")
	if strings.Contains(down.stdout+down.stderr, "topsecret") {
		t.Errorf("password printed:\n%s", down)
	}
}

// TestGoldenBlackBox records inboxctl run itself from the outside on one
// case (real ActiveMQ and PostgreSQL), then verifies the record.
func TestGoldenBlackBox(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "happy-path")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "happy-path", "scenario"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scenario"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	exe := fmt.Sprintf(`%[1]q migrate >/dev/null && exec %[1]q run --queue "$INBOXKIT_QUEUE" --max-attempts "$INBOXKIT_MAX_ATTEMPTS"`, binary)
	args := []string{"--black-box", "--label", "go", "--ready", "consumer started", "--exec", exe,
		"--db", dbtest.PostgresDSN(), "--broker", "stomp://" + stompAddr, dir}
	wantCode(t, inboxctl(t, "", append([]string{"golden", "record"}, args...)...), 0, "recorded the black-box cases as approved.go.txt")
	rec, err := os.ReadFile(filepath.Join(dir, "approved.go.txt"))
	// The letter request went through the outbox: sent by the relay with the
	// letter id as key, its row SENT.
	if err != nil || !strings.Contains(string(rec), "letter-service key=<id> letter <id> invoice INV-1001") || !strings.Contains(string(rec), "| PROCESSED |") ||
		!strings.Contains(string(rec), "| K-100 | 1 | <letter-service URL> | SENT | 1 | E-1001 |") {
		t.Fatalf("record (%v):\n%s", err, rec)
	}
	wantCode(t, inboxctl(t, "", append([]string{"golden", "verify"}, args...)...), 0, "verified the black-box cases")
}

// TestExitCodeByType: the exit code goes by the error's type, not its text
// (an error of a command that happens to read like cobra's is no usage error).
func TestExitCodeByType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("unknown command \"x\" reported by the broker"), exitFindings},
		{errors.New("unknown flag: --x in the producer's header"), exitFindings},
		{usageErr("unknown command %q", "x"), exitUsage},
		{fmt.Errorf("wrapped: %w", usageErr("bad")), exitUsage},
		{errFindings, exitFindings},
	} {
		if got, _ := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%q) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
