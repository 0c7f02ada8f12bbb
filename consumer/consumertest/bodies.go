package consumertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// testDuplicates: Events events, 20% of them sent twice (same eventId, new
// broker message), concurrency 4.
func testDuplicates(t *testing.T, e *env) {
	n := e.b.Events
	dups := n / 5
	type msg struct {
		id   string
		body []byte
	}
	msgs := make([]msg, 0, n+dups)
	for i := range n {
		msgs = append(msgs, msg{id(e.queue, i), Event{Amount: i}.Body()})
	}
	for _, i := range rand.Perm(n)[:dups] {
		msgs = append(msgs, msgs[i])
	}
	// The copies are spread among the originals, some before them.
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	total := len(msgs)

	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= total || t.Failed() {
					return
				}
				e.send(t, msgs[k].id, "corr-"+msgs[k].id, msgs[k].body)
			}
		}()
	}
	start := time.Now()
	r := e.start(t, runOpts{concurrency: 4})
	wg.Wait()
	e.waitSettled(t, r, total)
	took := time.Since(start)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ss := r.rec.list()

	var processed, duplicates int
	for _, s := range ss {
		if s.Err != nil || s.Action != inboxkit.ActionAck {
			t.Errorf("event %s: action %s, error %v; want ack without error", s.Message.ID, s.Action, s.Err)
			continue
		}
		switch s.Result.Outcome {
		case inboxkit.OutcomeProcessed:
			processed++
		case inboxkit.OutcomeDuplicate:
			duplicates++
			if s.Result.Status != inboxkit.StatusProcessed {
				t.Errorf("duplicate of %s found status %s, want PROCESSED", s.Message.ID, s.Result.Status)
			}
		default:
			t.Errorf("event %s: outcome %s", s.Message.ID, s.Result.Outcome)
		}
	}
	if len(ss) != total || processed != n || duplicates != dups {
		t.Errorf("settled %d deliveries (%d processed, %d duplicates acknowledged), want %d (%d processed, %d duplicates)",
			len(ss), processed, duplicates, total, n, dups)
	}
	rows, distinct := e.businessRows(t)
	if rows != n || distinct != n {
		t.Errorf("business table has %d rows for %d event ids, want exactly %d for %d", rows, distinct, n, n)
	}
	c := e.counts(t)
	if c[inboxkit.StatusProcessed] != n || len(c) != 1 {
		t.Errorf("inbox rows by status %v, want only %d PROCESSED", c, n)
	}
	e.expectEmpty(t, e.queue)
	e.expectEmpty(t, e.dlq)
	t.Logf("%s/%s: checked %d messages (%d events + %d duplicates, concurrency 4) in %s (publishing included): %d business rows, %d PROCESSED rows, %d duplicates acknowledged, queue empty",
		e.b.Name, e.backend, total, n, dups, took.Round(time.Millisecond), rows, c[inboxkit.StatusProcessed], duplicates)
}

