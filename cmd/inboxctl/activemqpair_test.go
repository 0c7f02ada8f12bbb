package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// activeMQPairScript is scripts/activemq-pair seen from this package.
const activeMQPairScript = "../../scripts/activemq-pair"

// activeMQPair is a private ActiveMQ Classic shared-file-system
// master/slave pair made by scripts/activemq-pair in a directory of its
// own, stopped by PID and removed at test end.
type activeMQPair struct {
	*scripted
	t    *testing.T
	port int // broker a's STOMP port; broker b's is port+2
}

// startActiveMQPair starts the pair with broker a (the master) on STOMP
// port and broker b (the slave, waiting on the store's lock) on port+2. It
// fails the test, naming the command, when the pair does not start.
func startActiveMQPair(t *testing.T, port int) *activeMQPair {
	t.Helper()
	p := &activeMQPair{t: t, port: port, scripted: newScripted(t, activeMQPairScript, "inboxkit-amqpair-",
		"INBOXKIT_AMQPAIR_DIR", fmt.Sprintf("INBOXKIT_AMQPAIR_PORT=%d", port))}
	start := time.Now()
	if out, err := p.script("start"); err != nil {
		t.Fatalf("an ActiveMQ master/slave pair did not start (needs the Debian package activemq in /usr/share/activemq and java; "+
			"start it by hand with `scripts/activemq-pair start`, see docs/operations.md): %v\n%s", err, out)
	}
	t.Logf("ActiveMQ pair started in %v", time.Since(start).Round(100*time.Millisecond))
	return p
}

// url lists both brokers, the master first.
func (p *activeMQPair) url() string {
	return fmt.Sprintf("stomp://127.0.0.1:%d,127.0.0.1:%d", p.port, p.port+2)
}

