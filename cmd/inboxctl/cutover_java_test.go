package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
)

// The switch-over rehearsal's own ActiveMQ: OpenWire P, STOMP P+1
// (INBOXKIT_CUTOVER_ACTIVEMQ_PORT=P, default 16371), restarted with another
// composite-queue config at the "remove" step.
var cutoverAMQDir, cutoverAMQOpenWire, cutoverAMQStomp = func() (string, string, string) {
	p := os.Getenv("INBOXKIT_CUTOVER_ACTIVEMQ_PORT")
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65534 {
		return "/tmp/inboxkit-activemq-cutovertest", "16371", "16372"
	}
	return "/tmp/inboxkit-activemq-cutovertest-" + p, p, strconv.Itoa(n + 1)
}()

const (
	cutoverQueue = "cutover.invoices"
	cutoverCopy  = cutoverQueue + shadowSuffix
	// cutoverCarryOver is the statement of docs/shadow.md's switch step
	// (the test checks the page holds it, word for word): the events the
	// legacy bean processed become PROCESSED rows of the new consumer's
	// inbox, so that a resend or redelivery of one after the switch is a
	// duplicate, not a second letter.
	cutoverCarryOver = `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, ATTEMPTS, UPDATED_AT)
SELECT event_id, 'invoice-consumer', 'PROCESSED', MIN(created_at), 1, CURRENT_TIMESTAMP
FROM shipping_letters WHERE event_id IS NOT NULL GROUP BY event_id
ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO NOTHING;`
)

// cutoverBroker runs scripts/activemq for the rehearsal's broker with
// composite queues spec (INBOXKIT_ACTIVEMQ_SHADOW; "" for none).
func cutoverBroker(t *testing.T, verb, spec string) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "activemq"), verb)
	cmd.Env = append(os.Environ(), "INBOXKIT_ACTIVEMQ_DIR="+cutoverAMQDir, "INBOXKIT_ACTIVEMQ_OPENWIRE_PORT="+cutoverAMQOpenWire,
		"INBOXKIT_ACTIVEMQ_STOMP_PORT="+cutoverAMQStomp, "INBOXKIT_ACTIVEMQ_HEAP=256m", "INBOXKIT_ACTIVEMQ_TIMEOUT=240",
		"INBOXKIT_ACTIVEMQ_SHADOW="+spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/activemq %s (the cutover rehearsal's broker, %s): %v\n%s", verb, cutoverAMQDir, err, out)
	}
}

// cutEvent is one message of the rehearsal's traffic.
type cutEvent struct {
	id, body, kind string // kind: "ok", "malformed", "unknown"
}

// cutoverMix is n events named p-1..p-n: every 25th malformed, every 50th
// of an unknown customer, the rest valid; after every 10th, a producer
// resend of a valid event five before it.
func cutoverMix(p string, n int) []cutEvent {
	var evs, msgs []cutEvent
	for i := 1; i <= n; i++ {
		e := cutEvent{id: fmt.Sprintf("%s-%d", p, i), kind: "ok",
			body: fmt.Sprintf(`{"invoiceNo":"INV-%s-%d","customerNo":"K-%d00","amount":"%d.%02d","currency":"EUR","issuedAt":"2026-01-05"}`, p, i, 1+i%2, 10+i%90, i%100)}
		switch {
		case i%25 == 13:
			e.kind, e.body = "malformed", fmt.Sprintf(`{"invoiceNo":"INV-%s-%d", not json`, p, i)
		case i%50 == 30:
			e.kind, e.body = "unknown", fmt.Sprintf(`{"invoiceNo":"INV-%s-%d","customerNo":"K-999","amount":"5.00","currency":"EUR","issuedAt":"2026-01-05"}`, p, i)
		}
		evs = append(evs, e)
		msgs = append(msgs, e)
		if i%10 == 0 {
			again := evs[i-6]
			if again.kind != "ok" {
				again = evs[i-7]
			}
			msgs = append(msgs, again)
		}
	}
	return msgs
}

// waitLong is waitFor with 3 minutes: a JVM's start on the shared machine
// under parallel tests took over a minute.
func waitLong(t *testing.T, what string, cond func() bool, logs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 3 minutes\n%s", what, logs)
		}
	}
}