// testCrashAfterCommit: the source is closed after the inbox commit and
// before the ACK; the redelivery must be a duplicate. One message per round:
// brokers redeliver the crashed message first.
func testCrashAfterCommit(t *testing.T, e *env) {
	const n = 3
	redelivered := 0
	for i := range n {
		ev := id("after", i)
		e.send(t, ev, "corr-after", Event{Amount: i}.Body())
		cs := &crashSource{Source: e.b.NewSource(t, e.queue)}
		r := e.start(t, runOpts{source: cs})
		first := e.waitSettled(t, r, 1)[0]
		r.waitEnded(t, 30*time.Second)
		if !cs.crashed.Load() || first.Err == nil || first.Result.Outcome != inboxkit.OutcomeProcessed || first.Message.ID != ev {
			t.Fatalf("round %d: want %s processed and its ACK failed (source closed before it), got:\n%s", i, ev, summary(r.rec.list()))
		}
		if got := e.row(t, ev).Status; got != inboxkit.StatusProcessed {
			t.Fatalf("round %d: row of %s is %s after the commit, want PROCESSED", i, ev, got)
		}
		// Restart: the message comes again, as a duplicate.
		r2 := e.start(t, runOpts{})
		s := e.waitSettled(t, r2, 1)[0]
		if err := r2.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if s.Message.ID != ev || s.Result.Outcome != inboxkit.OutcomeDuplicate || s.Action != inboxkit.ActionAck || s.Err != nil {
			t.Fatalf("round %d: redelivery after a crash after commit must be an acknowledged duplicate of %s:\n%s", i, ev, summary(r2.rec.list()))
		}
		redelivered++
		if e.b.Features.RedeliveredFlag && !s.Message.Redelivered {
			t.Errorf("redelivery of %s is not flagged redelivered", ev)
		}
		// A redelivery vouched for as first would run without an attempt
		// marker (rule 5 would lose the deaths of a message that kills the
		// process).
		if s.Message.FirstDelivery {
			t.Errorf("redelivery of %s is vouched for as the first delivery (Message.FirstDelivery)", ev)
		}
		if e.b.Features.DeliveryCount && s.Message.DeliveryCount < 2 {
			t.Errorf("redelivery of %s after a crash has DeliveryCount %d, want 2 or more", ev, s.Message.DeliveryCount)
		}
		if e.b.Features.FirstDelivery && !first.Message.FirstDelivery {
			t.Errorf("first delivery of %s is not vouched for as first (Message.FirstDelivery)", ev)
		}
		if got := e.businessRowsOf(t, ev); got != 1 {
			t.Errorf("event %s has %d business rows, want 1", ev, got)
		}
	}
	if rows, _ := e.businessRows(t); rows != n {
		t.Errorf("business rows %d, want %d", rows, n)
	}
	if c := e.counts(t); c[inboxkit.StatusProcessed] != n || len(c) != 1 {
		t.Errorf("inbox rows by status %v, want %d PROCESSED", c, n)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d messages (%d crashes after commit, %d redeliveries acknowledged as duplicates): %d business rows",
		e.b.Name, e.backend, n, n, redelivered, n)
}

// testCrashBeforeCommit: the handler closes the source (the connection dies)
// and fails; the redelivery is processed once.
func testCrashBeforeCommit(t *testing.T, e *env) {
	const n = 3
	crash := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		_ = src.Close()
		return errors.New("connection to the broker lost inside the handler")
	}
	processed := 0
	for i := range n {
		ev := id("before", i)
		e.send(t, ev, "corr-before", Event{Amount: i}.Body())
		r := e.start(t, runOpts{hook: crash})
		first := e.waitSettled(t, r, 1)[0]
		r.waitEnded(t, 30*time.Second)
		if first.Message.ID != ev || first.Result.Outcome != inboxkit.OutcomeRetry {
			t.Fatalf("round %d: want a technical failure of %s, got:\n%s", i, ev, summary(r.rec.list()))
		}
		if got := e.businessRowsOf(t, ev); got != 0 {
			t.Fatalf("round %d: event %s has %d business rows after the rollback, want 0", i, ev, got)
		}
		r2 := e.start(t, runOpts{})
		s := e.waitSettled(t, r2, 1)[0]
		if err := r2.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if s.Message.ID != ev || s.Result.Outcome != inboxkit.OutcomeProcessed || s.Action != inboxkit.ActionAck || s.Err != nil {
			t.Fatalf("round %d: the redelivery of %s must be processed and acknowledged:\n%s", i, ev, summary(r2.rec.list()))
		}
		if s.Result.Attempts < 2 {
			t.Errorf("event %s processed at attempt %d, want >= 2 (the crashed attempt counts)", ev, s.Result.Attempts)
		}
		processed++
		if got := e.businessRowsOf(t, ev); got != 1 {
			t.Errorf("event %s has %d business rows, want 1", ev, got)
		}
	}
	if c := e.counts(t); c[inboxkit.StatusProcessed] != n || len(c) != 1 {
		t.Errorf("inbox rows by status %v, want %d PROCESSED", c, n)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d messages (%d crashes before commit, %d redeliveries processed once): %d business rows",
		e.b.Name, e.backend, n, n, processed, n)
}

