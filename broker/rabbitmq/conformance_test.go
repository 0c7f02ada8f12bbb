package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

const conformanceURL = "amqp://guest:guest@127.0.0.1:5672/"

// TestConformance runs the broker conformance suite against the machine's
// RabbitMQ on quorum queues that exist before the adapter opens, declared
// as an administrator would (quorum, with a max-length), and an adapter
// that names no queue type: an existing queue is used as it is (issue
// 23.15), and its x-delivery-count is the delivery count.
func TestConformance(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(conformanceURL)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at 127.0.0.1:5672 (guest/guest); start it with: rabbitmq-server -detached: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	cfg := rabbitmq.Config{URL: conformanceURL, Reconnect: inboxkit.Backoff{Initial: 50 * time.Millisecond}}
	open := func(t testing.TB, queue string) *rabbitmq.Adapter {
		t.Helper()
		c := cfg
		c.Queue = queue
		c.Prefetch = consumertest.Prefetch(t, 4) // ×16 in the batch16 bodies
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, err := rabbitmq.Open(ctx, c)
		if err != nil {
			t.Fatalf("rabbitmq open %q: %v", queue, err)
		}
		return a
	}
	consumertest.Run(t, consumertest.Broker{
		Name: "rabbitmq",
		// Quorum queues report x-delivery-count.
		Features:   consumertest.Features{DeliveryCount: true, RedeliveredFlag: true, FirstDelivery: true, HandBackInOrder: true},
		BatchSizes: []int{1, 16}, // batching changes no outcome (issue 15)
		// MariaDB here too: its paths differ (a resend read after its
		// failed INSERT, the marker that reports its row by the last
		// insert id, a batch's rows inserted again without the present).
		Databases: []string{dbtest.Postgres, dbtest.SQLite, dbtest.MySQL},
		NewSource: func(t testing.TB, queue string) consumer.Source {
			a := open(t, queue)
			t.Cleanup(func() { a.Close() })
			return a
		},
		NewPublisher: func(t testing.TB) dlq.Publisher { return open(t, "") },
		Declare: func(t testing.TB, queues ...string) {
			// One connection declares them one after another: RabbitMQ
			// 3.10 fails (541 INTERNAL_ERROR) when two connections declare
			// the same quorum queue at once. Delete them at the end.
			ch, err := conn.Channel()
			if err != nil {
				t.Fatalf("declare: channel: %v", err)
			}
			defer ch.Close()
			for _, q := range queues {
				if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-max-length": int32(100000)}); err != nil {
					t.Fatalf("declare quorum queue %s: %v", q, err)
				}
			}
			t.Cleanup(func() {
				ch, err := conn.Channel()
				if err != nil {
					t.Logf("cleanup: channel: %v", err)
					return
				}
				defer ch.Close()
				for _, q := range queues {
					_, _ = ch.QueueDelete(q, false, false, false)
				}
			})
		},
	})
}
