package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// stats counts rows per consumer and status on every database, shows the
// oldest open row and the stuck one at the threshold; --json has stable
// names and [] for no rows.
func TestStats(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			r := inboxctl(t, "", "stats", "--db", url, "--json")
			wantCode(t, r, 0, `"counts": []`, `"oldestNonTerminal": null`)
			wantCode(t, inboxctl(t, "", "stats", "--db", url), 0, "no rows", "oldest non-terminal row: none")
			plant(t, db)
			r = inboxctl(t, "", "stats", "--db", url)
			wantCode(t, r, 0, "invoice-consumer", "PROCESSED", "TECHNICAL_FAILURE", "open rows at the threshold: 1")
			t.Logf("inboxctl stats:\n%s", r.stdout)
			r = inboxctl(t, "", "stats", "--db", url, "--json")
			wantCode(t, r, 0)
			var rep statsReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, r)
			}
			rows := map[string]int64{}
			for _, c := range rep.Counts {
				rows[string(c.Status)] += c.Rows
			}
			if rows["PROCESSED"] != 4 || rows["REJECTED"] != 2 || rows["TECHNICAL_FAILURE"] != 1 || rep.AtThreshold != 1 || rep.OldestNonTerminal == nil {
				t.Errorf("stats --json: %+v", rep)
			}
		})
	}
}

// stats --broker --dlq shows the dead-letter queue's depth on ActiveMQ
// (browsed), RabbitMQ (passive declare) and JetStream (the subject's count
// in its stream), and says AMQP 1.0 cannot tell; nothing is consumed.
func TestStatsDLQDepth(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", db), 0, "migrated")
	for _, tc := range []struct{ name, broker string }{
		{"activemq", "stomp://" + stompAddr},
		{"rabbitmq", "amqp://guest:guest@127.0.0.1:5672/"},
		{"jetstream", "nats://127.0.0.1:4222"},
		{"amqp10", "amqp10://guest:guest@127.0.0.1:5672"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queue := fmt.Sprintf("DLQ.inboxctl.stats.%s.%d", tc.name, time.Now().UnixNano())
			t.Cleanup(func() { dropQueue(t, tc.broker, queue) })
			events := invoiceLine("s-1", "corr-s", "INV-S1", "K-100") + "\n" + invoiceLine("s-2", "corr-s", "INV-S2", "K-100") + "\n"
			wantCode(t, inboxctl(t, events, "publish", "--broker", tc.broker, "--queue", queue, "--file", "-"), 0, "published 2 message(s)")
			for range 2 { // twice: the first look consumed nothing
				r := inboxctl(t, "", "stats", "--db", db, "--broker", tc.broker, "--dlq", queue, "--json")
				wantCode(t, r, 0)
				var rep statsReport
				if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
					t.Fatalf("stats --json: %v\n%s", err, r)
				}
				want := 2
				if tc.name == "amqp10" {
					want = -1
				}
				if rep.DLQ == nil || rep.DLQ.Depth != want || (want < 0 && rep.DLQ.Note == "") {
					t.Fatalf("stats --dlq on %s: %+v, want depth %d\n%s", tc.name, rep.DLQ, want, r)
				}
			}
			r := inboxctl(t, "", "stats", "--db", db, "--broker", tc.broker, "--dlq", queue)
			wantCode(t, r, 0, "dead-letter queue "+queue)
			t.Logf("%s: %s", tc.name, lastLine(r.stdout))
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// dropQueue removes what TestStatsDLQDepth left: the RabbitMQ queue or the
// JetStream stream (an ActiveMQ queue cannot be deleted over STOMP; its two
// messages stay, as other tests' do).
func dropQueue(t *testing.T, broker, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := brokerurl.Open(broker, brokerurl.Options{})
	if err != nil {
		return
	}
	defer b.Close()
	switch b.URL.Kind {
	case brokerurl.AMQP, brokerurl.AMQP10:
		if conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/"); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
			}
			conn.Close()
		}
	case brokerurl.NATS:
		if nc, err := nats.Connect(b.NATSURL()); err == nil {
			if js, err := natsjs.New(nc); err == nil {
				_ = js.DeleteStream(ctx, jetstream.StreamName(queue))
			}
			nc.Close()
		}
	}
}
