package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// Issue 23.11: in store-then-process mode the summary line had no
// processed= (the workers' outcomes were not counted), --batch fed no
// inboxkit_batch_size (the workers' batches were not observed), and a
// dead letter was logged twice (the consumer's "settled" line and the
// worker's). Now the summary counts the workers' outcomes apart from the
// deliveries settled with the broker, the histogram has the workers'
// batches, and the dead letter has one line, at warn.
func TestRunStoreThenProcessSummaryBatchAndOneDeadLetterLine(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.stp.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, knownMix("stp"), "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 5 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", db.DSN, "--broker", broker, "--queue", queue, "--mode", "store-then-process",
		"--batch", "8", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	base := metricsBase(t, logs)
	metrics := waitForMetrics(t, base, logs, []string{
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="PROCESSED",status="PROCESSED"} 2`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="invoice-consumer",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
		`inboxkit_deliveries_total{action="reject",consumer="invoice-consumer",outcome="REJECTED",status="REJECTED"} 1`,
	})
	// The four stored entries went through the workers' batches (the
	// resend is a copy of one of them: STORED while that entry is
	// unfinished, a duplicate once it is).
	waitForMetrics(t, base, logs, []string{`inboxkit_batch_size_sum{consumer="invoice-consumer"} 4`})
	t.Logf("/metrics:\n%s", grepLines(metrics, "inboxkit_deliveries_total", "inboxkit_batch_size"))
	stopRun(t, run, logs)

	var summary map[string]any
	deadLetterLines := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		if m["msg"] == "summary" {
			summary = m
		}
		if m["event_id"] == "stp-4" && m["outcome"] == "DEAD_LETTER" {
			deadLetterLines++
			if m["level"] != "WARN" {
				t.Errorf("the dead letter is logged at %v, want WARN: %v", m["level"], m)
			}
		}
	}
	if deadLetterLines != 1 {
		t.Errorf("the dead letter stp-4 has %d log lines, want 1:\n%s", deadLetterLines, logs)
	}
	want := map[string]float64{"settled": 5, "processed": 2, "rejected": 1, "dead_lettered": 1}
	for k, v := range want {
		if summary[k] != v {
			t.Errorf("summary %s=%v, want %v (summary %v)", k, summary[k], v, summary)
		}
	}
	// The resend is counted as stored or as a duplicate, by when it came.
	stored, _ := summary["stored"].(float64)
	dups, _ := summary["duplicates"].(float64)
	if stored < 4 || stored+dups != 5 {
		t.Errorf("summary stored=%v duplicates=%v, want 4 or 5 stored and 5 in all (summary %v)", stored, dups, summary)
	}
}