// javaBean is a running LegacyInvoiceEventMdb.
type javaBean struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// legacyJavaClasspath is the classpath of the Java legacy fixtures
// (scripts/legacy-java build, done by the test command).
func legacyJavaClasspath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "..", "scripts", "legacy-java"), "classpath").Output()
	if err != nil {
		t.Fatalf("scripts/legacy-java classpath: %v (run it by hand to see why)", err)
	}
	return strings.TrimSpace(string(out))
}

// startJavaBean starts LegacyInvoiceEventMdb, as golden's black-box
// recorder does, on queue of the ActiveMQ at 127.0.0.1:openwire against the
// PostgreSQL schema of dbURL; the test's cleanup kills it. The caller waits
// for "listening on <queue>" in its output.
func startJavaBean(t *testing.T, classpath, openwire, dbURL, queue, letterService, instance string) *javaBean {
	t.Helper()
	pu, _ := url.Parse(dbURL)
	jq := url.Values{}
	jq.Set("currentSchema", pu.Query().Get("search_path"))
	jq.Set("user", pu.User.Username())
	if p, ok := pu.User.Password(); ok {
		jq.Set("password", p)
	}
	b := &javaBean{cmd: exec.Command("java", "-cp", classpath, "LegacyInvoiceEventMdb"), out: &lockedBuffer{}, done: make(chan struct{})}
	b.cmd.Env = append(os.Environ(), "INBOXKIT_OPENWIRE_URL=tcp://127.0.0.1:"+openwire, "INBOXKIT_QUEUE="+queue,
		"INBOXKIT_MAX_REDELIVERIES=2", "INBOXKIT_JDBC_URL=jdbc:postgresql://"+pu.Host+pu.Path+"?"+jq.Encode(),
		"INBOXKIT_LETTER_SERVICE="+letterService, "INBOXKIT_INSTANCE="+instance)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start the Java bean: %v", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.done
	})
	return b
}

// waitListening waits for the bean to listen on queue.
func (b *javaBean) waitListening(t *testing.T, queue string) {
	t.Helper()
	waitLong(t, "the Java bean listening on "+queue, func() bool { return strings.Contains(b.out.String(), "listening on "+queue) }, b.out)
}

// drain stops the bean as a container's "stop delivery" does: SIGTERM runs
// its shutdown hook, which closes the JMS connection; JMS lets a listener
// in progress finish (and commit) first, and an uncommitted or prefetched
// message goes back to the broker.
func (b *javaBean) drain(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the Java bean did not exit within 60s of SIGTERM\n%s", b.out)
	}
}

