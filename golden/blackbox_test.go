package golden_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/golden/goldentest"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

// Labels of the black-box records (approved.<label>.txt in testdata/golden).
const (
	labelJavaLegacy = "blackbox-java-legacy" // testdata/legacy-java LegacyInvoiceEventMdb
	labelJavaAfter  = "blackbox-java-after"  // testdata/legacy-java InvoiceEventConsumer
	labelInboxctl   = "blackbox-inboxctl"    // inboxctl run: the refactored Go consumer
)

// blackBoxCases are the cases recorded black-box for all three consumers.
var blackBoxCases = []string{
	"happy-path", "producer-resend", "crash-during-letter-call", "letter-service-down-then-up",
	"letter-service-down-past-threshold", "unknown-customer", "malformed-json", "two-instances-racing",
}

// blackBoxDefault is what `go test` records by default, per consumer (each
// recording starts real processes and waits for quiet): inboxctl run, the
// consumer under development, on every case; of the Java beans (a JVM per
// step, slower) the case where the Go port was wrong and the "after" bean's
// two flaws. INBOXKIT_BLACKBOX=all records every case of blackBoxCases for
// every consumer, INBOXKIT_BLACKBOX=case,case the cases named.
var blackBoxDefault = map[string][]string{
	labelJavaLegacy: {"crash-during-letter-call"},
	labelJavaAfter:  {"two-instances-racing", "letter-service-down-past-threshold"},
	labelInboxctl:   blackBoxCases,
}

// blackBoxOnly holds cases with steps only a black-box recording can play
// (database down/up); TestInvoiceGolden never sees them.
const blackBoxOnly = "../testdata/blackbox"

// blackBoxOnlySelection: every case for every consumer with
// INBOXKIT_BLACKBOX=all, inboxctl run's by default, none for a list.
func blackBoxOnlySelection(label string) bool {
	switch os.Getenv("INBOXKIT_BLACKBOX") {
	case "all":
		return true
	case "":
		return label == labelInboxctl
	}
	return false
}

func blackBoxSelection(label string) []string {
	switch v := os.Getenv("INBOXKIT_BLACKBOX"); v {
	case "all":
		return blackBoxCases
	case "":
		return blackBoxDefault[label]
	default:
		return strings.Split(v, ",")
	}
}

var (
	buildOnce        sync.Once
	javaCP, inboxctl string
	buildErr         error
	repoRoot, _      = filepath.Abs("..")
)

// buildSubjects compiles the Java fixtures (scripts/legacy-java, which
// installs the Debian client jars when missing) and inboxctl, once.
func buildSubjects(t *testing.T) (cp, ctl string) {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "legacy-java"), "classpath").Output()
		if err != nil {
			buildErr = fmt.Errorf("scripts/legacy-java classpath: %v (run it by hand to see why)", err)
			return
		}
		javaCP = strings.TrimSpace(string(out))
		dir, err := os.MkdirTemp("", "inboxkit-blackbox-*")
		if err != nil {
			buildErr = err
			return
		}
		inboxctl = filepath.Join(dir, "inboxctl")
		cmd := exec.Command("go", "build", "-o", inboxctl, "./cmd/inboxctl")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/inboxctl: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return javaCP, inboxctl
}

// javaCommand runs one Java bean; small heap, quick start.
func javaCommand(class string) string {
	return `exec java -Xmx96m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LEGACY_JAVA_CP" ` + class
}

// inboxctlCommand runs the refactored Go consumer the way an operator does.
// The migrations run one at a time (flock): two `inboxctl migrate` at once
// on PostgreSQL can fail with a duplicate pg_type row (CREATE TABLE IF NOT
// EXISTS is not safe against itself), as the first record of
// two-instances-racing showed. Its outbox relay parks a letter request
// after the scenario's max-attempts, tries again after 200ms (doubling),
// and a relay killed in a call gives its key back after 6s (its sends are
// bounded by 2s), so that the recorder's wait stays short.
const inboxctlCommand = `flock "$INBOXCTL.lock" "$INBOXCTL" migrate >/dev/null && exec "$INBOXCTL" run --queue "$INBOXKIT_QUEUE" ` +
	`--max-attempts "$INBOXKIT_MAX_ATTEMPTS" --reject-queue "$INBOXKIT_REJECT_QUEUE" --requeue-delay 200ms ` +
	`--relay-max-attempts "$INBOXKIT_MAX_ATTEMPTS" --relay-retry-delay 200ms --relay-lease 6s`

