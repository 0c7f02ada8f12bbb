package main

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// rabbitClusterScript is scripts/rabbit-cluster seen from this package.
const rabbitClusterScript = "../../scripts/rabbit-cluster"

// rabbitCluster is a private 3-node RabbitMQ cluster made by
// scripts/rabbit-cluster in a directory of its own, removed at test end.
type rabbitCluster struct {
	*scripted
	t    *testing.T
	port int // node i's AMQP port is port+i-1
}

// startRabbitCluster starts the cluster with its first node on port (the
// others on port+1 and port+2; distribution ports 20000 above) and nodes
// named name1..3@localhost. It fails the test, naming the command, when
// the cluster does not start.
func startRabbitCluster(t *testing.T, port int, name string) *rabbitCluster {
	t.Helper()
	c := &rabbitCluster{t: t, port: port, scripted: newScripted(t, rabbitClusterScript, "inboxkit-rabbitc-",
		"INBOXKIT_RABBITC_DIR", fmt.Sprintf("INBOXKIT_RABBITC_PORT=%d", port), "INBOXKIT_RABBITC_NAME="+name)}
	start := time.Now()
	out, err := c.script("start")
	if err != nil {
		// A node that hangs joining the forming cluster under load has
		// been seen once in CI (the script restarts it once); a new
		// cluster from scratch is the last try.
		t.Logf("scripts/rabbit-cluster start: %v\n%s\nstarting a new cluster once more", err, out)
		if out, err := c.script("clean"); err != nil {
			t.Fatalf("scripts/rabbit-cluster clean: %v\n%s", err, out)
		}
		out, err = c.script("start")
	}
	if err != nil {
		t.Fatalf("a 3-node RabbitMQ cluster did not start (needs the machine's rabbitmq-server and Erlang; "+
			"start it by hand with `scripts/rabbit-cluster start`, see docs/operations.md): %v\n%s", err, out)
	}
	t.Logf("3-node cluster started in %v", time.Since(start).Round(100*time.Millisecond))
	return c
}

// url lists the three nodes, for quorum queues.
func (c *rabbitCluster) url() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/?queue-type=quorum", c.port, c.port+1, c.port+2)
}

// leader is the number (1-3) of the node leading quorum queue q.
func (c *rabbitCluster) leader(q string) int {
	c.t.Helper()
	out, err := c.script("leader", q)
	if err != nil {
		c.t.Fatalf("scripts/rabbit-cluster leader %s: %v\n%s", q, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		c.t.Fatalf("scripts/rabbit-cluster leader %s: %q is no node number", q, out)
	}
	return n
}

// depth is the number of ready messages of queue q on the cluster (0 when
// it does not exist).
func (c *rabbitCluster) depth(q string) int {
	c.t.Helper()
	conn, err := rabbitmq.DialNodes(c.url(), amqp.Config{})
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		c.t.Fatal(err)
	}
	got, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return got.Messages
}

