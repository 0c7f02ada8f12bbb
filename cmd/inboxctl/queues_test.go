package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/internal/protonbroker"
)

// `run --queue Q` on a RabbitMQ quorum queue that exists already, declared
// with other arguments (a dead-letter exchange, a delivery limit), as
// production queues are (issue 23.15): the queue is used as it is and the
// known mix settles. Before the fix run exited 2 with "broker …
// unreachable: … PRECONDITION_FAILED - inequivalent arg 'x-queue-type'".
func TestRunOnExistingQuorumQueue(t *testing.T) {
	t.Parallel()
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	queue := fmt.Sprintf("inboxctl.quorum.%d", time.Now().UnixNano())
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable (start it with rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{queue, "DLQ." + queue} {
		args := amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(100), "x-dead-letter-exchange": ""}
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatalf("declare quorum queue %s: %v", q, err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", db, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, knownMix("q"), "publish", "--broker", url, "--queue", queue, "--file", "-"), 0, "published 5 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", db, "--broker", url, "--queue", queue, "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	base := metricsBase(t, logs)
	waitForMetrics(t, base, logs, []string{
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="PROCESSED",status="PROCESSED"} 2`,
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="DUPLICATE",status="PROCESSED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="invoice-consumer",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
	})
	stopRun(t, run, logs)
}

// `run` on an AMQP 1.0 broker that settles deliveries itself (Qpid
// Proton's example broker, issue 23.12) exits 2 naming the broker's settle
// mode and allow-presettled, worded as a refusal, not an outage. Before
// the fix it consumed at most once without a word.
func TestRunRefusesPresettlingBroker(t *testing.T) {
	t.Parallel()
	broker := "amqp10://" + protonbroker.Start(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", db), 0, "migrated")
	r := inboxctl(t, "", "run", "--db", db, "--broker", broker, "--queue", "invoices", "--shutdown-timeout", "1s")
	wantCode(t, r, 2, "refused", "snd-settle-mode mixed", "allow-presettled")
	if strings.Contains(r.stderr, "unreachable") {
		t.Errorf("a broker that answers is called unreachable:\n%s", r.stderr)
	}
}