// checkEnvelope checks a dead letter against what was sent.
func checkEnvelope(t testing.TB, e *env, m inboxkit.Message, wantReason, wantID, wantCorr, wantDest string, wantAttempts int, body []byte) dlq.Envelope {
	t.Helper()
	env, err := dlq.Parse(m.Headers, m.Body)
	if err != nil {
		t.Fatalf("dead letter of %s: %v (headers %v)", wantID, err, m.Headers)
	}
	check := func(what, got, want string) {
		if got != want {
			t.Errorf("dead letter of %s: %s = %q, want %q", wantID, what, got, want)
		}
	}
	check("reason", env.Reason, wantReason)
	check("event id", env.EventID, wantID)
	check("correlation id", env.CorrelationID, wantCorr)
	check("consumer", env.Consumer, e.name)
	check("original destination", env.OriginalDestination, wantDest)
	if wantAttempts >= 0 && env.Attempts != wantAttempts {
		t.Errorf("dead letter of %s: attempts = %d, want %d", wantID, env.Attempts, wantAttempts)
	}
	if !bytes.Equal(m.Body, body) {
		t.Errorf("dead letter of %s: body %q, want it unchanged %q", wantID, m.Body, body)
	}
	if wantID != "" && env.Original["eventId"] != wantID {
		t.Errorf("dead letter of %s: original header eventId = %q, want it kept", wantID, env.Original["eventId"])
	}
	if env.DeadLetteredAt.IsZero() || env.FirstFailure.IsZero() || env.LastFailure.IsZero() {
		t.Errorf("dead letter of %s: times first=%v last=%v dead-lettered=%v, want all set", wantID, env.FirstFailure, env.LastFailure, env.DeadLetteredAt)
	}
	if env.LastFailure.Before(env.FirstFailure) || env.DeadLetteredAt.Before(env.LastFailure) {
		t.Errorf("dead letter of %s: times out of order: first=%v last=%v dead-lettered=%v", wantID, env.FirstFailure, env.LastFailure, env.DeadLetteredAt)
	}
	return env
}

// testBackout: a handler that always fails technically is dead-lettered
// after maxAttempts, with the full envelope.
func testBackout(t *testing.T, e *env) {
	const ev = "backout-1"
	body := Event{Amount: 5, Fail: true}.Body()
	e.send(t, ev, "corr-backout", body, "x-origin", "conformance", "x-tenant", "acme")
	r := e.start(t, runOpts{})
	dead := e.waitAction(t, r, inboxkit.ActionDeadLetter)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ss := r.rec.list()
	if len(ss) != maxAttempts || dead.Err != nil || dead.Result.Reason != inboxkit.ReasonMaxAttemptsExceeded {
		t.Errorf("want %d deliveries, the last dead-lettered with %s:\n%s", maxAttempts, inboxkit.ReasonMaxAttemptsExceeded, summary(ss))
	}
	for i, s := range ss[:len(ss)-1] {
		if s.Action != inboxkit.ActionRequeue || s.Err != nil || s.Result.Attempts != i+1 {
			t.Errorf("delivery %d: want a requeue at attempt %d:\n%s", i+1, i+1, summary(ss))
		}
	}
	for i, s := range ss {
		switch {
		case !e.b.Features.DeliveryCount && s.Message.DeliveryCount != 0:
			t.Errorf("broker declared no delivery count but delivered count %d", s.Message.DeliveryCount)
		case e.b.Features.DeliveryCount && i > 0 && s.Message.DeliveryCount != i+1:
			t.Errorf("delivery %d (a redelivery after %d requeues) has DeliveryCount %d, want %d", i+1, i, s.Message.DeliveryCount, i+1)
		}
		if i > 0 && s.Message.FirstDelivery {
			t.Errorf("delivery %d (a redelivery) is vouched for as the first delivery (Message.FirstDelivery)", i+1)
		}
	}
	row := e.row(t, ev)
	if row.Status != inboxkit.StatusDeadLettered || row.Attempts != maxAttempts || row.ReasonCode != inboxkit.ReasonMaxAttemptsExceeded {
		t.Errorf("row: status %s attempts %d reason %s, want DEAD_LETTERED %d %s", row.Status, row.Attempts, row.ReasonCode, maxAttempts, inboxkit.ReasonMaxAttemptsExceeded)
	}
	if n := e.businessRowsOf(t, ev); n != 0 {
		t.Errorf("%d business rows after only failures, want 0", n)
	}
	dl := e.drain(t, e.dlq)
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dl))
	}
	env := checkEnvelope(t, e, dl[0], inboxkit.ReasonMaxAttemptsExceeded, ev, "corr-backout", dead.Message.Destination, maxAttempts, body)
	if env.Class != string(inboxkit.ClassTechnical) {
		t.Errorf("envelope class %q, want %s", env.Class, inboxkit.ClassTechnical)
	}
	if !strings.Contains(env.Error, "always fails") {
		t.Errorf("envelope error %q, want the handler's error", env.Error)
	}
	if env.Original["x-origin"] != "conformance" || env.Original["x-tenant"] != "acme" || env.Original["correlationId"] != "corr-backout" {
		t.Errorf("envelope lost original headers: %v", env.Original)
	}
	if !env.FirstFailure.Before(env.LastFailure) {
		t.Errorf("first failure %v not before last failure %v after %d attempts", env.FirstFailure, env.LastFailure, maxAttempts)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 message over %d deliveries (broker delivery count known: %v): dead-lettered with %s, attempts %d, DLQ envelope complete",
		e.b.Name, e.backend, len(ss), e.b.Features.DeliveryCount, env.Reason, env.Attempts)
}

