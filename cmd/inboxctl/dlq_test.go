package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/jetstream"
)

// Issue 11.6: `dlq list` / `dlq replay` on a mistyped queue created it.
// Now they say it does not exist (exit 1) and create nothing: asked twice,
// the second answer is the same, and the broker has no such queue/stream.
func TestDLQMistypedQueueIsNotCreated(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	queue := fmt.Sprintf("DLQ.mistyped.%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		broker string
		exists func() bool
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", func() bool {
			conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
			if err != nil {
				t.Fatalf("RabbitMQ: %v", err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			return err == nil
		}},
		{"nats://127.0.0.1:4222", func() bool {
			nc, err := nats.Connect("nats://127.0.0.1:4222")
			if err != nil {
				t.Fatalf("NATS: %v", err)
			}
			defer nc.Close()
			js, err := natsjs.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = js.Stream(ctx, jetstream.StreamName(queue))
			return err == nil
		}},
		{"embedded:" + filepath.Join(t.TempDir(), "js"), nil},
	} {
		t.Run(tc.broker[:4], func(t *testing.T) {
			for i := 0; i < 2; i++ {
				wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", tc.broker, "--queue", queue), 1, "queue "+queue+" does not exist", "nothing was created")
				wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", tc.broker, "--queue", queue, "--all", "--db", sqlite), 1, "queue "+queue+" does not exist")
			}
			if tc.exists != nil && tc.exists() {
				t.Errorf("%s now exists on %s", queue, tc.broker)
			}
		})
	}
}

// embedded:DIR keeps its messages between commands: publish, then list.
func TestEmbeddedDirPersists(t *testing.T) {
	t.Parallel()
	broker := "embedded:" + filepath.Join(t.TempDir(), "js")
	wantCode(t, inboxctl(t, invoiceLine("emb-1", "corr-emb", "INV-E1", "K-100")+"\n", "publish", "--broker", broker, "--queue", "DLQ.emb", "--file", "-"), 0, "published 1 message(s)")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", "DLQ.emb"), 0, "DLQ.emb: 1 message(s)", "emb-1")
}

// On ActiveMQ a look at a queue creates it and STOMP cannot ask first, so
// an empty result says so instead of staying silent.
func TestDLQListSTOMPNotesCreation(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	queue := fmt.Sprintf("DLQ.mistyped.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", "stomp://"+stompAddr, "--queue", queue), 0, "0 message(s)", "cannot tell over STOMP whether a queue exists", "if "+queue+" is mistyped")
}