// depth is the number of messages on queue q of the broker that listens.
func (p *activeMQPair) depth(q string) int {
	p.t.Helper()
	b, err := brokerurl.Open(p.url(), brokerurl.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	defer b.Close()
	n, _, err := b.Depth(context.Background(), q)
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// Issue 29.1, ActiveMQ: `inboxctl run` on the address list of a
// shared-storage master/slave pair while invoices arrive at a steady pace;
// the master is killed with -9 mid-run, right after a burst (deliveries in
// flight on it). The slave takes the KahaDB lock and opens its ports, the
// consumer reconnects to it by itself, the publisher (`inboxctl publish` on
// the same list, retried while neither broker listens) too, and every
// invoice is processed exactly once: nothing lost, nothing dead-lettered,
// nothing left on the queue. The failover time (kill → the first invoice
// published after the kill processed) is logged.
func TestRunActiveMQPairFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("an ActiveMQ master/slave pair, the master killed; skipped with -short")
	}
	t.Parallel()
	p, f, publish, retries := startPairRun(t, 61713)

	const n, burst = 50, 10
	publish(2)
	f.wait("the first invoices processed", time.Minute, f.allProcessed)
	var killedWhat string
	atKill, recovery, allDone := killMidRun(f, n, burst, publish, func() {
		out, err := p.script("kill", "master")
		if err != nil {
			t.Fatalf("scripts/activemq-pair kill master: %v\n%s", err, out)
		}
		killedWhat = strings.TrimSpace(out)
		t.Logf("%s", killedWhat)
	})
	if out, err := p.script("status"); err != nil || !regexp.MustCompile(`b pid \d+ master`).MatchString(out) {
		t.Errorf("after the kill, want broker b the master: %v\n%s", err, out)
	}
	dlq, left := noneLeft(f, p.depth)
	reconnects := len(regexp.MustCompile(`"msg":"stomp: connection to the broker failed, reconnecting"`).FindAllStringIndex(f.logs.String(), -1))
	st := f.statuses()
	var redelivered int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE ATTEMPTS > 1`).Scan(&redelivered); err != nil {
		t.Fatal(err)
	}
	_, metrics := httpGet(t, f.base+"/metrics")
	t.Logf("ActiveMQ master/slave failover ledger: %s (kill -9) right after a burst of %d, %d of %d invoices published; "+
		"deliveries %d, duplicates %d, publish retries %d; "+
		"sent %d, PROCESSED %d, DEAD_LETTERED %d, TECHNICAL_FAILURE %d, rows with more than one attempt %d, "+
		"DLQ %d, left on the queue %d; reconnects logged %d; failover (kill -> first invoice published after it processed) %v; "+
		"every invoice processed %v after the kill",
		killedWhat, burst, atKill, n, metricSum(metrics, "inboxkit_deliveries_total"), metricSum(metrics, "inboxkit_duplicates_total"), *retries,
		f.sent, st["PROCESSED"], st["DEAD_LETTERED"], st["TECHNICAL_FAILURE"], redelivered,
		dlq, left, reconnects, recovery.Round(time.Millisecond), allDone.Round(time.Millisecond))
}

// startPairRun starts a master/slave pair on port (see startActiveMQPair),
// `inboxctl run` on its address list with a 2 s heartbeat on a fresh
// PostgreSQL database, and the publisher of pairPublisher.
func startPairRun(t *testing.T, port int) (p *activeMQPair, f *faultRun, publish func(int), retries *int) {
	t.Helper()
	p = startActiveMQPair(t, port)
	broker := p.url()
	db := dbtest.New(t, dbtest.Postgres)
	f = startFaultRun(t, db, broker, "--db", db.DSN, "--broker", broker+"?heartbeat=2s", "--process-timeout", "5s")
	publish, retries = pairPublisher(t, f, broker)
	return p, f, publish, retries
}

// pairPublisher returns a publish of n invoices through `inboxctl publish`
// on the pair's addresses, sent again while it fails (no broker listens
// during a failover, none answers while the master hangs): a batch cut
// short is sent again whole, and the inbox makes the copies duplicates;
// and the count of such retries.
func pairPublisher(t *testing.T, f *faultRun, broker string) (publish func(int), retries *int) {
	retries = new(int)
	publish = func(n int) {
		t.Helper()
		first := f.sent
		for start := time.Now(); ; *retries++ {
			var lines strings.Builder
			for i := 1; i <= n; i++ {
				id := fmt.Sprintf("pt-%d", first+i)
				lines.WriteString(invoiceLine(id, "corr-"+id, "INV-"+id, "K-100") + "\n")
			}
			r := inboxctl(t, lines.String(), "publish", "--broker", broker, "--queue", f.queue, "--file", "-")
			if r.code == 0 {
				f.sent = first + n
				return
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("publish pt-%d..pt-%d: not accepted within a minute: %s\n%s", first+1, first+n, r, f.logs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return publish, retries
}

// Issue 29.1 and 29.3, ActiveMQ: the master hangs (SIGSTOP for 20 s)
// mid-run, right after a burst, instead of dying. It keeps the store's lock
// and its ports, so the slave cannot take over: for the consumer it is a
// partition. With a 2 s STOMP heartbeat the consumer notices, /readyz
// reports not ready while the master hangs, nothing goes to the dead-letter
// queue, and once the master goes on the consumer carries on by itself:
// every invoice processed exactly once, nothing left on the queue.
func TestRunActiveMQPairHangingMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("an ActiveMQ master/slave pair, the master hanging; skipped with -short")
	}
	t.Parallel()
	p, f, publish, retries := startPairRun(t, 61753)

	const n, burst, hang = 50, 10, 20 * time.Second
	publish(2)
	f.wait("the first invoices processed", time.Minute, f.allProcessed)
	var paused string
	notReady := make(chan time.Duration, 1) // when /readyz first failed after the pause; -1: never
	atPause, recovery, allDone := killMidRun(f, n, burst, publish, func() {
		out, err := p.script("pause", "master")
		if err != nil {
			t.Fatalf("scripts/activemq-pair pause master: %v\n%s", err, out)
		}
		paused = strings.TrimSpace(out)
		t.Logf("%s", paused)
		t.Cleanup(func() { p.script("resume") })
		start := time.Now()
		go func() {
			seen := time.Duration(-1)
			for time.Since(start) < hang {
				if r, err := http.Get(f.base + "/readyz"); err == nil {
					r.Body.Close()
					if r.StatusCode != http.StatusOK {
						seen = time.Since(start)
						break
					}
				}
				time.Sleep(200 * time.Millisecond)
			}
			notReady <- seen
		}()
		go func() {
			time.Sleep(hang)
			if out, err := p.script("resume"); err != nil {
				t.Errorf("scripts/activemq-pair resume: %v\n%s", err, out)
			}
		}()
	})
	if out, err := p.script("status"); err != nil || !strings.Contains(out, " master ") {
		t.Errorf("after the hang, want a master: %v\n%s", err, out)
	}
	dlq, left := noneLeft(f, p.depth)
	seen := <-notReady
	if seen < 0 {
		t.Errorf("/readyz answered 200 throughout the master's %v hang\n%s", hang, f.logs)
	}
	st := f.statuses()
	_, metrics := httpGet(t, f.base+"/metrics")
	t.Logf("ActiveMQ hanging master ledger: %s for %v right after a burst of %d, %d of %d invoices published; "+
		"/readyz not ready %v after the pause; deliveries %d, duplicates %d, publish retries %d; "+
		"sent %d, PROCESSED %d, DEAD_LETTERED %d, TECHNICAL_FAILURE %d, DLQ %d, left on the queue %d; "+
		"recovery (pause -> first invoice published after it processed) %v; every invoice processed %v after the pause",
		paused, hang, burst, atPause, n, seen.Round(time.Millisecond), metricSum(metrics, "inboxkit_deliveries_total"),
		metricSum(metrics, "inboxkit_duplicates_total"), *retries, f.sent, st["PROCESSED"], st["DEAD_LETTERED"],
		st["TECHNICAL_FAILURE"], dlq, left, recovery.Round(time.Millisecond), allDone.Round(time.Millisecond))
}
