package consumertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// testDatabaseOutage (issue 11, item 1): the database becomes unreachable
// (a TCP proxy between the consumer's pool and the server is cut) while one
// handler runs and more messages are in flight, for far longer than the
// redelivery delay; every delivery is handed back meanwhile. After the
// repair every message is PROCESSED exactly once with ATTEMPTS 1: a
// delivery handed back because the database was unreachable is no attempt,
// whatever the broker's redelivery flag or delivery count says.
func testDatabaseOutage(t *testing.T, e *env) {
	if e.backend == dbtest.SQLite {
		t.Log("SQLite is a file in the process: it has no connection to cut (the body runs on the server databases)")
		return
	}
	proxy := tcpproxy.Start(t, e.db.Addr())
	store, err := inbox.New(e.db.OpenVia(t, proxy.Addr()), e.store.Dialect(), inbox.Config{Retry: retry, ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	first := id("outage", 0)
	inHandler, release := make(chan struct{}), make(chan struct{})
	hook := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		if m.ID == first {
			select {
			case <-inHandler: // later attempts go through
			default:
				close(inHandler)
				<-release
			}
		}
		return nil
	}
	e.send(t, first, "corr-outage", Event{Amount: 0}.Body())
	r := e.start(t, runOpts{store: store, hook: hook})
	<-inHandler
	for i := 1; i < n; i++ {
		e.send(t, id("outage", i), "corr-outage", Event{Amount: i}.Body())
	}
	proxy.Cut() // the handler's transaction loses its connection
	close(release)
	// Long enough that every message was handed back more often than the
	// backout threshold (each handback is at least one redelivery delay).
	e.waitFor(t, fmt.Sprintf("every message handed back at least %d times during the outage", 2*maxAttempts), func() bool {
		back := map[string]int{}
		for _, s := range r.rec.list() {
			if s.Action == inboxkit.ActionRequeue && s.Err != nil {
				back[s.Message.ID]++
			}
		}
		for i := range n {
			if back[id("outage", i)] < 2*maxAttempts {
				return false
			}
		}
		return true
	}, func() string { return summary(r.rec.list()) })
	during := r.rec.len()
	for _, s := range r.rec.list() {
		if s.Action != inboxkit.ActionRequeue || s.Err == nil {
			t.Fatalf("while the database is unreachable every delivery must be handed back with the error:\n%s", summary(r.rec.list()))
		}
	}
	proxy.Restore()
	e.waitFor(t, fmt.Sprintf("%d finished rows after the repair", n), func() bool {
		c := e.counts(t)
		return c[inboxkit.StatusProcessed]+c[inboxkit.StatusDeadLettered]+c[inboxkit.StatusRejected] == n
	},
		func() string { return fmt.Sprintf("rows %v\n%s", e.counts(t), summary(r.rec.list())) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	maxCount := 0
	for _, s := range r.rec.list() {
		maxCount = max(maxCount, s.Message.DeliveryCount)
		if s.Action == inboxkit.ActionDeadLetter {
			t.Errorf("dead-lettered after the outage:\n%s", summary(r.rec.list()))
		}
	}
	for i := range n {
		ev := id("outage", i)
		row := e.row(t, ev)
		if row.Status != inboxkit.StatusProcessed || row.Attempts > 1 {
			t.Errorf("%s: row %s with ATTEMPTS %d (last error %q), want PROCESSED with ATTEMPTS <= 1: an outage is no attempt",
				ev, row.Status, row.Attempts, row.LastError)
		}
		if got := e.businessRowsOf(t, ev); got != 1 {
			t.Errorf("%s: %d business rows, want exactly 1", ev, got)
		}
	}
	if c := e.counts(t); c[inboxkit.StatusProcessed] != n || len(c) != 1 {
		t.Errorf("inbox rows by status %v, want %d PROCESSED", c, n)
	}
	e.expectEmpty(t, e.dlq)
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s: checked %d messages: %d deliveries handed back while the database was unreachable (highest broker delivery count %d), then each PROCESSED once with ATTEMPTS 1, DLQ empty",
		e.b.Name, e.backend, n, during, maxCount)
}
