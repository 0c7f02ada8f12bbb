package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/invoice"
)

// The size of the Java shadow run (issue 26, item 5): INBOXKIT_SHADOW_EVENTS
// events (default 200; the full run is 2000) published at
// INBOXKIT_SHADOW_RATE messages per second (default 100). With
// INBOXKIT_SHADOW_KEEP=1 the two schemas are kept (their URLs are logged)
// for `inboxctl shadow diff`.
const (
	envShadowEvents = "INBOXKIT_SHADOW_EVENTS"
	envShadowRate   = "INBOXKIT_SHADOW_RATE"
	envShadowKeep   = "INBOXKIT_SHADOW_KEEP"
)

// legacyCallsTable is where the test leaves the legacy side's outgoing
// effects for a diff, in the legacy schema, with the columns of
// INBOXKIT_SHADOW_CALLS: the letter service's call log (kind "call") and
// the broker's dead-letter queue of the legacy queue (kind "dead-letter").
const legacyCallsTable = "INBOXKIT_LEGACY_CALLS"

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// javaEvent is one message of the Java run.
type javaEvent struct {
	id, body string
	kind     string // "ok", "malformed", "unknown"
}

// javaMix is the Java run's traffic: n events, 2% malformed, 1% of unknown
// customers, the rest valid; and 5% of n producer resends of valid events
// (the same event id and body again, about ten events later).
func javaMix(n int) (msgs []javaEvent, valid, malformed, unknown, resends int) {
	var events []javaEvent
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("j-%d", i)
		ev := javaEvent{id: id, kind: "ok", body: fmt.Sprintf(`{"invoiceNo":"INV-J%d","customerNo":"K-%d00","amount":"%d.%02d","currency":"EUR","issuedAt":"2026-01-05"}`, i, 1+i%2, 10+i%90, i%100)}
		switch {
		case i%50 == 25:
			ev.kind, ev.body = "malformed", `{"invoiceNo":"INV-J`+strconv.Itoa(i)+`", not json`
			malformed++
		case i%100 == 50:
			ev.kind, ev.body = "unknown", fmt.Sprintf(`{"invoiceNo":"INV-J%d","customerNo":"K-999","amount":"5.00","currency":"EUR","issuedAt":"2026-01-05"}`, i)
			unknown++
		default:
			valid++
		}
		events = append(events, ev)
		msgs = append(msgs, ev)
		if i%20 == 0 { // resend the event ten before (or the one before it, when that one is not valid)
			again := events[i-11]
			if again.kind != "ok" {
				again = events[i-12]
			}
			msgs = append(msgs, again)
			resends++
		}
	}
	return msgs, valid, malformed, unknown, resends
}

// keptSchema creates a PostgreSQL schema; it is dropped at the end unless
// INBOXKIT_SHADOW_KEEP=1. It returns the URL with its search_path.
func keptSchema(t *testing.T, name string) (*sql.DB, string) {
	t.Helper()
	base := dbtest.PostgresDSN()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE SCHEMA " + name); err != nil {
		t.Fatalf("PostgreSQL at %s: create schema: %v (start it with pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)", base, err)
	}
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if os.Getenv(envShadowKeep) == "1" {
			t.Logf("kept %s", u.String())
		} else {
			_, _ = admin.Exec("DROP SCHEMA " + name + " CASCADE")
		}
		admin.Close()
	})
	return db, u.String()
}

