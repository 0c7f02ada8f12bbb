package consumertest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// outageEnv is the variable that sets the outage of testDatabaseOutage
// (a Go duration; default 3s), for a longer run than the suite's budget:
//
//	INBOXKIT_TEST_OUTAGE=20s go test -run 'TestConformance/.*/DatabaseOutage' ./broker/...
const outageEnv = "INBOXKIT_TEST_OUTAGE"

func outageDuration(t *testing.T) time.Duration {
	v := os.Getenv(outageEnv)
	if v == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 20s", outageEnv, v)
	}
	return d
}

// proxiedStore returns a store of the env's database whose connections go
// through a TCP proxy, to be cut.
func (e *env) proxiedStore(t *testing.T) (*tcpproxy.Proxy, *inbox.Store) {
	t.Helper()
	proxy := tcpproxy.Start(t, e.db.Addr())
	store, err := inbox.New(e.db.OpenVia(t, proxy.Addr()), e.store.Dialect(), inbox.Config{Retry: retry, ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	return proxy, store
}

// testDatabaseOutage (issue 11, item 1; issue 23, item 4): the database
// becomes unreachable (a TCP proxy between the consumer's pool and the
// server is cut) while a handler runs on every one of the consumer's
// goroutines and more messages wait on the broker, for far longer than the
// redelivery delay. The consumer stops taking deliveries: the deliveries
// in hand are handed back once, nothing else, so at most 2 × concurrency
// (× BatchSize) hand-backs in the whole run, however long the outage. It
// resumes by itself after the repair: every message is PROCESSED exactly
// once with ATTEMPTS 1 (a hand-back is no attempt), nothing is
// dead-lettered.
func testDatabaseOutage(t *testing.T, e *env) {
	if e.backend == dbtest.SQLite {
		t.Log("SQLite is a file in the process: it has no connection to cut (the body runs on the server databases)")
		return
	}
	proxy, store := e.proxiedStore(t)
	const concurrency = 4
	inHand := concurrency * e.batch // deliveries a consumer holds at most
	n := 3 * inHand
	var blocked atomic.Int32
	release := make(chan struct{})
	hook := func(ctx context.Context, src consumer.Source, m inboxkit.Message) error {
		select {
		case <-release: // after the cut: through
		default:
			blocked.Add(1)
			<-release
		}
		return nil
	}
	for i := range n {
		e.send(t, id("outage", i), "corr-outage", Event{Amount: i}.Body())
	}
	r := e.start(t, runOpts{store: store, hook: hook, concurrency: concurrency})
	e.waitFor(t, fmt.Sprintf("a handler running on each of the %d goroutines", concurrency),
		func() bool { return blocked.Load() >= concurrency }, func() string { return summary(r.rec.list()) })
	proxy.Cut() // the handlers' transactions lose their connections
	close(release)
	outage := outageDuration(t)
	time.Sleep(outage)
	during := r.rec.list()
	for _, s := range during {
		if s.Action != inboxkit.ActionRequeue || s.Err == nil {
			t.Fatalf("while the database is unreachable every delivery must be handed back with the error:\n%s", summary(during))
		}
	}
	proxy.Restore()
	e.waitFor(t, fmt.Sprintf("%d finished rows after the repair (the consumer resumes by itself)", n), func() bool {
		c := e.counts(t)
		return c[inboxkit.StatusProcessed]+c[inboxkit.StatusDeadLettered]+c[inboxkit.StatusRejected] == n
	},
		func() string { return fmt.Sprintf("rows %v\n%s", e.counts(t), summary(r.rec.list())) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	back, maxCount := 0, 0
	for _, s := range r.rec.list() {
		maxCount = max(maxCount, s.Message.DeliveryCount)
		if s.Err != nil && s.Action == inboxkit.ActionRequeue {
			back++
		}
		if s.Action == inboxkit.ActionDeadLetter {
			t.Errorf("dead-lettered after the outage:\n%s", summary(r.rec.list()))
		}
	}
	if back > 2*inHand {
		t.Errorf("%d deliveries handed back (%d during the %s outage); want at most 2 × concurrency × batch = %d: "+
			"during an outage the consumer takes no deliveries, it probes\n%s", back, len(during), outage, 2*inHand, summary(r.rec.list()))
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
	t.Logf("%s/%s: checked %d messages at concurrency %d, batch %d: %s outage, %d deliveries handed back during it, %d in the whole run (at most %d allowed; highest broker delivery count %d), then each PROCESSED once with ATTEMPTS 1, DLQ empty",
		e.b.Name, e.backend, n, concurrency, e.batch, outage, len(during), back, 2*inHand, maxCount)
}
