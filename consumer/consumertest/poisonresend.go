package consumertest

import (
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
)

// testPoisonResend (issue 23, item 13): malformed events, each published
// twice back to back, so that at concurrency 2 a poison message and its
// resend are processed at the same moment. Every event is dead-lettered
// once: one envelope per event in the DLQ, its row DEAD_LETTERED, and
// every delivery settled without a runtime error (the later copy is
// acknowledged as a duplicate).
func testPoisonResend(t *testing.T, e *env) {
	const events = 30
	malformed := []byte(`{"amount": 1, oops`)
	for i := range events {
		e.send(t, id("resend", i), "corr-resend", malformed)
		e.send(t, id("resend", i), "corr-resend", malformed)
	}
	r := e.start(t, runOpts{concurrency: 2})
	e.waitSettled(t, r, 2*events)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ss := r.rec.list()
	deadLettered := map[string]int{}
	for _, s := range ss {
		if s.Err != nil {
			t.Errorf("runtime error:\n%s", summary(ss))
			break
		}
		if s.Action == inboxkit.ActionDeadLetter {
			deadLettered[s.Message.ID]++
		}
	}
	envelopes := map[string]int{}
	for _, m := range e.drain(t, e.dlq) {
		env, err := dlq.Parse(m.Headers, m.Body)
		if err != nil {
			t.Fatalf("dead letter: %v", err)
		}
		envelopes[env.EventID]++
	}
	for i := range events {
		ev := id("resend", i)
		if envelopes[ev] != 1 || deadLettered[ev] != 1 {
			t.Errorf("%s: %d envelopes in the DLQ, %d deliveries settled as dead letters; want 1 and 1", ev, envelopes[ev], deadLettered[ev])
		}
		if row := e.row(t, ev); row.Status != inboxkit.StatusDeadLettered || row.ReasonCode != "MALFORMED_PAYLOAD" {
			t.Errorf("%s: row %s %s, want DEAD_LETTERED MALFORMED_PAYLOAD", ev, row.Status, row.ReasonCode)
		}
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d poison events sent twice each (%d deliveries): one envelope per event in the DLQ",
		e.b.Name, e.backend, events, len(ss))
}