// testBackoutAfterCrashes: every delivery kills the consumer inside the
// handler; the inbox's own count dead-letters the message after maxAttempts.
func testBackoutAfterCrashes(t *testing.T, e *env) {
	const ev = "killer-1"
	body := Event{Amount: 1}.Body()
	e.send(t, ev, "corr-killer", body)
	crash := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		_ = src.Close()
		return errors.New("the consumer process died")
	}
	var all []consumer.Settled
	deadLettered := false
	for round := 0; round < maxAttempts+2 && !deadLettered; round++ {
		r := e.start(t, runOpts{hook: crash})
		s := e.waitSettled(t, r, 1)[0]
		r.waitEnded(t, 30*time.Second)
		all = append(all, r.rec.list()...)
		if s.Action == inboxkit.ActionDeadLetter {
			deadLettered = true
		}
	}
	if !deadLettered {
		t.Fatalf("not dead-lettered after %d crashing deliveries (max attempts %d):\n%s", len(all), maxAttempts, summary(all))
	}
	if len(all) != maxAttempts {
		t.Errorf("dead-lettered at delivery %d, want %d:\n%s", len(all), maxAttempts, summary(all))
	}
	// The ACK of the dead-lettered delivery died with its source: it comes
	// again, and must be an acknowledged duplicate.
	r := e.start(t, runOpts{})
	dup := e.waitSettled(t, r, 1)[0]
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if dup.Result.Outcome != inboxkit.OutcomeDuplicate || dup.Result.Status != inboxkit.StatusDeadLettered || dup.Action != inboxkit.ActionAck {
		t.Errorf("redelivery after the dead letter: want an acknowledged duplicate of DEAD_LETTERED:\n%s", summary(r.rec.list()))
	}
	if row := e.row(t, ev); row.Status != inboxkit.StatusDeadLettered || row.ReasonCode != inboxkit.ReasonMaxAttemptsExceeded {
		t.Errorf("row: %s %s, want DEAD_LETTERED %s", row.Status, row.ReasonCode, inboxkit.ReasonMaxAttemptsExceeded)
	}
	if n := e.businessRowsOf(t, ev); n != 0 {
		t.Errorf("%d business rows, want 0", n)
	}
	dl := e.drain(t, e.dlq)
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dl))
	}
	checkEnvelope(t, e, dl[0], inboxkit.ReasonMaxAttemptsExceeded, ev, "corr-killer", all[0].Message.Destination, maxAttempts, body)
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 message over %d deliveries that killed the consumer + 1 redelivery (delivery count known: %v): dead-lettered from the inbox's count",
		e.b.Name, e.backend, len(all), e.b.Features.DeliveryCount)
}