func blackBoxSubjects(t *testing.T) map[string]golden.BlackBox {
	cp, ctl := buildSubjects(t)
	env := []string{"LEGACY_JAVA_CP=" + cp, "INBOXCTL=" + ctl}
	subjects := map[string]golden.BlackBox{
		labelJavaLegacy: invoicegolden.BlackBox("java LegacyInvoiceEventMdb (legacy, real bean)", javaCommand("LegacyInvoiceEventMdb")),
		labelJavaAfter:  invoicegolden.BlackBox("java InvoiceEventConsumer (the document's \"after\")", javaCommand("InvoiceEventConsumer")),
		labelInboxctl:   invoicegolden.BlackBox("inboxctl run (inboxkit, refactored)", inboxctlCommand),
	}
	for k, bb := range subjects {
		bb.Env = env
		bb.Ready = "listening on" // the Java beans, after Connection.start
		if k == labelInboxctl {
			bb.Ready = "consumer started"
			// Its letter calls come from the relay after the commit, one
			// per letter: nothing competes for them, so a parallel send's
			// hold only delays the one call; it must end before the
			// relay's send timeout (a third of --relay-lease).
			bb.HoldTimeout = time.Second
		}
		if testing.Verbose() && os.Getenv("INBOXKIT_BLACKBOX_OUTPUT") != "" {
			bb.Output = os.Stderr
		}
		subjects[k] = bb
	}
	return subjects
}

// TestBlackBox records the real consumers from the outside, on the shared
// ActiveMQ and PostgreSQL, and compares each record with its approved file:
// the Java legacy bean, the Java "after" bean, and `inboxctl run`.
func TestBlackBox(t *testing.T) {
	t.Parallel()
	subjects := blackBoxSubjects(t)
	for _, label := range []string{labelJavaLegacy, labelJavaAfter, labelInboxctl} {
		t.Run(label, func(t *testing.T) {
			t.Parallel()
			goldentest.RunBlackBox(t, corpus, subjects[label], golden.Label(label), golden.Only(blackBoxSelection(label)...))
			if blackBoxOnlySelection(label) {
				goldentest.RunBlackBox(t, blackBoxOnly, subjects[label], golden.Label(label))
			}
		})
	}
}

// record is what the three-way comparison reads from a black-box transcript.
type record struct {
	letters, sent map[string]int    // per invoice number
	inbox         map[string]string // event id -> status
	outbox        map[string]int    // outbox rows per status (none: no outbox table)
	dlqReasons    []string          // reason of each DLQ.<queue> message ("" = the broker's own)
	rejected      int               // messages on <queue>.REJECTED
}

func (r record) brokerDLQ() int {
	n := 0
	for _, reason := range r.dlqReasons {
		if reason == "" {
			n++
		}
	}
	return n
}

// parseRecord reads an approved black-box transcript.
func parseRecord(text string) record {
	r := record{letters: map[string]int{}, sent: map[string]int{}, inbox: map[string]string{}, outbox: map[string]int{}}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		if title, ok := strings.CutPrefix(line, "== "); ok {
			section = title
			continue
		}
		item := strings.TrimSpace(line)
		if item == "" || strings.HasPrefix(item, "(") {
			continue
		}
		cells := strings.Split(item, " | ")
		switch {
		case section == "calls to external services":
			f := strings.Fields(item)
			_, result, _ := strings.Cut(item, " -> ")
			if len(f) > 6 && strings.HasPrefix(result, "sent") {
				r.sent[f[6]]++ // "1. letter-service key=K letter <id> invoice INV-1 ..."
			}
		case strings.HasPrefix(section, "table shipping_letters"):
			r.letters[cells[1]]++
		case strings.HasPrefix(section, "inbox INBOX_EVENT_PROCESSING"):
			r.inbox[cells[0]] = cells[2]
		case strings.HasPrefix(section, "outbox INBOXKIT_OUTBOX"): // MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, STATUS, ...
			r.outbox[cells[4]]++
		case section == "queue DLQ.invoices":
			if strings.HasSuffix(strings.Fields(item)[0], ".") {
				r.dlqReasons = append(r.dlqReasons, "")
			} else if reason, ok := strings.CutPrefix(item, "inboxkit-dlq-reason: "); ok {
				r.dlqReasons[len(r.dlqReasons)-1] = reason
			}
		case section == "queue invoices.REJECTED":
			if strings.HasSuffix(strings.Fields(item)[0], ".") {
				r.rejected++
			}
		}
	}
	return r
}

func readRecord(t *testing.T, dir, label string) record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, golden.ApprovedFile(label)))
	if err != nil {
		t.Fatalf("%v (record it: INBOXKIT_BLACKBOX=all go test ./golden/ -run TestBlackBox -update)", err)
	}
	return parseRecord(string(b))
}

