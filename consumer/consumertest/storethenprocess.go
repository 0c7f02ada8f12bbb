package consumertest

import (
	"fmt"
	"sort"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// testStoreThenProcess runs the consumer in ModeStoreThenProcess: every
// delivery is stored and acknowledged at once (copies too, changing
// nothing); leased workers process the entries; poison, a message without
// event id and one past the backout threshold end in the DLQ; a rejection is
// REJECTED; every valid event is processed exactly once.
func testStoreThenProcess(t *testing.T, e *env) {
	const n = 200
	sent := 0
	for i := range n {
		e.send(t, fmt.Sprintf("stp-%d", i), "corr-stp", Event{Amount: i}.Body())
		sent++
		if i%5 == 0 { // 20% sent twice
			e.send(t, fmt.Sprintf("stp-%d", i), "corr-stp", Event{Amount: i}.Body())
			sent++
		}
	}
	e.send(t, "stp-malformed", "corr-stp", []byte(`{"amount": oops`))
	e.send(t, "", "corr-stp", Event{Amount: 1}.Body())
	e.send(t, "stp-reject", "corr-stp", Event{Amount: 1, Reject: true}.Body())
	e.send(t, "stp-fail", "corr-stp", Event{Amount: 1, Fail: true}.Body())
	sent += 4

	r := e.start(t, runOpts{concurrency: 2, mode: consumer.ModeStoreThenProcess, rejectQueue: e.rejects})
	terminal := func() bool {
		c := e.counts(t)
		return c[inboxkit.StatusProcessed] == n && c[inboxkit.StatusRejected] == 1 && c[inboxkit.StatusDeadLettered] == 2
	}
	e.waitFor(t, fmt.Sprintf("%d PROCESSED, 1 REJECTED, 2 DEAD_LETTERED rows", n), terminal, func() string { return fmt.Sprint(e.counts(t)) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var stored, dups, deadAtReceive int
	for _, s := range r.rec.list() {
		switch {
		case s.Err != nil:
			t.Errorf("runtime error for %q: %v", s.Message.ID, s.Err)
		case s.Result.Outcome == inboxkit.OutcomeStored:
			stored++
		case s.Result.Outcome == inboxkit.OutcomeDuplicate:
			dups++
		case s.Action == inboxkit.ActionDeadLetter && s.Message.ID == "":
			deadAtReceive++
		}
	}
	// A copy is a duplicate only once its first is terminal; one that
	// finds the entry still waiting for a worker is "stored" (issue 23.1).
	if stored+dups != n+3+n/5 || dups > n/5 || deadAtReceive != 1 {
		t.Errorf("receiver: %d stored, %d duplicates acknowledged, %d dead-lettered at receive; want %d stored or duplicates (at most %d duplicates), 1", stored, dups, deadAtReceive, n+3+n/5, n/5)
	}
	rows, distinct := e.businessRows(t)
	if rows != n || distinct != n {
		t.Errorf("business table: %d rows for %d events, want %d for %d", rows, distinct, n, n)
	}
	if row := e.row(t, "stp-fail"); row.Status != inboxkit.StatusDeadLettered || row.ReasonCode != inboxkit.ReasonMaxAttemptsExceeded || row.Attempts != maxAttempts {
		t.Errorf("always-failing entry: %s %s attempts %d", row.Status, row.ReasonCode, row.Attempts)
	}
	var reasons []string
	for _, m := range e.drain(t, e.dlq) {
		env, err := dlq.Parse(m.Headers, m.Body)
		if err != nil {
			t.Fatalf("dead letter: %v", err)
		}
		reasons = append(reasons, env.Reason+":"+env.EventID)
	}
	sort.Strings(reasons)
	want := fmt.Sprint([]string{"MALFORMED_PAYLOAD:stp-malformed", inboxkit.ReasonMaxAttemptsExceeded + ":stp-fail", inboxkit.ReasonMissingEventID + ":"})
	if fmt.Sprint(reasons) != want {
		t.Errorf("DLQ holds %v, want %s", reasons, want)
	}
	// The rejection went to the reject queue, as in the transactional mode
	// (issue 11, item 2).
	rj := e.drain(t, e.rejects)
	if len(rj) != 1 {
		t.Fatalf("reject queue holds %d messages, want the 1 rejection", len(rj))
	}
	if env, err := dlq.Parse(rj[0].Headers, rj[0].Body); err != nil || env.EventID != "stp-reject" || env.Reason != "CUSTOMER_UNKNOWN" || env.Class != string(inboxkit.ClassBusiness) {
		t.Errorf("rejection envelope %+v (%v), want stp-reject CUSTOMER_UNKNOWN BUSINESS", env, err)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s store-then-process: checked %d deliveries (%d events, %d duplicates, 4 special): %d business rows, DLQ %v",
		e.b.Name, e.backend, sent, n, n/5, rows, reasons)
}