// testPoisonAndReject: poison goes to the DLQ at once; a business rejection
// is recorded, acknowledged and published to the reject queue.
func testPoisonAndReject(t *testing.T, e *env) {
	malformed := []byte(`{"amount": 1, oops`)
	valid := Event{Amount: 2}.Body()
	rejected := Event{Amount: 3, Reject: true}.Body()
	long := strings.Repeat("x", inbox.MaxEventIDLength+1)
	e.send(t, "poison-malformed", "corr-poison", malformed)
	e.send(t, "", "corr-poison", valid, "x-note", "no event id")
	e.send(t, long, "corr-poison", valid)
	e.send(t, "reject-1", "corr-reject", rejected, "x-note", "reject me")
	e.send(t, "ok-1", "corr-ok", valid)
	const total = 5
	r := e.start(t, runOpts{rejectQueue: e.rejects})
	e.waitSettled(t, r, total)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ss := r.rec.list()
	if len(ss) != total {
		t.Errorf("want %d deliveries, each settled at once:\n%s", total, summary(ss))
	}
	byReason := map[string]consumer.Settled{}
	for _, s := range ss {
		if s.Err != nil {
			t.Errorf("runtime error: %v", s.Err)
		}
		byReason[s.Result.Reason] = s
	}
	for _, reason := range []string{"MALFORMED_PAYLOAD", inboxkit.ReasonMissingEventID, inboxkit.ReasonEventIDTooLong} {
		if s, ok := byReason[reason]; !ok || s.Action != inboxkit.ActionDeadLetter {
			t.Errorf("no delivery dead-lettered with %s at first delivery:\n%s", reason, summary(ss))
		}
	}
	if s := byReason["CUSTOMER_UNKNOWN"]; s.Action != inboxkit.ActionReject || s.Result.Status != inboxkit.StatusRejected {
		t.Errorf("rejection: want action reject, status REJECTED:\n%s", summary(ss))
	}
	if row := e.row(t, "poison-malformed"); row.Status != inboxkit.StatusDeadLettered || row.ReasonCode != "MALFORMED_PAYLOAD" || row.ErrorClass != string(inboxkit.ClassPoison) {
		t.Errorf("malformed row: %s %s %s, want DEAD_LETTERED MALFORMED_PAYLOAD POISON", row.Status, row.ReasonCode, row.ErrorClass)
	}
	if row := e.row(t, "reject-1"); row.Status != inboxkit.StatusRejected || row.ReasonCode != "CUSTOMER_UNKNOWN" {
		t.Errorf("rejected row: %s %s, want REJECTED CUSTOMER_UNKNOWN", row.Status, row.ReasonCode)
	}
	if row := e.row(t, "ok-1"); row.Status != inboxkit.StatusProcessed {
		t.Errorf("ok row: %s, want PROCESSED", row.Status)
	}
	if rows, _ := e.businessRows(t); rows != 1 || e.businessRowsOf(t, "ok-1") != 1 {
		t.Errorf("business rows %d, want only the one of ok-1 (the rejection's row rolled back)", rows)
	}
	dest := ss[0].Message.Destination
	dl := e.drain(t, e.dlq)
	if len(dl) != 3 {
		t.Fatalf("DLQ holds %d messages, want 3", len(dl))
	}
	for _, m := range dl {
		env, err := dlq.Parse(m.Headers, m.Body)
		if err != nil {
			t.Fatalf("dead letter: %v", err)
		}
		switch env.Reason {
		case "MALFORMED_PAYLOAD":
			checkEnvelope(t, e, m, "MALFORMED_PAYLOAD", "poison-malformed", "corr-poison", dest, 1, malformed)
			if env.Class != string(inboxkit.ClassPoison) {
				t.Errorf("malformed: class %q, want POISON", env.Class)
			}
		case inboxkit.ReasonMissingEventID:
			checkEnvelope(t, e, m, inboxkit.ReasonMissingEventID, "", "corr-poison", dest, 0, valid)
			if env.Original["x-note"] != "no event id" {
				t.Errorf("missing event id: original headers lost: %v", env.Original)
			}
		case inboxkit.ReasonEventIDTooLong:
			if env.Original["eventId"] != long || !bytes.Equal(m.Body, valid) {
				t.Errorf("too long event id: original header or body changed")
			}
		default:
			t.Errorf("unexpected dead letter reason %q", env.Reason)
		}
	}
	rj := e.drain(t, e.rejects)
	if len(rj) != 1 {
		t.Fatalf("reject queue holds %d messages, want 1", len(rj))
	}
	env, err := dlq.Parse(rj[0].Headers, rj[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if env.Reason != "CUSTOMER_UNKNOWN" || env.Class != string(inboxkit.ClassBusiness) || env.EventID != "reject-1" ||
		!bytes.Equal(rj[0].Body, rejected) || env.Original["x-note"] != "reject me" || !strings.Contains(env.Error, "unknown") {
		t.Errorf("rejection envelope: %+v", env)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d messages: 3 poison dead-lettered at once (MALFORMED_PAYLOAD, MISSING_EVENT_ID, EVENT_ID_TOO_LONG), 1 rejected to the reject queue, 1 processed",
		e.b.Name, e.backend, total)
}

// testDeadLetterPublishFails: with a broken DLQ publisher the original is
// handed back to the broker; after the repair it ends in the DLQ.
func testDeadLetterPublishFails(t *testing.T, e *env) {
	body := []byte(`not json`)
	e.send(t, "dlqfail-1", "corr-dlqfail", body)
	broken := e.newPublisher(t)
	e.b.BreakPublisher(t, broken)
	sp := &swapPublisher{p: broken}
	r := e.start(t, runOpts{deadLetter: sp})
	const failures = maxAttempts + 2 // more handbacks than the backout threshold
	e.waitFor(t, fmt.Sprintf("%d failed dead-letter publishes", failures), func() bool {
		n := 0
		for _, s := range r.rec.list() {
			if s.Err != nil && s.Action == inboxkit.ActionRequeue {
				n++
			}
		}
		return n >= failures
	}, func() string { return summary(r.rec.list()) })
	for _, s := range r.rec.list() {
		if s.Action != inboxkit.ActionRequeue || s.Err == nil || !strings.Contains(s.Err.Error(), "dead-letter") {
			t.Fatalf("while the DLQ publisher is broken every delivery must be handed back with the publish error:\n%s", summary(r.rec.list()))
		}
	}
	if row, err := e.store.Get(e.ctx, "dlqfail-1", e.name); err == nil && row.Status == inboxkit.StatusDeadLettered {
		t.Errorf("the row is DEAD_LETTERED although the DLQ publish failed")
	}
	failed := r.rec.len()
	sp.set(e.newPublisher(t)) // the connection is repaired
	e.waitAction(t, r, inboxkit.ActionDeadLetter)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dl := e.drain(t, e.dlq)
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dl))
	}
	// A delivery handed back because the DLQ was unreachable is no attempt
	// (issue 11, item 1): the poison reason and attempt 1 survive any
	// number of failed publishes, and the row agrees with the envelope.
	env := checkEnvelope(t, e, dl[0], "MALFORMED_PAYLOAD", "dlqfail-1", "corr-dlqfail", r.rec.list()[0].Message.Destination, 1, body)
	if row := e.row(t, "dlqfail-1"); row.Status != inboxkit.StatusDeadLettered || row.Attempts != env.Attempts || row.ReasonCode != "MALFORMED_PAYLOAD" {
		t.Errorf("row %s attempts %d reason %s, want DEAD_LETTERED %d MALFORMED_PAYLOAD", row.Status, row.Attempts, row.ReasonCode, env.Attempts)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 message: %d deliveries handed back while the DLQ publisher was closed, then dead-lettered once after the repair (%d deliveries in all, reason %s)",
		e.b.Name, e.backend, failed, r.rec.len(), env.Reason)
}

