package consumertest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// replay runs consumer.Replay for one event on queue.
func (e *env) replay(t *testing.T, queue, ev string) consumer.ReplayReport {
	t.Helper()
	src := e.b.NewSource(t, queue)
	defer src.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	rep, err := consumer.Replay(ctx, consumer.ReplayConfig{DLQ: src, Publisher: e.pub, Store: e.store, EventID: ev, IdleTimeout: e.b.IdleTimeout})
	if err != nil {
		t.Fatalf("Replay %s from %s: %v", ev, queue, err)
	}
	return rep
}

// testReplayRejection (issue 11, item 2): a rejection replayed from the
// reject queue after the business case was clarified reopens its REJECTED
// row and is processed once; the row tells the rejection, the replay and
// the processing. Replaying it again cannot take effect (the row is
// PROCESSED): refused, the message stays on the reject queue.
func testReplayRejection(t *testing.T, e *env) {
	const ev = "clarify-1"
	var unknown atomic.Bool
	unknown.Store(true)
	hook := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		if unknown.Load() {
			return classify.Reject("CUSTOMER_UNKNOWN", errFor(m.ID))
		}
		return nil
	}
	e.send(t, ev, "corr-clarify", Event{Amount: 3}.Body())
	r := e.start(t, runOpts{hook: hook, rejectQueue: e.rejects})
	e.waitAction(t, r, inboxkit.ActionReject)
	if row := e.row(t, ev); row.Status != inboxkit.StatusRejected {
		t.Fatalf("row %s, want REJECTED", row.Status)
	}
	unknown.Store(false) // the customer now exists
	rep := e.replay(t, e.rejects, ev)
	if len(rep.Replayed) != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("Replay report %+v, want %s replayed", rep, ev)
	}
	e.waitFor(t, "the replayed rejection processed", func() bool { return e.row(t, ev).Status == inboxkit.StatusProcessed },
		func() string { return summary(r.rec.list()) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	row := e.row(t, ev)
	if row.ReplayCount != 1 || row.Attempts != 1 || !strings.Contains(row.LastError, "rejected CUSTOMER_UNKNOWN") {
		t.Errorf("row: replay count %d, attempts %d, last error %q; want 1, 1 and the rejection", row.ReplayCount, row.Attempts, row.LastError)
	}
	if n := e.businessRowsOf(t, ev); n != 1 {
		t.Errorf("%d business rows after the replay, want 1", n)
	}
	e.expectEmpty(t, e.rejects)
	e.expectEmpty(t, e.queue)

	// A copy of the rejection replayed now would change nothing: refused.
	env := dlq.Envelope{Body: Event{Amount: 3}.Body(), Original: map[string]string{"eventId": ev}, Reason: "CUSTOMER_UNKNOWN",
		Class: string(inboxkit.ClassBusiness), Attempts: 1, Consumer: e.name, OriginalDestination: e.queue, EventID: ev,
		DeadLetteredAt: time.Now().Add(-time.Minute)}
	env.FirstFailure, env.LastFailure = env.DeadLetteredAt, env.DeadLetteredAt
	if err := e.pub.Publish(e.ctx, e.rejects, env.Headers(), env.Body); err != nil {
		t.Fatal(err)
	}
	rep = e.replay(t, e.rejects, ev)
	if len(rep.Replayed) != 0 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "PROCESSED") {
		t.Errorf("replay of a processed event: report %+v, want it refused (skipped, row PROCESSED)", rep)
	}
	if left := e.drain(t, e.rejects); len(left) != 1 {
		t.Errorf("reject queue holds %d messages after a refused replay, want the 1 kept", len(left))
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 rejection: replayed from the reject queue after clarification, processed once (REPLAY_COUNT %d, LAST_ERROR %q); a second replay refused and kept",
		e.b.Name, e.backend, row.ReplayCount, row.LastError)
}

// testReplayPoison (issue 11, item 5): a poison message replayed from the
// DLQ is dead-lettered again; its row's ATTEMPTS agrees with the envelope.
func testReplayPoison(t *testing.T, e *env) {
	const ev = "poison-replay-1"
	body := []byte(`{"amount": still broken`)
	e.send(t, ev, "corr-poison-replay", body)
	r := e.start(t, runOpts{})
	e.waitAction(t, r, inboxkit.ActionDeadLetter)
	if rep := e.replay(t, e.dlq, ev); len(rep.Replayed) != 1 {
		t.Fatalf("Replay report %+v, want %s replayed", rep, ev)
	}
	e.waitFor(t, "the replayed poison dead-lettered again", func() bool {
		n := 0
		for _, s := range r.rec.list() {
			if s.Action == inboxkit.ActionDeadLetter {
				n++
			}
		}
		return n == 2
	}, func() string { return summary(r.rec.list()) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dl := e.drain(t, e.dlq)
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dl))
	}
	env := checkEnvelope(t, e, dl[0], "MALFORMED_PAYLOAD", ev, "corr-poison-replay", r.rec.list()[0].Message.Destination, 1, body)
	row := e.row(t, ev)
	if row.Status != inboxkit.StatusDeadLettered || row.ReplayCount != 1 || row.Attempts != env.Attempts {
		t.Errorf("row: %s, replay count %d, ATTEMPTS %d; envelope attempts %d: want DEAD_LETTERED, 1, and ATTEMPTS equal to the envelope's",
			row.Status, row.ReplayCount, row.Attempts, env.Attempts)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 poison message replayed and dead-lettered again: row ATTEMPTS %d, envelope attempts %d", e.b.Name, e.backend, row.Attempts, env.Attempts)
}

func errFor(id string) error { return fmt.Errorf("customer of event %s is unknown", id) }