// Issue 29.1, RabbitMQ: `inboxctl run` on a quorum queue of a 3-node
// cluster, through the URL listing the three nodes, while invoices arrive
// at a steady pace; the node leading the queue is killed with -9 mid-run,
// right after a burst (deliveries in flight on it).
// The consumer, connected to that node (the queue was declared through
// it), reconnects to the next node by itself, the queue elects a new
// leader, the publishers fail over too, and every invoice is processed
// exactly once: nothing lost, nothing dead-lettered. The recovery time
// (kill → the first invoice published after the kill processed) is
// logged.
func TestRunRabbitClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node RabbitMQ cluster, a node killed; skipped with -short")
	}
	t.Parallel()
	c := startRabbitCluster(t, 5781, "ikrabbitt")
	broker := c.url()
	db := dbtest.New(t, dbtest.Postgres)
	f := startFaultRun(t, db, broker, "--db", db.DSN, "--broker", broker, "--process-timeout", "5s")

	const n, burst = 50, 10
	f.publish(2)
	f.wait("the first invoices processed", time.Minute, f.allProcessed)
	leader := c.leader(f.queue)
	atKill, recovery, allDone := killMidRun(f, n, burst, f.publish, func() {
		out, err := c.script("kill", strconv.Itoa(leader))
		if err != nil {
			t.Fatalf("scripts/rabbit-cluster kill %d: %v\n%s", leader, err, out)
		}
		t.Logf("%s", strings.TrimSpace(out))
	})
	dlq, left := noneLeft(f, c.depth)
	reconnects := len(regexp.MustCompile(`"msg":"rabbitmq: reconnected"`).FindAllStringIndex(f.logs.String(), -1))
	if leader == 1 && reconnects == 0 {
		t.Errorf("the consumer's node (1, through which the queue was declared) was killed, and the log shows no reconnect:\n%s", f.logs)
	}
	st := f.statuses()
	var docs, redelivered int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM archived_documents`).Scan(&docs); err != nil {
		t.Fatal(err)
	}
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE ATTEMPTS > 1`).Scan(&redelivered); err != nil {
		t.Fatal(err)
	}
	_, metrics := httpGet(t, f.base+"/metrics")
	t.Logf("RabbitMQ cluster failover ledger: queue leader node %d killed (kill -9) right after a burst of %d, %d of %d invoices published; "+
		"deliveries %d, duplicates %d; "+
		"sent %d, PROCESSED %d, DEAD_LETTERED %d, TECHNICAL_FAILURE %d, rows with more than one attempt %d, archived documents %d, "+
		"DLQ %d, left on the queue %d; adapter reconnects (the source and the dead-letter publisher) %d; recovery (kill -> first invoice published after it processed) %v; "+
		"every invoice processed %v after the kill",
		leader, burst, atKill, n, metricSum(metrics, "inboxkit_deliveries_total"), metricSum(metrics, "inboxkit_duplicates_total"), f.sent, st["PROCESSED"], st["DEAD_LETTERED"], st["TECHNICAL_FAILURE"], redelivered, docs,
		dlq, left, reconnects, recovery.Round(time.Millisecond), allDone.Round(time.Millisecond))
}

// killMidRun publishes invoices two at a time (publish) every 100ms until
// n are sent; past n/2 it publishes a burst (deliveries in flight) and
// calls kill once. Then it waits until every invoice is processed and
// checks f.exactlyOnce. It returns the number sent at the kill, the
// recovery time (kill -> the first invoice published after it processed)
// and how long after the kill every invoice was processed.
func killMidRun(f *faultRun, n, burst int, publish func(int), kill func()) (atKill int, recovery, allDone time.Duration) {
	f.t.Helper()
	var killed time.Time
	recovered := make(chan time.Duration, 1)
	for f.sent < n {
		publish(2)
		if killed.IsZero() && f.sent >= n/2 {
			publish(burst)
			kill()
			killed, atKill = time.Now(), f.sent
			go func() { recovered <- firstProcessedAfter(f.db.DB, atKill, killed) }()
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.wait("every invoice processed after the kill", 2*time.Minute, f.allProcessed)
	allDone = time.Since(killed)
	recovery = <-recovered
	if recovery < 0 {
		f.t.Fatalf("no invoice published after the kill was processed within 2 minutes\n%s", f.logs)
	}
	time.Sleep(2 * time.Second) // a redelivery, if any, would land now
	f.exactlyOnce()
	return atKill, recovery, allDone
}

// noneLeft reads the depth of f's queue and of its dead-letter queue and
// fails the test unless both are empty.
func noneLeft(f *faultRun, depth func(string) int) (dlq, left int) {
	f.t.Helper()
	dlq = depth("DLQ." + f.queue)
	if dlq != 0 {
		f.t.Errorf("%d messages on DLQ.%s, want none", dlq, f.queue)
	}
	left = depth(f.queue)
	if left != 0 {
		f.t.Errorf("%d messages left on %s, want none", left, f.queue)
	}
	return dlq, left
}

// firstProcessedAfter polls db until an invoice pt-N with N > sent is
// PROCESSED and returns how long after killed that was; -1 after 2
// minutes. It runs on its own goroutine: it reports through the result.
func firstProcessedAfter(db *sql.DB, sent int, killed time.Time) time.Duration {
	for time.Since(killed) < 2*time.Minute {
		rows, err := db.Query(`SELECT EVENT_ID FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'PROCESSED'`)
		if err == nil {
			found := false
			for rows.Next() {
				var id string
				if rows.Scan(&id) == nil {
					if k, err := strconv.Atoi(strings.TrimPrefix(id, "pt-")); err == nil && k > sent {
						found = true
					}
				}
			}
			if rows.Err() != nil {
				found = false
			}
			_ = rows.Close()
			if found {
				return time.Since(killed)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// metricSum adds up the samples of the Prometheus metric name (every label
// set) in the text exposition body.
func metricSum(body, name string) int {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
			if len(fields) > 0 {
				if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
					sum += v
				}
			}
		}
	}
	return int(sum)
}