// testReplay: a dead letter replayed from the DLQ is processed once.
func testReplay(t *testing.T, e *env) {
	const ev = "replay-1"
	body := Event{Amount: 9}.Body()
	var failing atomic.Bool
	failing.Store(true)
	hook := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		if failing.Load() {
			return errors.New("downstream down until the operator fixes it")
		}
		return nil
	}
	e.send(t, ev, "corr-replay", body)
	r := e.start(t, runOpts{hook: hook})
	e.waitAction(t, r, inboxkit.ActionDeadLetter)
	failing.Store(false) // the cause is fixed; the operator replays
	dlqSrc := e.b.NewSource(t, e.dlq)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	rep, err := consumer.Replay(ctx, consumer.ReplayConfig{
		DLQ: dlqSrc, Publisher: e.pub, Store: e.store, EventID: ev, IdleTimeout: e.b.IdleTimeout,
	})
	cancel()
	dlqSrc.Close()
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if len(rep.Replayed) != 1 || rep.Replayed[0] != ev || len(rep.Skipped) != 0 {
		t.Fatalf("Replay report %+v, want exactly %s replayed", rep, ev)
	}
	e.waitFor(t, "the replayed message processed", func() bool {
		for _, s := range r.rec.list() {
			if s.Result.Outcome == inboxkit.OutcomeProcessed {
				return true
			}
		}
		return false
	}, func() string { return summary(r.rec.list()) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	row := e.row(t, ev)
	if row.Status != inboxkit.StatusProcessed || row.ReplayCount != 1 {
		t.Errorf("row: status %s replay count %d, want PROCESSED 1", row.Status, row.ReplayCount)
	}
	if n := e.businessRowsOf(t, ev); n != 1 {
		t.Errorf("%d business rows after the replay, want 1", n)
	}
	processed := 0
	for _, s := range r.rec.list() {
		if s.Result.Outcome == inboxkit.OutcomeProcessed {
			processed++
			if s.Message.Header(dlq.HeaderReplayedAt) == "" {
				t.Errorf("replayed message lacks %s", dlq.HeaderReplayedAt)
			}
		}
	}
	if processed != 1 {
		t.Errorf("processed %d times, want once:\n%s", processed, summary(r.rec.list()))
	}
	e.expectEmpty(t, e.dlq)
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked 1 message: dead-lettered after %d deliveries, replayed, processed once (REPLAY_COUNT %d), DLQ empty",
		e.b.Name, e.backend, r.rec.len()-1, row.ReplayCount)
}