// shadowJavaTest is issue 26's item 5 (the run): the Java legacy bean
// (testdata/legacy-java) consumes the production queue of the test's
// ActiveMQ into the production schema and calls the letter service;
// `inboxctl run --shadow` consumes the composite queue's copy into a shadow
// schema, and a build of inboxctl with the seeded bug (build tag
// inboxkit_seededbug) a third copy into a second shadow schema. All process
// everything, and nothing reaches production from the shadows.
func shadowJavaTest(t *testing.T, broker string) {
	if testing.Short() {
		t.Skip("the Java shadow run starts a JVM and runs for tens of seconds: not under -short")
	}
	n, rate := envInt(t, envShadowEvents, 200), envInt(t, envShadowRate, 100)
	type built struct {
		bin string
		err error
	}
	bugBuild := make(chan built, 1) // the build runs while the beans start
	go func() { bin, err := seededBugBinary(); bugBuild <- built{bin, err} }()
	classpath := legacyJavaClasspath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sfx := strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36))
	prod, prodURL := keptSchema(t, "shadowjava_legacy_"+sfx)
	prod2, prod2URL := keptSchema(t, "shadowjava_legacy2_"+sfx) // the second legacy copy, for the calibration
	shadow, shadowURL := keptSchema(t, "shadowjava_shadow_"+sfx)
	bug, bugURL := keptSchema(t, "shadowjava_rounded_"+sfx) // the seeded bug's shadow
	for _, db := range []*sql.DB{prod, prod2} {             // the legacy schemas: business tables only
		if err := invoice.Migrate(ctx, db, "postgres"); err != nil {
			t.Fatal(err)
		}
		if err := invoice.SeedCustomers(ctx, db, inbox.Postgres); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{shadowURL, bugURL} {
		wantCode(t, inboxctl(t, "", "migrate", "--db", u, "--seed-customers"), 0, "migrated")
	}
	letters, letters2 := newLetterService(t), newLetterService(t)
	queue, copyQueue, legacyCopyQueue, bugQueue := shadowQueueJava, shadowQueueJava+shadowSuffix, shadowQueueJava+shadowCopySuffix, shadowQueueJava+shadowBugSuffix

	// The legacy bean, as golden's black-box recorder starts it; a second
	// one on the broker's second copy into the second legacy schema.
	javaOut := startJavaBean(t, classpath, shadowAMQOpenWire, prodURL, queue, letters.URL, "1").out
	javaOut2 := startJavaBean(t, classpath, shadowAMQOpenWire, prod2URL, legacyCopyQueue, letters2.URL, "2").out
	waitFor(t, "the Java bean listening", func() bool { return strings.Contains(javaOut.String(), "listening on "+queue) }, javaOut)
	waitFor(t, "the second Java bean listening", func() bool { return strings.Contains(javaOut2.String(), "listening on "+legacyCopyQueue) }, javaOut2)

	// The shadow consumer on the copy, given the real letter service's URL:
	// recorded, never called; the seeded bug's build on the third copy.
	bb := <-bugBuild
	if bb.err != nil {
		t.Fatal(bb.err)
	}
	run, logs := startBinary(ctx, t, binary, nil, shadowRunArgs(shadowURL, prodURL, broker, copyQueue, letters.URL)...)
	bugRun, bugLogs := startBinary(ctx, t, bb.bin, nil, shadowRunArgs(bugURL, prodURL, broker, bugQueue, letters.URL)...)
	waitFor(t, "the shadow run consuming", func() bool { return strings.Contains(logs.String(), `"msg":"consumer started"`) }, logs)
	waitFor(t, "the seeded bug's run consuming", func() bool { return strings.Contains(bugLogs.String(), `"msg":"consumer started"`) }, bugLogs)

	msgs, valid, malformed, unknown, resends := javaMix(n)
	b, err := brokerurl.Open(broker, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Message i is due at began + i/rate; publishers, a connection each,
	// send them. A STOMP publish waits for the broker's receipt, so one
	// connection sends at most 1/(receipt time) messages a second: with
	// four connections and a ticker (which drops the ticks it could not
	// deliver while every connection waited) the earlier runs reached
	// 47-80 msg/s of 100. Now a late message is sent at once (the
	// schedule, not the ticks, sets the pace) and there are enough
	// connections for receipts of up to publishers/rate seconds; the
	// receipt times are logged. A resend may overtake its neighbours: it
	// is later than its original all the same.
	const publishers = 16
	began := time.Now()
	next := make(chan javaEvent)
	errs := make(chan error, publishers)
	receipts := make([][]time.Duration, publishers)
	var wg sync.WaitGroup
	for p := range publishers {
		pub, err := b.Publisher(ctx) // a connection each: one connection waits for one receipt at a time
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				h := map[string]string{"amq-msg-type": "text", "eventId": m.id, "correlationId": "corr-java"}
				sent := time.Now()
				if err := pub.Publish(ctx, queue, h, []byte(m.body)); err != nil {
					errs <- err
					return
				}
				receipts[p] = append(receipts[p], time.Since(sent))
			}
		}()
	}
	for i, m := range msgs {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		next <- m
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	published := time.Since(began)

	// Both sides process everything: the legacy bean a letter per message
	// (resends included), the broker's DLQ the rest after its redeliveries;
	// each shadow a terminal row per event.
	legacyLetters := valid + resends
	depth := func(q string) int {
		d, _, err := b.Depth(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	all := slices.Concat(receipts...)
	slices.Sort(all)
	t.Logf("%d events (%d messages: %d resends, %d malformed, %d unknown customers) published in %s (%.0f msg/s, paced at %d; receipt median %s, p99 %s, max %s)",
		n, len(msgs), resends, malformed, unknown, published.Round(time.Millisecond), float64(len(msgs))/published.Seconds(), rate,
		all[len(all)/2].Round(time.Millisecond), all[len(all)*99/100].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond))
	// The wait ends when both sides are done, or when neither made progress
	// for wait (the beans' pace depends on the machine's load: 1 to 10
	// messages a second here).
	const wait = 2 * time.Minute
	deadline := time.Now().Add(wait)
	var legacyDone, shadowDone time.Duration
	var last [6]int
	for legacyDone == 0 || shadowDone == 0 {
		l := count(t, prod, `SELECT COUNT(*) FROM shipping_letters`)
		dl := depth("DLQ." + queue)
		l2, dl2 := count(t, prod2, `SELECT COUNT(*) FROM shipping_letters`), depth("DLQ."+legacyCopyQueue)
		s, sb := shadowSettled(t, shadow), shadowSettled(t, bug)
		if now := [6]int{l, dl, l2, dl2, s, sb}; now != last {
			last, deadline = now, time.Now().Add(wait)
		}
		if legacyDone == 0 && l == legacyLetters && dl == malformed+unknown && depth(queue) == 0 &&
			l2 == legacyLetters && dl2 == malformed+unknown && depth(legacyCopyQueue) == 0 {
			legacyDone = time.Since(began)
		}
		if shadowDone == 0 && s == n && sb == n {
			shadowDone = time.Since(began)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress for %s: the legacy bean has %d of %d letters, %d of %d dead letters (its copy %d, %d); the shadows %d and %d (seeded bug) of %d events settled\n%s\n%s\n%s\n%s",
				wait, l, legacyLetters, dl, malformed+unknown, l2, dl2, s, sb, n, javaOut, javaOut2, logs, bugLogs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitShadowDone(t, shadow, n, logs)
	waitShadowDone(t, bug, n, bugLogs)
	stopRun(t, run, logs)
	stopRun(t, bugRun, bugLogs)
	t.Logf("since the first message, the two legacy beans were done after %s, the two shadows after %s", legacyDone.Round(time.Millisecond), shadowDone.Round(time.Millisecond))
	wantVariantLogged(t, bugLogs)

	// The legacy side: what the bean does, warts included.
	calls := letters.log()
	wantBeanCallsOnly(t, calls, legacyLetters)
	if got := count(t, prod, `SELECT COUNT(*) FROM archived_documents`); got != legacyLetters {
		t.Errorf("legacy archived_documents: %d, want %d", got, legacyLetters)
	}
	// Nothing from the shadow in production: no table of its own, none of
	// its letters.
	if got := count(t, prod, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name NOT IN ('invoice_customers','shipping_letters','archived_documents')`); got != 0 {
		t.Errorf("the production schema has %d table(s) it did not have before the shadow run", got)
	}
	ids := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		ids = append(ids, invoice.LetterIDFor(fmt.Sprintf("j-%d", i)))
	}
	if got := count(t, prod, `SELECT COUNT(*) FROM shipping_letters WHERE letter_id = ANY($1)`, ids); got != 0 {
		t.Errorf("%d of the shadow's letters are in the production schema", got)
	}
	for _, q := range []string{copyQueue, bugQueue} {
		if d := depth("DLQ." + q); d != 0 {
			t.Errorf("the shadow run left %d message(s) on DLQ.%s: it must only record its dead letters", d, q)
		}
		if d := depth(q); d != 0 {
			t.Errorf("%d copies left on %s", d, q)
		}
	}

	// The shadow side: the new consumer's answer to the same traffic, and
	// its build's with the seeded bug.
	for _, db := range []*sql.DB{shadow, bug} {
		wantShadowOutcomes(t, db, inbox.Postgres, valid, malformed, unknown)
	}

	// The legacy side's outgoing effects, beside its business rows, for a diff.
	keepLegacyCalls(ctx, t, prod, b, letters.URL, calls, "DLQ."+queue)
	// The second copy's calls: its letter service stands in for the same
	// service, so the destination is the same.
	keepLegacyCalls(ctx, t, prod2, b, letters.URL, letters2.log(), "DLQ."+legacyCopyQueue)

	// The reconciliation of the real schemas (item 5's join).
	shadowJavaDiff(t, prodURL, prod2URL, shadowURL, msgs)
	wantSeededBugFound(t, "", prodURL, bugURL, javaMixExpected(msgs))
}

// shadowRunArgs are the arguments of `inboxctl run --shadow` on the copy q
// into the shadow database db, beside the production database prodDB,
// given the real letter service's URL (recorded, never called).
func shadowRunArgs(db, prodDB, broker, q, letterService string) []string {
	return []string{"run", "--shadow", "--db", db, "--production-db", prodDB, "--broker", broker, "--queue", q,
		"--letter-service", letterService, "--reject-queue", q + ".rejected", "--concurrency", "4", "--log-format", "json"}
}

// wantVariantLogged checks that a run of the seeded bug's build logged its
// handler variant.
func wantVariantLogged(t *testing.T, logs fmt.Stringer) {
	t.Helper()
	if !strings.Contains(logs.String(), "handler variant") {
		t.Errorf("the seeded bug's run did not log its handler variant\n%s", logs)
	}
}

// wantShadowOutcomes checks a shadow database (dialect d) after a run of
// javaMix's traffic: a terminal inbox row per event, a letter per valid
// event, and the outgoing effects recorded (a letter request per valid
// event, a dead letter per malformed one, a rejection per unknown customer).
func wantShadowOutcomes(t *testing.T, db *sql.DB, d inbox.Dialect, valid, malformed, unknown int) {
	t.Helper()
	for status, want := range map[string]int{"PROCESSED": valid, "REJECTED": unknown, "DEAD_LETTERED": malformed} {
		if got := count(t, db, d.Rebind(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = ?`), status); got != want {
			t.Errorf("shadow inbox: %d %s row(s), want %d", got, status, want)
		}
	}
	if got := count(t, db, `SELECT COUNT(*) FROM shipping_letters`); got != valid {
		t.Errorf("shadow shipping_letters: %d, want %d (one per event)", got, valid)
	}
	rec := shadowCalls(t, db)
	if rec[shadowKindOutbox] != valid || rec[shadowKindDeadLetter] != malformed || rec[shadowKindReject] != unknown {
		t.Errorf("shadow calls recorded %v, want %d outbox, %d dead-letter, %d reject", rec, valid, malformed, unknown)
	}
}

// shadowJavaConfig is the diff config of the Java run's schemas: the bean's
// business tables and INBOXKIT_LEGACY_CALLS against the shadow's business
// tables, INBOXKIT_SHADOW_CALLS and inbox rows.
const shadowJavaConfig = "testdata/shadow-java.json"

// shadowJavaDiff runs `inboxctl shadow diff` on the Java run's legacy and
// shadow schemas: its scrub list is exactly the noise the calibration
// against the second legacy copy finds, and exactly the columns that differ
// without it; with it, every event is identical or in the expected category the
// traffic put it in, 0 unexpected.
func shadowJavaDiff(t *testing.T, legacyURL, legacyCopyURL, shadowURL string, msgs []javaEvent) {
	t.Helper()
	raw, err := os.ReadFile(shadowJavaConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cfg golden.ReconcileConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", shadowJavaConfig, err)
	}
	exp := javaMixExpected(msgs)

	// The scrub list is the noise: the calibration against the second
	// legacy copy finds exactly its columns, and without it exactly its
	// columns differ between legacy and shadow.
	noScrub := cfg
	noScrub.Scrub = nil
	b, _ := json.Marshal(noScrub)
	noScrubFile := filepath.Join(t.TempDir(), "noscrub.json")
	if err := os.WriteFile(noScrubFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	calibrated := filepath.Join(t.TempDir(), "calibrated.json")
	if err := os.WriteFile(calibrated, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := inboxctl(t, "", "shadow", "diff", "--calibrate", "--legacy", legacyURL, "--legacy-copy", legacyCopyURL, "--config", calibrated, "--write")
	wantCode(t, r, 0, "noise (columns that differ between the legacy copies")
	t.Logf("shadow diff --calibrate:\n%s%s", r.stdout, r.stderr)
	var written golden.ReconcileConfig
	if b, err := os.ReadFile(calibrated); err != nil || json.Unmarshal(b, &written) != nil {
		t.Fatalf("calibration --write: %v\n%s", err, b)
	}
	if got, want := sortedCopyOf(written.Scrub), sortedCopyOf(cfg.Scrub); !slices.Equal(got, want) {
		t.Errorf("calibration found the noise %v; %s scrubs %v", got, shadowJavaConfig, want)
	}
	r, rep := shadowDiffJSON(t, legacyURL, shadowURL, noScrubFile, "--samples", strconv.Itoa(int(exp.events)))
	if r.code != 1 {
		t.Fatalf("shadow diff without the scrub list: want exit 1 (ids and times differ)\n%s", r)
	}
	differ := map[string]bool{}
	for _, s := range rep.Samples["unexpected"] {
		for _, d := range s.Differences {
			if d.Rows == "" {
				differ[d.Table+"."+d.Column] = true
			}
		}
	}
	if got, want := sortedCopyOf(slices.Collect(maps.Keys(differ))), sortedCopyOf(cfg.Scrub); !slices.Equal(got, want) {
		t.Errorf("without the scrub list, the columns %v differ; %s scrubs %v", got, shadowJavaConfig, want)
	}

	// The reconciliation.
	wantReconciled(t, "", legacyURL, shadowURL, exp)
}

// shadowDiffJSON runs `inboxctl shadow diff -o json` of the legacy side
// against the shadow with config and args, and decodes its report.
func shadowDiffJSON(t *testing.T, legacyURL, shadowURL, config string, args ...string) (result, golden.ReconcileReport) {
	t.Helper()
	r := inboxctl(t, "", append([]string{"shadow", "diff", "--legacy", legacyURL, "--shadow", shadowURL, "--config", config, "-o", "json"}, args...)...)
	var rep golden.ReconcileReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("shadow diff -o json: %v\n%s", err, r)
	}
	return r, rep
}

// wantReconciled checks `shadow diff` of a run of javaMix's traffic with
// shadowJavaConfig: exit 0, each event identical or in the expected
// category the traffic put it in, 0 unexpected. It logs the text report,
// prefixed by label.
func wantReconciled(t *testing.T, label, legacyURL, shadowURL string, exp mixExpected) {
	t.Helper()
	r, rep := shadowDiffJSON(t, legacyURL, shadowURL, shadowJavaConfig)
	if r.code != 0 || rep.Counts.Unexpected != 0 || !mapsEqual(rep.Rules, exp.rules) || rep.Counts.Events != exp.events || rep.Counts.Identical != exp.identical {
		t.Fatalf("shadow diff: exit %d, counts %+v, rules %v; want exit 0, %d events, %d identical, 0 unexpected, rules %v\n%s",
			r.code, rep.Counts, rep.Rules, exp.events, exp.identical, exp.rules, r)
	}
	text := inboxctl(t, "", "shadow", "diff", "--legacy", legacyURL, "--shadow", shadowURL, "--config", shadowJavaConfig)
	wantCode(t, text, 0, "unexpected 0", "no unexpected differences")
	t.Logf("%sshadow diff --config %s:\n%s", label, shadowJavaConfig, text.stdout)
}

// wantSeededBugFound checks `shadow diff` of the legacy side against the
// shadow database of the seeded bug's build (its letters' amounts rounded)
// after a run of javaMix's traffic: exit 1, naming exactly the events whose
// amount has cents, which differ in letters.body.amount only. It logs the
// text report, prefixed by label.
func wantSeededBugFound(t *testing.T, label, legacyURL, bugURL string, exp mixExpected) {
	t.Helper()
	r, rep := shadowDiffJSON(t, legacyURL, bugURL, shadowJavaConfig, "--samples", strconv.Itoa(len(exp.cents)))
	if r.code != 1 || rep.Counts.Unexpected != int64(len(exp.cents)) || !exp.listed(rep) {
		t.Fatalf("seeded bug: exit %d, %d unexpected %v; want exit 1, exactly the %d events whose amount has cents %v\n%s",
			r.code, rep.Counts.Unexpected, rep.UnexpectedEvents, len(exp.cents), exp.cents, r)
	}
	exp.wantOnlyAmount(t, rep, r.stderr)
	first := sortedCopyOf(exp.cents)[0]
	text := inboxctl(t, "", "shadow", "diff", "--legacy", legacyURL, "--shadow", bugURL, "--config", shadowJavaConfig, "--samples", "2")
	wantCode(t, text, 1, fmt.Sprintf("unexpected differences in %d events: %s,", len(exp.cents), first), "event "+first+"\n", "letters.body.amount: legacy")
	t.Logf("%sseeded bug (the build with tag inboxkit_seededbug):\n%s%s", label, text.stdout, text.stderr)
}

// mixExpected is what a diff of a run of javaMix's traffic reports.
type mixExpected struct {
	rules             map[string]int64 // expected events per rule
	events, identical int64
	cents             []string        // the valid events whose amount has cents: what rounding changes
	resent            map[string]bool // the events the producer resent
}

// javaMixExpected is what each category holds after a run of msgs: per
// event id, and per invoice (the archived documents' key) for each valid
// event.
func javaMixExpected(msgs []javaEvent) mixExpected {
	kinds, seen, resent := map[string]string{}, map[string]bool{}, map[string]bool{}
	var cents []string
	for _, m := range msgs {
		if seen[m.id] {
			resent[m.id] = true
			continue
		}
		seen[m.id] = true
		kinds[m.id] = m.kind
		var body struct{ Amount string }
		if m.kind == "ok" && json.Unmarshal([]byte(m.body), &body) == nil && !strings.HasSuffix(body.Amount, ".00") {
			cents = append(cents, m.id)
		}
	}
	valid := 0
	want := map[string]int64{}
	for _, k := range kinds {
		switch k {
		case "ok":
			valid++
		case "malformed":
			want[golden.RulePoisonAtOnce]++
		case "unknown":
			want[golden.RuleRejectionNotRetried]++
		}
	}
	// A resend: the bean wrote the letter, the document and the call
	// twice, the shadow once; as an event and as an invoice.
	want[golden.RuleDuplicateSuppressed] = 2 * int64(len(resent))
	events := int64(len(kinds) + valid)
	identical := events - want[golden.RuleDuplicateSuppressed] - want[golden.RulePoisonAtOnce] - want[golden.RuleRejectionNotRetried]
	return mixExpected{rules: want, events: events, identical: identical, cents: cents, resent: resent}
}

// listed reports whether rep lists exactly the events whose amount has
// cents as its unexpected events, in key order; the report lists the first
// 1000 of them.
func (e mixExpected) listed(rep golden.ReconcileReport) bool {
	want := sortedCopyOf(e.cents)
	return slices.Equal(rep.UnexpectedEvents, want[:min(len(want), 1000)])
}

// wantOnlyAmount checks the report of a diff against a shadow whose letter
// amounts are rounded: every unexpected event differs in
// letters.body.amount only (and, a resend, in the bean's second rows), and
// stderr names each event with the column.
func (e mixExpected) wantOnlyAmount(t *testing.T, rep golden.ReconcileReport, stderr string) {
	t.Helper()
	for _, s := range rep.Samples["unexpected"] {
		for _, d := range s.Differences {
			amount := d.Table == "letters" && d.Column == "body.amount"
			resentCopy := d.Column == "*" && d.Rows == "legacy-only" && e.resent[s.Event] // a resend's second row on the legacy side
			if !amount && !resentCopy {
				t.Errorf("seeded bug: event %s differs in %s.%s (%s), want only letters.body.amount", s.Event, d.Table, d.Column, d.Rows)
			}
		}
	}
	// Exit 1 names the events and the column (-o json: on stderr).
	for _, id := range e.cents {
		if want := id + " (letters.body.amount)"; !e.resent[id] && !strings.Contains(stderr, want) {
			t.Errorf("seeded bug: stderr lacks %q\n%s", want, stderr)
		}
	}
}

// wantBeanCallsOnly checks the letter service's calls: want of them (one
// per valid message, resends included), none with an Idempotency-Key (a
// shadow's relay would send one).
func wantBeanCallsOnly(t *testing.T, calls []letterCall, want int) {
	t.Helper()
	if len(calls) != want {
		t.Errorf("the letter service got %d call(s), want %d (one per valid message, resends included)", len(calls), want)
	}
	for _, c := range calls {
		if c.Key != "" {
			t.Errorf("the letter service got a call with Idempotency-Key %s: a shadow's relay sent for real (%s)", c.Key, c.Body)
		}
	}
}

// keepLegacyCalls writes the letter service's call log and the legacy
// queue's dead letters (browsed on dlqName) into INBOXKIT_LEGACY_CALLS of
// the legacy PostgreSQL schema (the columns of INBOXKIT_SHADOW_CALLS;
// created after the checks above, which want the production schema as the
// bean left it).
func keepLegacyCalls(ctx context.Context, t *testing.T, db *sql.DB, b *brokerurl.Broker, dest string, calls []letterCall, dlqName string) {
	t.Helper()
	dead, err := b.Browse(ctx, dlqName, 0)
	if err != nil {
		t.Fatal(err)
	}
	writeLegacyCalls(ctx, t, db, inbox.Postgres, dest, calls, dlqName, dead)
}

// writeLegacyCalls is keepLegacyCalls on a database of dialect d, with
// the dead letters already read from dlqName.
func writeLegacyCalls(ctx context.Context, t *testing.T, db *sql.DB, d inbox.Dialect, dest string, calls []letterCall, dlqName string, dead []inboxkit.Message) {
	t.Helper()
	blob := "BYTEA"
	if d.Name() != inbox.Postgres.Name() {
		blob = "LONGBLOB"
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+legacyCallsTable+` (KIND VARCHAR(20) NOT NULL, DESTINATION VARCHAR(400) NOT NULL,
		MESSAGE_ID VARCHAR(200), CAUSE_EVENT_ID VARCHAR(200), CORRELATION_ID VARCHAR(200), ATTEMPT INTEGER NOT NULL, HEADERS TEXT, BODY `+blob+`,
		RECORDED_AT TIMESTAMP NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ins := d.Rebind(`INSERT INTO ` + legacyCallsTable + ` (KIND, DESTINATION, MESSAGE_ID, CAUSE_EVENT_ID, CORRELATION_ID, ATTEMPT, HEADERS, BODY, RECORDED_AT) VALUES (?, ?, ?, ?, ?, 1, ?, ?, CURRENT_TIMESTAMP)`)
	for _, c := range calls {
		var l invoice.LetterRequest
		_ = json.Unmarshal(c.Body, &l)
		if _, err := db.ExecContext(ctx, ins, "call", dest, l.LetterID, l.EventID, nil, `{"Content-Type":"application/json"}`, c.Body); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range dead {
		h, _ := json.Marshal(m.Headers)
		if _, err := db.ExecContext(ctx, ins, "dead-letter", dlqName, m.BrokerMessageID, m.Headers["eventId"], m.Headers["correlationId"], string(h), m.Body); err != nil {
			t.Fatal(err)
		}
	}
}

// shadowSettled counts the shadow inbox's terminal rows.
func shadowSettled(t *testing.T, db *sql.DB) int {
	return count(t, db, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS IN ('PROCESSED','REJECTED','DEAD_LETTERED')`)
}
