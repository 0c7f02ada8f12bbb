package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// `run --batch 16` settles a known mix as the single-message path does
// (the same counts on /metrics as TestRunMetricsAndReadiness), every
// delivery went through a batch (inboxkit_batch_size sums to the 5
// deliveries), and it drains on SIGTERM.
func TestRunBatch(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.batch.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--seed-customers"), 0, "migrated")
	events := knownMix("b") // the resend maybe in the same batch as its first copy
	wantCode(t, inboxctl(t, events, "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 5 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", db.DSN, "--broker", broker, "--queue", queue, "--batch", "16", "--batch-wait", "200ms",
		"--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	base := metricsBase(t, logs)
	want := []string{
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="PROCESSED",status="PROCESSED"} 2`,
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="DUPLICATE",status="PROCESSED"} 1`,
		`inboxkit_deliveries_total{action="reject",consumer="invoice-consumer",outcome="REJECTED",status="REJECTED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="invoice-consumer",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
		`inboxkit_runtime_errors_total{consumer="invoice-consumer"} 0`,
		`inboxkit_batch_size_sum{consumer="invoice-consumer"} 5`,
	}
	metrics := waitForMetrics(t, base, logs, want)
	t.Logf("/metrics after the mix:\n%s", grepLines(metrics, "inboxkit_deliveries_total", "inboxkit_batch_size"))
	stopRun(t, run, logs)
}
