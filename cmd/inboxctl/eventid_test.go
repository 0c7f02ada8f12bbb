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

// TestRunEventIDFrom: a legacy producer sends no eventId. `run
// --event-id-from` derives the id from the JSON body on a real broker
// (ActiveMQ), logs and stores the source, a resend is a duplicate, a message
// without any id source is dead-lettered, and `audit --broker` shows that
// id-less dead letter next to the case's rows.
func TestRunEventIDFrom(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.SQLite)
	dbURL := dbURL(t, db)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.eventid.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated")
	body := `{"invoiceNo":"INV-77","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}`
	events := strings.Join([]string{
		`{"headers":{"correlationId":"order-77"},"body":` + body + `}`,
		`{"headers":{"correlationId":"order-77"},"body":` + body + `}`,           // resend, new broker message id
		`{"headers":{"correlationId":"order-77"},"body":{"customerNo":"K-100"}}`, // no id anywhere
	}, "\n") + "\n"
	// No eventId header on purpose: publish refuses that without --allow-invalid.
	wantCode(t, inboxctl(t, events, "publish", "--broker", broker, "--queue", queue, "--file", "-", "--allow-invalid"), 0, "published 3 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, logs := startRun(ctx, t, "--db", dbURL, "--broker", broker, "--queue", queue, "--log-format", "json",
		"--event-id-from", "header:eventId,json:invoiceNo", "--log-level", "debug") // counts the lines per message
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--event-id", "INV-77", "--json")
		var rows []struct{ Status, EventIDSource string }
		_ = json.Unmarshal([]byte(r.stdout), &rows)
		if len(rows) == 1 && rows[0].Status == "PROCESSED" && strings.Count(logs.String(), `"msg":"settled"`) >= 3 {
			if rows[0].EventIDSource != "json:invoiceNo" {
				t.Fatalf("row source %q, want json:invoiceNo", rows[0].EventIDSource)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled in 30s: %s\nlogs:\n%s", r, logs.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, want := range []string{`"event_id":"INV-77","event_id_source":"json:invoiceNo"`, `"outcome":"DUPLICATE"`, `"reason":"MISSING_EVENT_ID"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	r := inboxctl(t, "", "audit", "--db", dbURL, "--event-id", "INV-77", "--broker", broker, "--dlq", dlqName)
	wantCode(t, r, 0, "audit of event id INV-77: 1 row(s)", "json:invoiceNo", "queues ("+dlqName+"): 1 message(s) for this case", "(no event id)", "MISSING_EVENT_ID")
	t.Logf("audit:\n%s", r.stdout)
}

// TestRunOrderKey: `run --order-key json:customerNo` on a real broker
// (ActiveMQ), in store-then-process mode (the transactional mode is the
// conformance suite's and the torture's), stores each message's key in
// ORDER_KEY, shown by audit; a bad source list is refused with exit 2.
func TestRunOrderKey(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.SQLite)
	dbURL := dbURL(t, db)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.orderkey.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, "", "run", "--db", dbURL, "--broker", broker, "--queue", queue, "--order-key", "customerNo"), exitUsage,
		`--order-key: order key source "customerNo" is unknown`)

	var events strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&events, `{"headers":{"eventId":"INV-O%d","correlationId":"order-o"},"body":{"invoiceNo":"INV-O%d","customerNo":"K-100","amount":"1.00","currency":"EUR","issuedAt":"2026-01-05"}}`+"\n", i, i)
	}
	wantCode(t, inboxctl(t, events.String(), "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 3 message(s)")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, logs := startRun(ctx, t, "--db", dbURL, "--broker", broker, "--queue", queue, "--concurrency", "4", "--order-key", "json:customerNo",
		"--mode", "store-then-process")
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", "order-o", "--json")
		var rows []struct{ EventID, Status, OrderKey string }
		_ = json.Unmarshal([]byte(r.stdout), &rows)
		done := len(rows) == 3
		for _, row := range rows {
			done = done && row.Status == "PROCESSED"
		}
		if done {
			for _, row := range rows {
				if row.OrderKey != "K-100" {
					t.Errorf("%s: order key %q, want K-100", row.EventID, row.OrderKey)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not processed in 30s: %s\nlogs:\n%s", r, logs.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}
