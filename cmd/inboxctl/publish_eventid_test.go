package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Issue 23.8: publish refused a line without eventId ("the consumer would
// dead-letter it"), untrue for a consumer run with --event-id-from; it takes
// the same flag now and checks with the same chain. And the correlationId
// header the README's events carry was not what the source correlation-id
// read, so `run --event-id-from correlation-id,message-id` took the broker
// message id without a word; it takes the correlation id audit shows now.
func TestPublishEventIDFromAndTheCorrelationIDSource(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.SQLite)
	dbURL := dbURL(t, db)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.corrid.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated")
	corr := fmt.Sprintf("order-%d", time.Now().UnixNano())
	line := `{"headers":{"correlationId":"` + corr + `"},"body":{"invoiceNo":"INV-C1","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}}` + "\n"
	pub := func(args ...string) result {
		return inboxctl(t, line, append([]string{"publish", "--broker", broker, "--queue", queue, "--file", "-"}, args...)...)
	}
	wantCode(t, pub(), exitUsage, `no "eventId" header`, "give publish the same --event-id-from", "nothing was published")
	wantCode(t, pub("--event-id-from", "header:eventId,json:orderNo"), exitUsage,
		"none of --event-id-from header:eventId,json:orderNo holds one", "nothing was published")
	wantCode(t, pub("--event-id-from", "header:nope,message-id"), 0, "published 1 message(s)") // the broker gives every message an id
	wantCode(t, pub("--event-id-from", "header:eventId,correlation-id"), 0, "published 1 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", dbURL, "--broker", broker, "--queue", queue, "--event-id-from", "correlation-id,message-id")
	var rows []struct{ EventID, Status, EventIDSource string }
	waitFor(t, "the event under its correlation id", func() bool {
		r := inboxctl(t, "", "audit", "--db", dbURL, "--correlation-id", corr, "-o", "json")
		rows = nil
		_ = json.Unmarshal([]byte(r.stdout), &rows)
		return len(rows) == 1 && rows[0].Status == "PROCESSED"
	}, logs)
	if rows[0].EventID != corr || rows[0].EventIDSource != "correlation-id" {
		t.Errorf("the row's event id %q from %q, want %q from correlation-id (both messages carry it: one row)", rows[0].EventID, rows[0].EventIDSource, corr)
	}
	stopRun(t, run, logs)
}
