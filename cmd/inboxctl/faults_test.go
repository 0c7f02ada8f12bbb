package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// faultRun is an `inboxctl run` of the invoice consumer on PostgreSQL,
// with what a fault test needs: publishing numbered invoices, the inbox
// rows by status, /readyz, and waiting with a limit of its own.
type faultRun struct {
	t      *testing.T
	db     *dbtest.DB
	broker string // where the test publishes (never through a proxy)
	queue  string
	logs   *lockedBuffer
	base   string // the metrics and health address
	sent   int
	body   string // the last /readyz body
}

// startFaultRun migrates a fresh database and starts run with runArgs
// (--db and --broker, possibly through proxies) on a fresh queue.
func startFaultRun(t *testing.T, db *dbtest.DB, broker string, runArgs ...string) *faultRun {
	t.Helper()
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--seed-customers"), 0, "migrated")
	f := &faultRun{t: t, db: db, broker: broker, queue: fmt.Sprintf("inboxctl.faults.%d", time.Now().UnixNano())}
	t.Cleanup(func() { dropQueue(t, broker, f.queue) }) // after the run stops
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	_, f.logs = startRun(ctx, t, append(runArgs, "--queue", f.queue, "--no-relay", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")...)
	f.base = metricsBase(t, f.logs)
	return f
}

func (f *faultRun) publish(n int) {
	f.t.Helper()
	var lines strings.Builder
	for range n {
		f.sent++
		id := fmt.Sprintf("pt-%d", f.sent)
		lines.WriteString(invoiceLine(id, "corr-"+id, "INV-"+id, "K-100") + "\n")
	}
	wantCode(f.t, inboxctl(f.t, lines.String(), "publish", "--broker", f.broker, "--queue", f.queue, "--file", "-"), 0, fmt.Sprintf("published %d", n))
}

func (f *faultRun) statuses() map[string]int {
	f.t.Helper()
	rows, err := f.db.Query(`SELECT STATUS, COUNT(*) FROM INBOX_EVENT_PROCESSING GROUP BY STATUS`)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			f.t.Fatal(err)
		}
		got[s] = n
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return got
}

func (f *faultRun) allProcessed() bool { return f.statuses()["PROCESSED"] == f.sent }

func (f *faultRun) ready() bool {
	var code int
	code, f.body = httpGet(f.t, f.base+"/readyz")
	return code == http.StatusOK
}

// wait polls cond every 100ms for at most limit and returns how long it
// took.
func (f *faultRun) wait(what string, limit time.Duration, cond func() bool) time.Duration {
	f.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			f.t.Fatalf("%s: not within %v; inbox rows %v; /readyz %s\n%s", what, limit, f.statuses(), f.body, f.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// exactlyOnce checks that every invoice sent was processed once: inbox
// rows PROCESSED only (nothing dead-lettered or failed), one archived
// document each.
func (f *faultRun) exactlyOnce() {
	f.t.Helper()
	if got := f.statuses(); len(got) != 1 || got["PROCESSED"] != f.sent {
		f.t.Errorf("inbox rows by status %v, want only PROCESSED %d (nothing dead-lettered or failed)", got, f.sent)
	}
	var docs int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM archived_documents`).Scan(&docs); err != nil {
		f.t.Fatal(err)
	}
	if docs != f.sent {
		f.t.Errorf("%d archived documents for %d invoices, want one each", docs, f.sent)
	}
}

// proxied is url with its host:port replaced by the proxy's.
func proxied(t *testing.T, raw string, px *tcpproxy.Proxy) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	return u.String()
}

// Issue 29.3: `inboxctl run` with its database behind a slow link and then
// a partition (the connection stays open and nothing arrives). It keeps
// processing, slowly, over the slow link; it reports not ready while the
// database does not answer; it dead-letters nothing; and once the
// partition is gone it finishes every message by itself, each once
// (before --process-timeout, a delivery whose statement was lost in the
// partition was held for ever).
func TestRunRidesOutASlowAndPartitionedDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow link and a partition of a few seconds; skipped with -short")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"single", []string{"--process-timeout", "5s"}},
		// A batch of 4 makes about 15 round trips: 6s on the slow link.
		{"batch", []string{"--batch", "4", "--batch-wait", "50ms", "--process-timeout", "20s"}},
		// A worker's entry whose outcome was lost is claimed again after its
		// lease.
		{"store-then-process", []string{"--mode", "store-then-process", "--process-timeout", "5s", "--lease", "10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, dbtest.Postgres)
			u, err := url.Parse(db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			px := tcpproxy.Start(t, u.Host)
			broker := "amqp://guest:guest@127.0.0.1:5672/"
			f := startFaultRun(t, db, broker, append([]string{"--db", proxied(t, db.DSN, px), "--broker", broker}, tc.args...)...)

			f.publish(5)
			f.wait("the first 5 processed", time.Minute, f.allProcessed)

			px.Delay(200 * time.Millisecond) // each way: a round trip takes 400ms more
			f.publish(2)
			took := f.wait("2 processed over the slow link", 2*time.Minute, f.allProcessed)
			t.Logf("2 messages over a link with 200ms each way: %v", took.Round(time.Millisecond))
			px.Restore()

			px.Hang()
			f.publish(5)
			took = f.wait("/readyz 503 while the database is partitioned", time.Minute, func() bool { return !f.ready() })
			t.Logf("not ready %v after the partition began: %s", took.Round(time.Millisecond), f.body)
			wantOnlyFailing(t, f.body, "database")
			time.Sleep(3 * time.Second) // the partition lasts a while
			px.Restore()
			took = f.wait("every message processed after the partition", 2*time.Minute, f.allProcessed)
			t.Logf("all %d processed %v after the partition ended", f.sent, took.Round(time.Millisecond))
			f.wait("/readyz 200 after the partition", time.Minute, f.ready)
			f.exactlyOnce()
		})
	}
}

// Issue 29.3: the broker partitioned from `inboxctl run` (the connection
// stays open, nothing arrives). The adapter notices by its heart-beats
// (?heartbeat=1s, on RabbitMQ ?heartbeat=1: about three intervals), /readyz names the broker, and
// once the partition is gone the adapter reconnects by itself and every
// message is processed once; a delivery whose acknowledgement was lost
// comes back as a duplicate.
func TestRunRidesOutAPartitionedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("a broker partition of a few seconds per broker; skipped with -short")
	}
	t.Parallel()
	for _, tc := range []struct{ name, addr, url, heartbeat string }{
		{"activemq", stompAddr, "stomp://%s", "?heartbeat=1s"},
		{"rabbitmq", "127.0.0.1:5672", "amqp://guest:guest@%s/", "?heartbeat=1"},
		{"jetstream", "127.0.0.1:4222", "nats://%s", "?heartbeat=1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "activemq" {
				needActiveMQ(t)
			}
			px := tcpproxy.Start(t, tc.addr)
			db := dbtest.New(t, dbtest.Postgres)
			f := startFaultRun(t, db, fmt.Sprintf(tc.url, tc.addr), "--db", db.DSN,
				"--broker", fmt.Sprintf(tc.url, px.Addr())+tc.heartbeat)
			f.publish(3)
			f.wait("the first 3 processed", time.Minute, f.allProcessed)

			px.Hang()
			took := f.wait("/readyz 503 while the broker is partitioned", time.Minute, func() bool { return !f.ready() })
			t.Logf("not ready %v after the partition began: %s", took.Round(time.Millisecond), f.body)
			wantOnlyFailing(t, f.body, "broker")
			f.publish(3) // straight to the broker: they wait there
			time.Sleep(2 * time.Second)
			px.Restore()
			took = f.wait("every message processed after the partition", 2*time.Minute, f.allProcessed)
			t.Logf("all %d processed %v after the partition ended", f.sent, took.Round(time.Millisecond))
			f.wait("/readyz 200 after the partition", time.Minute, f.ready)
			f.exactlyOnce()
		})
	}
}

// Issue 29.4: the STOMP connection turns to garbage mid-run, one way or
// the other (a hostile or broken peer, a corrupting middlebox). The side
// that gets garbage refuses it and drops the connection; the client
// redials (into garbage again) until the link is sane, and then every
// message is processed once; nothing is dead-lettered for the garbage.
func TestRunRidesOutAGarbledSTOMPConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("a garbled broker connection for a few seconds; skipped with -short")
	}
	t.Parallel()
	needActiveMQ(t)
	for _, tc := range []struct {
		name string
		dir  tcpproxy.Direction
	}{{"from the broker", tcpproxy.ToClient}, {"to the broker", tcpproxy.ToTarget}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			px := tcpproxy.Start(t, stompAddr)
			db := dbtest.New(t, dbtest.Postgres)
			f := startFaultRun(t, db, "stomp://"+stompAddr, "--db", db.DSN, "--broker", "stomp://"+px.Addr()+"?heartbeat=1s&receipt-timeout=5s")
			f.publish(3)
			f.wait("the first 3 processed", time.Minute, f.allProcessed)

			px.Garble(tc.dir)
			f.publish(3) // straight to the broker: they wait there
			took := f.wait("/readyz 503 while the connection carries garbage", time.Minute, func() bool { return !f.ready() })
			t.Logf("not ready %v after the garbage began: %s", took.Round(time.Millisecond), f.body)
			wantOnlyFailing(t, f.body, "broker")
			time.Sleep(2 * time.Second)
			px.Restore()
			took = f.wait("every message processed after the garbage", 2*time.Minute, f.allProcessed)
			t.Logf("all %d processed %v after the link was sane again", f.sent, took.Round(time.Millisecond))
			f.wait("/readyz 200 after the garbage", time.Minute, f.ready)
			f.exactlyOnce()
		})
	}
}