// TestLegacyVersusRefactoredBlackBox compares, per black-box case, the
// approved records of the real legacy bean, the document's "after" bean
// and inboxctl run (TestBlackBox keeps them true), and the Go port
// invoice/legacy played in process: the port must do what the real bean
// does; inboxkit may differ from the legacy only where intended (the same
// table as TestLegacyVersusRefactored); the "after" bean's two flaws must
// show, and inboxkit must show neither.
func TestLegacyVersusRefactoredBlackBox(t *testing.T) {
	var sum strings.Builder
	fmt.Fprintf(&sum, "letters/sent per consumer; DLQ: messages in DLQ.invoices (b = the broker's, no reason); rej: rejected; outbox: inboxctl run's letter requests by status\n")
	fmt.Fprintf(&sum, "%-35s %-17s %-17s %-30s %-34s %-10s %s\n", "case", "java legacy", "Go port", "java after", "inboxctl run", "outbox", "inboxkit vs legacy")
	for _, name := range blackBoxCases {
		dir := filepath.Join(corpus, name)
		leg, after, ctl := readRecord(t, dir, labelJavaLegacy), readRecord(t, dir, labelJavaAfter), readRecord(t, dir, labelInboxctl)
		port, err := golden.PlayCase(t.Context(), dir, golden.SQLite, invoicegolden.Legacy())
		if err != nil {
			t.Fatal(err)
		}
		pe := effectsOf(port)

		// The Go port against the real bean.
		if !maps.Equal(pe.letters, leg.letters) || !maps.Equal(pe.sent, leg.sent) || pe.bdlq != leg.brokerDLQ() {
			t.Errorf("%s: the Go port (invoice/legacy) differs from the real bean: letters %v sent %v broker DLQ %d, real bean letters %v sent %v broker DLQ %d",
				name, pe.letters, pe.sent, pe.bdlq, leg.letters, leg.sent, leg.brokerDLQ())
		}

		// inboxkit's rules, and its differences from the real legacy bean.
		for inv := range ctl.letters {
			if ctl.letters[inv] > 1 || ctl.sent[inv] > 1 {
				t.Errorf("%s: inboxctl run wrote %d letters and sent %d for %s; want at most one", name, ctl.letters[inv], ctl.sent[inv], inv)
			}
		}
		if ctl.brokerDLQ() > 0 {
			t.Errorf("%s: the broker dead-lettered a message of inboxctl run without a reason", name)
		}
		var got []string
		if slices.ContainsFunc(slices.Concat(slices.Collect(maps.Values(leg.letters)), slices.Collect(maps.Values(leg.sent))), func(n int) bool { return n > 1 }) {
			got = append(got, diffDuplicates)
		}
		if ctl.rejected > 0 || slices.Contains(slices.Collect(maps.Values(ctl.inbox)), "REJECTED") {
			got = append(got, diffRejections)
		}
		if len(ctl.dlqReasons) > 0 || len(leg.dlqReasons) > 0 {
			got = append(got, diffDeadLetters)
		}
		for inv := range leg.letters {
			if ctl.letters[inv] == 0 {
				got = append(got, diffNoEffect)
				break
			}
		}
		if ctl.outbox["PARKED"] > 0 {
			got = append(got, diffParked)
		}
		if want := intended[name]; !slices.Equal(got, want) {
			t.Errorf("%s: the real legacy bean and inboxctl run differ in %v, intended %v", name, got, want)
		}

		// The "after" bean's flaws.
		switch name {
		case "two-instances-racing":
			if total(after.sent) < 2 {
				t.Errorf("%s: the \"after\" bean sent %d letters; its check-then-act should let both instances send", name, total(after.sent))
			}
			if total(ctl.sent) != 1 {
				t.Errorf("%s: inboxctl run sent %d letters under two competing instances; want 1", name, total(ctl.sent))
			}
		case "letter-service-down-past-threshold":
			if len(after.dlqReasons) != 1 || len(after.inbox) != 0 {
				t.Errorf("%s: want the \"after\" bean's message in the DLQ with no inbox row (its TECHNICAL_FAILURE mark rolled back); got DLQ %v inbox %v", name, after.dlqReasons, after.inbox)
			}
			if ctl.inbox["E-1001"] != "PROCESSED" || ctl.outbox["PARKED"] != 1 {
				t.Errorf("%s: inboxctl run left inbox %v, outbox %v; want E-1001 PROCESSED and its letter request PARKED", name, ctl.inbox, ctl.outbox)
			}
		}
		// The letter is requested through the outbox: every letter written
		// has its request, none is left pending, and a crash inside the
		// call sends the letter once (the relay sends it again, same key).
		if n := total(ctl.outbox); n != total(ctl.letters) || ctl.outbox["PENDING"] > 0 {
			t.Errorf("%s: inboxctl run's outbox %v for %d letters; want one settled request per letter", name, ctl.outbox, total(ctl.letters))
		}
		if name == "crash-during-letter-call" && (total(ctl.sent) != 1 || ctl.outbox["SENT"] != 1) {
			t.Errorf("%s: inboxctl run sent %d letters, outbox %v; want one letter sent, its request SENT", name, total(ctl.sent), ctl.outbox)
		}

		diffs := strings.Join(got, ", ")
		if diffs == "" {
			diffs = "(same business effect)"
		}
		fmt.Fprintf(&sum, "%-35s %-17s %-17s %-30s %-34s %-10s %s\n", name,
			fmt.Sprintf("%d/%d DLQ %db", total(leg.letters), total(leg.sent), leg.brokerDLQ()),
			fmt.Sprintf("%d/%d DLQ %db", total(pe.letters), total(pe.sent), pe.bdlq),
			fmt.Sprintf("%d/%d DLQ %d(%db) inbox %s", total(after.letters), total(after.sent), len(after.dlqReasons), after.brokerDLQ(), statuses(after.inbox)),
			fmt.Sprintf("%d/%d DLQ %d rej %d inbox %s", total(ctl.letters), total(ctl.sent), len(ctl.dlqReasons), ctl.rejected, statuses(ctl.inbox)),
			outboxSummary(ctl.outbox), diffs)
	}
	t.Logf("real legacy bean, Go port, document's \"after\" bean and inboxkit (black-box records):\n%s", sum.String())
}