// TestCutoverSequenceJava rehearses docs/shadow.md's "Switch over" end to
// end with the Java legacy bean on a private ActiveMQ, each step with the
// page's commands: shadow (the bean on the queue, `run --shadow` on the
// composite queue's copy; `shadow diff` clean), check (`migrate`, `cutover
// check` all hold), switch with traffic flowing (drain the bean, carry its
// processed events over, stop the shadow run once it passed the bean,
// `run` on the real queue), reverse shadow (the bean on the copy into its
// shadow schema; `shadow diff --legacy-events` clean), remove (the bean
// stopped, the broker restarted without the composite queue, the copy
// emptied). At the shadow steps the shadow side changes no production table
// and calls no letter; at the end every message of the run is in
// production exactly once: a valid event's letter written by the bean once
// per message it took, or by the new consumer once and only when the bean
// never did; an invalid event in one place.
func TestCutoverSequenceJava(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an ActiveMQ and two JVMs: not under -short")
	}
	t.Parallel()
	began := time.Now()
	classpath := legacyJavaClasspath(t)
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "shadow.md"))
	if err != nil {
		t.Fatal(err)
	}
	if squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }; !strings.Contains(squash(string(page)), squash(cutoverCarryOver)) {
		t.Fatalf("docs/shadow.md lacks the switch step's statement, word for word:\n%s", cutoverCarryOver)
	}
	cutoverBroker(t, "stop", "") // a broker a killed run left behind
	t.Cleanup(func() { cutoverBroker(t, "stop", "") })
	cutoverBroker(t, "start", cutoverQueue+":"+cutoverCopy)
	broker := "stomp://127.0.0.1:" + cutoverAMQStomp
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	sfx := strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36))
	prod, prodURL := keptSchema(t, "cutover_prod_"+sfx)                // URL_LEGACY, and URL_NEW after the switch
	shadow, shadowURL := keptSchema(t, "cutover_shadow_"+sfx)          // URL_SHADOW
	legShadow, legShadowURL := keptSchema(t, "cutover_legshadow_"+sfx) // URL_LEGACY_SHADOW
	for _, db := range []*sql.DB{prod, legShadow} {                    // the bean's schemas: business tables only
		if err := invoice.Migrate(ctx, db, "postgres"); err != nil {
			t.Fatal(err)
		}
		if err := invoice.SeedCustomers(ctx, db, inbox.Postgres); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, inboxctl(t, "", "migrate", "--db", shadowURL, "--seed-customers"), 0, "migrated")
	letters, stub := newLetterService(t), newLetterService(t) // the real letter service; the reverse shadow's recorder

	b, err := brokerurl.Open(broker, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pub, err := b.Publisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []cutEvent
	var allMu sync.Mutex
	publish := func(msgs []cutEvent, rate int) {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for _, m := range msgs {
			<-tick.C
			h := map[string]string{"amq-msg-type": "text", "eventId": m.id, "correlationId": "corr-cutover"}
			if err := pub.Publish(ctx, cutoverQueue, h, []byte(m.body)); err != nil {
				t.Errorf("publish %s: %v", m.id, err)
				return
			}
			allMu.Lock()
			all = append(all, m)
			allMu.Unlock()
		}
	}
	depth := func(q string) int {
		d, _, err := b.Depth(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	okMsgs := func(msgs []cutEvent) (ok, invalid int) {
		for _, m := range msgs {
			if m.kind == "ok" {
				ok++
			} else {
				invalid++
			}
		}
		return ok, invalid
	}
	// beanDone waits until the bean took every message of the run on q so
	// far: a letter per valid message in db, the invalid ones in DLQ.q.
	beanDone := func(db *sql.DB, q string, letters, dead int, logs fmt.Stringer) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			l, d, left := count(t, db, `SELECT COUNT(*) FROM shipping_letters`), depth("DLQ."+q), depth(q)
			if l == letters && d == dead && left == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the bean on %s: %d of %d letters, %d of %d dead letters, %d left on the queue after 5 minutes\n%s", q, l, letters, d, dead, left, logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	step := func(format string, args ...any) {
		t.Logf("[%5.1fs] "+format, append([]any{time.Since(began).Seconds()}, args...)...)
	}
	// production's state: its tables' checksums (without the test's record
	// of the letter service and the DLQ) and the letter service's log.
	prodState := func() string {
		sums := checksums(t, prod, "postgres")
		delete(sums, strings.ToLower(legacyCallsTable))
		return fmt.Sprintf("%v, %d letter calls", sums, len(letters.log()))
	}
	step("broker up (%s), schemas %s", broker, sfx)

	// 1. Shadow. The bean on the queue; the shadow run starts on the copy
	// only once the bean took the first batch, so that production is
	// quiet while it works: the shadow side changes nothing there.
	bean := startJavaBean(t, classpath, cutoverAMQOpenWire, prodURL, cutoverQueue, letters.URL, "legacy")
	bean.waitListening(t, cutoverQueue)
	batchA, batchB := cutoverMix("a", 40), cutoverMix("b", 40)
	publish(batchA, 50)
	okA, badA := okMsgs(batchA)
	beanDone(prod, cutoverQueue, okA, badA, bean.out)
	before := prodState()
	shadowArgs := []string{"--shadow", "--db", shadowURL, "--production-db", prodURL, "--broker", broker, "--queue", cutoverCopy,
		"--letter-service", letters.URL, "--log-format", "json"}
	shadowRun, shadowLogs := startRun(ctx, t, shadowArgs...)
	waitLong(t, "the shadow run settled batch A", func() bool { return shadowQuiet(t, shadow, distinct(batchA)) }, shadowLogs)
	if after := prodState(); after != before {
		t.Fatalf("shadow step: production changed while only the shadow run worked:\nbefore %s\nafter  %s", before, after)
	}
	step("shadow: bean took batch A (%d messages: %d letters, %d dead letters); the shadow run then settled its %d events; production unchanged: %s", len(batchA), okA, badA, distinct(batchA), before)
	publish(batchB, 50) // both running
	okB, badB := okMsgs(batchB)
	beanDone(prod, cutoverQueue, okA+okB, badA+badB, bean.out)
	waitLong(t, "the shadow run settled batch B", func() bool { return shadowQuiet(t, shadow, distinct(batchA)+distinct(batchB)) }, shadowLogs)
	recordLegacyCalls(ctx, t, prod, b, letters.URL, letters.log(), "DLQ."+cutoverQueue)
	report := filepath.Join(t.TempDir(), "diff.json")
	r := inboxctl(t, "", "shadow", "diff", "--legacy", prodURL, "--shadow", shadowURL, "--config", shadowJavaConfig, "--report", report)
	wantCode(t, r, 0, "unexpected 0", "no unexpected differences")
	rep := readReport(t, report)
	wantRules := expectedRules(append(append([]cutEvent{}, batchA...), batchB...))
	if !mapsEqual(rep.Rules, wantRules) {
		t.Errorf("shadow diff rules %v, want %v", rep.Rules, wantRules)
	}
	step("shadow: batch B with both running; shadow diff:\n%s", r.stdout)

	// 2. Check.
	check := func() result {
		return inboxctl(t, "", "cutover", "check", "--db", prodURL, "--shadow-report", report, "--min-events", strconv.FormatInt(rep.Counts.Events, 10),
			"--min-days", "0", "--retention", "14d", "--redelivery-window", "1d", "--rollback-window", "7d", "--broker", broker, "--legacy-dlq", "DLQ."+cutoverQueue)
	}
	wantCode(t, check(), 1, "✗ inbox-adopted", "inboxctl migrate", "4 of 5 checks hold")
	wantCode(t, inboxctl(t, "", "migrate", "--db", prodURL), 0, "migrated")
	r = check()
	wantCode(t, r, 0, "all 5 checks hold")
	step("check: before migrate inbox-adopted fails; after it:\n%s", r.stdout)

	// 3. Switch, with the producers sending all along.
	batchC := cutoverMix("c", 100)
	published := make(chan struct{})
	go func() { defer close(published); publish(batchC, 40) }()
	waitLong(t, "a third of batch C published", func() bool {
		allMu.Lock()
		defer allMu.Unlock()
		return len(all) >= len(batchA)+len(batchB)+len(batchC)/3
	}, bean.out)
	allMu.Lock()
	atDrain := len(all) - len(batchA) - len(batchB)
	allMu.Unlock()
	bean.drain(t)
	drained := time.Now()
	res, err := prod.ExecContext(ctx, cutoverCarryOver)
	if err != nil {
		t.Fatalf("carry-over: %v", err)
	}
	carried, _ := res.RowsAffected()
	// The shadow run stops once it passed the bean: the copy holds no more
	// than the queue (which nothing consumes now).
	waitLong(t, "the shadow run past the drained bean", func() bool { return depth(cutoverCopy) <= depth(cutoverQueue) }, shadowLogs)
	stopRun(t, shadowRun, shadowLogs)
	runArgs := []string{"--db", prodURL, "--broker", broker, "--queue", cutoverQueue, "--letter-service", letters.URL, "--log-format", "json"}
	newRun, newLogs := startRun(ctx, t, runArgs...)
	waitLong(t, "the new consumer consuming", func() bool { return strings.Contains(newLogs.String(), `"msg":"consumer started"`) }, newLogs)
	gap := time.Since(drained)
	<-published
	allMu.Lock()
	sent := append([]cutEvent{}, all...)
	allMu.Unlock()
	settled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			if l, err := productionLedger(ctx, t, prod, b, letters, sent); err == nil && depth(cutoverQueue) == 0 {
				step("%s: %s", what, l)
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: production not settled within 5 minutes: %v (queue depth %d)\n%s", what, err, depth(cutoverQueue), newLogs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	settled(fmt.Sprintf("switch: bean drained with %d of batch C's %d messages published; %d events carried over; new consumer up %s after the drain", atDrain, len(batchC), carried, gap.Round(time.Millisecond)))

	// 4. Reverse shadow: the bean on the copy into its shadow schema, its
	// letter service the recorder. It starts on the copies waiting since
	// the shadow run stopped while production is quiet: its work changes
	// nothing there.
	before = prodState()
	copies := depth(cutoverCopy)
	rev := startJavaBean(t, classpath, cutoverAMQOpenWire, legShadowURL, cutoverCopy, stub.URL, "reverse")
	rev.waitListening(t, cutoverCopy)
	for deadline := time.Now().Add(5 * time.Minute); depth(cutoverCopy) > 0 || count(t, legShadow, `SELECT COUNT(*) FROM shipping_letters`) < len(stub.log()); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reverse shadow bean did not take the %d copies within 5 minutes\n%s", copies, rev.out)
		}
	}
	if after := prodState(); after != before {
		t.Fatalf("reverse shadow: production changed while only the legacy bean on the copy worked:\nbefore %s\nafter  %s", before, after)
	}
	step("reverse shadow: the bean took the %d copies since the shadow run stopped; production unchanged: %s", copies, before)
	batchD := cutoverMix("d", 40)
	publish(batchD, 50) // both running
	allMu.Lock()
	sent = append([]cutEvent{}, all...)
	allMu.Unlock()
	settled("reverse shadow: batch D with both running")
	okRev := count(t, legShadow, `SELECT COUNT(*) FROM shipping_letters`)
	for deadline := time.Now().Add(5 * time.Minute); depth(cutoverCopy) > 0 || okRev != len(stub.log()); okRev = count(t, legShadow, `SELECT COUNT(*) FROM shipping_letters`) {
		if time.Now().After(deadline) {
			t.Fatalf("the reverse shadow bean did not settle batch D\n%s", rev.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The bean on the copy dead-letters (after its redeliveries) every
	// invalid event the shadow run did not take before it stopped.
	invalid := 0
	for id, kind := range kindsOf(sent) {
		if kind != "ok" && count(t, shadow, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1`, id) == 0 {
			invalid++
		}
	}
	waitLong(t, fmt.Sprintf("%d dead letters of the bean on the copy", invalid), func() bool { return depth("DLQ."+cutoverCopy) == invalid }, rev.out)
	for _, c := range stub.log() {
		if c.Key != "" {
			t.Errorf("the recorder got a call with an Idempotency-Key: %s", c.Body)
		}
	}
	recordLegacyCalls(ctx, t, legShadow, b, letters.URL, stub.log(), "DLQ."+cutoverCopy)
	// Production's letters are what the letter service got: the outbox's
	// rows, and the bean's calls for the events it took before the switch.
	var beanCalls []letterCall
	for _, c := range letters.log() {
		if c.Key == "" {
			beanCalls = append(beanCalls, c)
		}
	}
	recordLegacyCalls(ctx, t, prod, b, letters.URL, beanCalls, "DLQ."+cutoverQueue)
	reverse := filepath.Join(t.TempDir(), "reverse.json")
	r = inboxctl(t, "", "shadow", "diff", "--legacy", legShadowURL, "--shadow", prodURL, "--config", cutoverReverseConfig, "--legacy-events", "--report", reverse)
	wantCode(t, r, 0, "unexpected 0", "no unexpected differences", "skipped")
	rrep := readReport(t, reverse)
	if rrep.Counts.Skipped == 0 || rrep.Counts.Events == 0 {
		t.Errorf("reverse diff counts %+v: want events compared and the events before the reverse shadow skipped", rrep.Counts)
	}
	step("reverse shadow: shadow diff (legacy: the bean on the copy, shadow: production):\n%s", r.stdout)

	// 5. Remove: the bean stopped, the broker restarted without the
	// composite queue while the new consumer runs and messages wait.
	rev.drain(t)
	batchE1, batchE2 := cutoverMix("e", 30), cutoverMix("f", 30)
	publish(batchE1, 200)
	restarted := time.Now()
	cutoverBroker(t, "restart", "")
	restart := time.Since(restarted)
	leftOnCopy := depth(cutoverCopy)
	publish(batchE2, 50)
	allMu.Lock()
	sent = append([]cutEvent{}, all...)
	allMu.Unlock()
	settled(fmt.Sprintf("remove: broker restarted without the composite queue in %s (batch E1 of %d published just before)", restart.Round(time.Millisecond), len(batchE1)))
	if d := depth(cutoverCopy); d != leftOnCopy {
		t.Errorf("the copy grew from %d to %d after the broker lost its composite queue", leftOnCopy, d)
	}
	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", cutoverCopy, "--all"), 0)
	if d := depth(cutoverCopy); d != 0 {
		t.Errorf("%s still holds %d message(s) after dlq drop --all", cutoverCopy, d)
	}
	step("remove: %s held %d copies (batch E1's, forwarded before the restart), none after; emptied; nothing consumes it", cutoverCopy, leftOnCopy)
	stopRun(t, newRun, newLogs)
	step("done in %s", time.Since(began).Round(time.Millisecond))
}

// cutoverReverseConfig is the reverse shadow's diff config: the bean's
// tables and recorded calls in its shadow schema against production, whose
// letters are the outbox's rows (sent for real) and whose outcomes are the
// new consumer's inbox rows.
const cutoverReverseConfig = "testdata/cutover-reverse.json"

// shadowQuiet says whether the shadow database holds a terminal inbox row
// for each of events and the relay recorded every outbox message.
func shadowQuiet(t *testing.T, shadow *sql.DB, events int) bool {
	return shadowSettled(t, shadow) == events && count(t, shadow, `SELECT COUNT(*) FROM INBOXKIT_OUTBOX WHERE STATUS <> 'SENT'`) == 0
}

func kindsOf(msgs []cutEvent) map[string]string {
	out := map[string]string{}
	for _, m := range msgs {
		out[m.id] = m.kind
	}
	return out
}

func distinct(msgs []cutEvent) int {
	seen := map[string]bool{}
	for _, m := range msgs {
		seen[m.id] = true
	}
	return len(seen)
}

// expectedRules is what shadow diff sorts a run's events into: a resent
// event and its invoice duplicate-suppressed, a malformed one poison, an
// unknown customer a rejection.
func expectedRules(msgs []cutEvent) map[string]int64 {
	seen, want := map[string]bool{}, map[string]int64{}
	for _, m := range msgs {
		switch {
		case seen[m.id]:
			want[golden.RuleDuplicateSuppressed] += 2
		case m.kind == "malformed":
			want[golden.RulePoisonAtOnce]++
		case m.kind == "unknown":
			want[golden.RuleRejectionNotRetried]++
		}
		seen[m.id] = true
	}
	return want
}

func readReport(t *testing.T, path string) golden.ReconcileReport {
	t.Helper()
	var rep golden.ReconcileReport
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatalf("report %s: %v", path, err)
	}
	return rep
}

// recordLegacyCalls (re)writes INBOXKIT_LEGACY_CALLS of a bean's schema:
// the letter service's log and the bean's dead letters (keepLegacyCalls,
// from scratch each time).
func recordLegacyCalls(ctx context.Context, t *testing.T, db *sql.DB, b *brokerurl.Broker, dest string, calls []letterCall, dlqName string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+legacyCallsTable); err != nil {
		t.Fatal(err)
	}
	keepLegacyCalls(ctx, t, db, b, dest, calls, dlqName)
}

// productionLedger checks that every message sent so far is in production
// exactly once, or says what is missing or doubled. A valid event: the
// bean's letters (random ids) at most one per message of it, the new
// consumer's (its letter id) at most one and only where the bean wrote
// none, at least one letter; the letter service called once per letter
// (the bean without a key, the new consumer's relay with the letter id as
// Idempotency-Key); an archived document per letter. An invalid event: one
// dead letter on DLQ.<queue> (the bean's, or the new consumer's for a
// malformed one) or one REJECTED row (the new consumer's unknown customer).
func productionLedger(ctx context.Context, t *testing.T, prod *sql.DB, b *brokerurl.Broker, letters *letterService, sent []cutEvent) (string, error) {
	t.Helper()
	msgs, kinds, invoices := map[string]int{}, map[string]string{}, map[string]string{}
	for _, m := range sent {
		msgs[m.id]++
		kinds[m.id] = m.kind
		var body struct{ InvoiceNo string }
		_ = json.Unmarshal([]byte(m.body), &body)
		invoices[m.id] = body.InvoiceNo
	}
	type rows struct{ bean, fresh, calls, keyed, dead, rejected int }
	per := map[string]*rows{}
	get := func(id string) *rows {
		if per[id] == nil {
			per[id] = &rows{}
		}
		return per[id]
	}
	q, err := prod.QueryContext(ctx, `SELECT event_id, letter_id FROM shipping_letters`)
	if err != nil {
		return "", err
	}
	for q.Next() {
		var ev, id string
		if err := q.Scan(&ev, &id); err != nil {
			return "", err
		}
		if id == invoice.LetterIDFor(ev) {
			get(ev).fresh++
		} else {
			get(ev).bean++
		}
	}
	if err := q.Close(); err != nil {
		return "", err
	}
	if err := q.Err(); err != nil {
		return "", err
	}
	docs := map[string]int{}
	q, err = prod.QueryContext(ctx, `SELECT invoice_no FROM archived_documents`)
	if err != nil {
		return "", err
	}
	for q.Next() {
		var inv string
		if err := q.Scan(&inv); err != nil {
			return "", err
		}
		docs[inv]++
	}
	if err := q.Close(); err != nil {
		return "", err
	}
	if err := q.Err(); err != nil {
		return "", err
	}
	for _, c := range letters.log() {
		var l invoice.LetterRequest
		_ = json.Unmarshal(c.Body, &l)
		if c.Key != "" {
			get(l.EventID).keyed++
		} else {
			get(l.EventID).calls++
		}
	}
	dead, err := b.Browse(ctx, "DLQ."+cutoverQueue, 0)
	if err != nil {
		return "", err
	}
	for _, m := range dead {
		id := m.Headers["eventId"]
		if id == "" {
			id = m.Headers[dlq.HeaderEventID]
		}
		get(id).dead++
	}
	q, err = prod.QueryContext(ctx, `SELECT EVENT_ID FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'REJECTED'`)
	if err != nil {
		return "", err
	}
	for q.Next() {
		var id string
		if err := q.Scan(&id); err != nil {
			return "", err
		}
		get(id).rejected++
	}
	if err := q.Close(); err != nil {
		return "", err
	}
	if err := q.Err(); err != nil {
		return "", err
	}
	var beanLetters, newLetters, deadLetters, rejected int
	for id, n := range msgs {
		r := get(id)
		beanLetters += r.bean
		newLetters += r.fresh
		deadLetters += r.dead
		rejected += r.rejected
		switch {
		case kinds[id] == "ok" && (r.bean+r.fresh == 0 || r.bean > n || r.fresh > 1 || (r.fresh == 1 && r.bean > 0)):
			return "", fmt.Errorf("event %s (%d message(s)): %d letter(s) of the bean, %d of the new consumer", id, n, r.bean, r.fresh)
		case kinds[id] == "ok" && (r.calls != r.bean || r.keyed != r.fresh || docs[invoices[id]] != r.bean+r.fresh):
			return "", fmt.Errorf("event %s: %d and %d letter(s), %d call(s) without and %d with a key, %d document(s)", id, r.bean, r.fresh, r.calls, r.keyed, docs[invoices[id]])
		case kinds[id] != "ok" && (r.dead+r.rejected != 1 || r.bean+r.fresh+r.calls+r.keyed != 0):
			return "", fmt.Errorf("invalid event %s: %d dead letter(s), %d rejection(s), %d letter(s)", id, r.dead, r.rejected, r.bean+r.fresh)
		}
	}
	if len(per) > len(msgs) {
		for id := range per {
			if msgs[id] == 0 {
				return "", fmt.Errorf("production holds effects of %q, an event never sent", id)
			}
		}
	}
	return fmt.Sprintf("%d messages (%d events) in production exactly once: %d letters by the bean, %d by the new consumer, %d dead letters, %d rejections",
		len(sent), len(msgs), beanLetters, newLetters, deadLetters, rejected), nil
}