// testGracefulShutdown: cancel while slow handlers run; nothing is lost or
// done twice.
func testGracefulShutdown(t *testing.T, e *env) {
	n, sleep := 24, 100
	if e.batch > 1 {
		// 4 goroutines hold up to a batch each (and take more as batches
		// are acknowledged), all finished in the drain:
		// more must wait on the broker for the restart. A batch is in its
		// handlers for a batch's sleeps, so each sleeps less (on SQLite,
		// whose writers take turns, 100ms each made the body 17s).
		n += 8 * e.batch
		sleep = 25
	}
	for i := range n {
		e.send(t, id("drain", i), "corr-drain", Event{Amount: i, SleepMS: sleep}.Body())
	}
	var started atomic.Int64
	hook := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		started.Add(1)
		return nil
	}
	r := e.start(t, runOpts{concurrency: 4, hook: hook})
	e.waitSettled(t, r, 4)
	// Cancel while handlers are in their sleep.
	// (On SQLite only one handler is ever inside a transaction: BEGIN
	// IMMEDIATE serializes writers; the others wait with a delivery in hand.)
	e.waitFor(t, "a handler in flight", func() bool { return started.Load() > int64(r.rec.len()) }, nil)
	inFlight := started.Load() - int64(r.rec.len())
	if err := r.stop(t); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	first := r.rec.list()
	if int64(len(first)) != started.Load() {
		t.Errorf("%d handlers started but %d deliveries settled: in-flight work was abandoned", started.Load(), len(first))
	}
	for _, s := range first {
		if s.Err != nil || s.Action != inboxkit.ActionAck || s.Result.Outcome != inboxkit.OutcomeProcessed {
			t.Errorf("drained delivery not processed and acknowledged:\n%s", summary(first))
			break
		}
	}
	k := len(first)
	if rows, _ := e.businessRows(t); rows != k {
		t.Errorf("after the drain: %d business rows for %d settled deliveries", rows, k)
	}
	if k >= n {
		t.Fatalf("all %d messages were processed before the cancel; the test proves nothing", n)
	}
	// Restart: the rest is processed, nothing twice.
	r2 := e.start(t, runOpts{concurrency: 4})
	e.waitFor(t, fmt.Sprintf("%d PROCESSED rows", n), func() bool { return e.counts(t)[inboxkit.StatusProcessed] == n },
		func() string { return summary(r2.rec.list()) })
	if err := r2.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	second := r2.rec.list()
	var odd []consumer.Settled
	for _, s := range second {
		if s.Result.Outcome != inboxkit.OutcomeProcessed || s.Err != nil {
			odd = append(odd, s)
		}
	}
	if len(odd) > 0 {
		var before []consumer.Settled // the same events in the first run
		for _, s := range first {
			if slices.ContainsFunc(odd, func(o consumer.Settled) bool { return o.Message.ID == s.Message.ID }) {
				before = append(before, s)
			}
		}
		t.Errorf("after the restart: want only first-time processing (a duplicate means an ACK was lost in the drain); not so:\n%s\nthe same events in the first run:\n%s",
			summary(odd), summary(before))
	}
	rows, distinct := e.businessRows(t)
	if rows != n || distinct != n || k+len(second) != n {
		t.Errorf("business rows %d for %d events; %d + %d settled; want %d each, exactly once", rows, distinct, k, len(second), n)
	}
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d messages: %d processed before the cancel (%d in flight at cancel, all finished and acknowledged), %d after the restart; %d business rows, none twice",
		e.b.Name, e.backend, n, k, inFlight, len(second), rows)
}