// outboxSummary is the outbox column: rows per status ("-": none).
func outboxSummary(rows map[string]int) string {
	if len(rows) == 0 {
		return "-"
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		s = append(s, fmt.Sprintf("%d %s", rows[k], k))
	}
	return strings.Join(s, ",")
}

func statuses(inbox map[string]string) string {
	if len(inbox) == 0 {
		return "-"
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(inbox)) {
		s = append(s, inbox[k])
	}
	return strings.Join(s, ",")
}

// TestBlackBoxRefusesInsideFaults: faults that need a hook inside the
// process are refused before anything starts, naming the line and the way out.
func TestBlackBoxRefusesInsideFaults(t *testing.T) {
	for _, tt := range []struct{ step, want string }{
		{"crash before-commit", "line 3: crash before-commit needs a hook inside the process"},
		{"fail commit 1", "line 3: the black-box recorder plays only the service \"letter-service\", not \"commit\""},
	} {
		sc, err := golden.Parse([]byte("message a\n  body {}\n" + tt.step + "\nsend a\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = golden.PlayBlackBox(t.Context(), sc, invoicegolden.BlackBox("test", "true"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: PlayBlackBox = %v, want an error containing %q", tt.step, err, tt.want)
		}
	}
}

// TestDatabaseStepIsBlackBoxOnly: the in-process harness refuses database
// down with the line and the in-process alternative.
func TestDatabaseStepIsBlackBoxOnly(t *testing.T) {
	sc, err := golden.Parse([]byte("message a\n  body {}\ndatabase down\nsend a\n"))
	if err != nil {
		t.Fatal(err)
	}
	db, cleanup, err := golden.OpenBackend(t.Context(), golden.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	_, err = golden.Play(t.Context(), db, sc, invoicegolden.Legacy())
	if err == nil || !strings.Contains(err.Error(), "line 3: database down needs a black-box recording") {
		t.Errorf("Play = %v, want the black-box-only refusal", err)
	}
}

// TestBlackBoxCrashedCallsOfOneKey: inboxctl run, killed inside every
// letter-service call of one event, has one letter sent: the recorder's
// service records the later calls, which carry the key it took, as what it
// did with them (duplicates), not as sent (issue 23 item 14).
func TestBlackBoxCrashedCallsOfOneKey(t *testing.T) {
	if testing.Short() {
		t.Skip("-short skips this scenario (six kill -9 in a row, about 40 s); ./scripts/test runs it")
	}
	t.Parallel()
	sc, err := golden.ReadScenario(filepath.Join(corpus, "crash-on-every-delivery"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := golden.PlayBlackBox(t.Context(), sc, blackBoxSubjects(t)[labelInboxctl])
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	var results []string
	for _, c := range tr.Calls {
		results = append(results, c.Key+" -> "+c.Result)
		if strings.HasPrefix(c.Result, "sent") {
			sent++
		}
	}
	if sent != 1 || len(tr.Calls) < 2 {
		t.Errorf("calls of letter-service:\n%s\nwant several calls with one key, one of them sent", strings.Join(results, "\n"))
	}
}
