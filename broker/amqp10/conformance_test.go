package amqp10_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
)

// rabbitURL is RabbitMQ's AMQP 1.0 plugin on the machine's RabbitMQ;
// rabbit091 the same broker over AMQP 0-9-1, used to declare and delete
// queues (AMQP 1.0 has no queue management).
const (
	rabbitURL = "amqp10://guest:guest@127.0.0.1:5672"
	rabbit091 = "amqp://guest:guest@127.0.0.1:5672/"
)

// declarer connects over AMQP 0-9-1 and returns a function declaring
// durable classic queues, deleted again at the end of the test.
func declarer(t *testing.T) func(t testing.TB, queues ...string) {
	t.Helper()
	conn, err := amqp091.Dial(rabbit091)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at 127.0.0.1:5672 (guest/guest); start it with: rabbitmq-server -detached, and enable AMQP 1.0 with: rabbitmq-plugins enable rabbitmq_amqp1_0: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(t testing.TB, queues ...string) {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatalf("declare: channel: %v", err)
		}
		defer ch.Close()
		for _, q := range queues {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatalf("declare queue %s: %v", q, err)
			}
		}
		t.Cleanup(func() {
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			defer ch.Close()
			for _, q := range queues {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
		})
	}
}

// open opens an Adapter on RabbitMQ's AMQP 1.0 plugin.
func open(t testing.TB, cfg amqp10.Config) *amqp10.Adapter {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = rabbitURL
	}
	if cfg.Reconnect.Initial == 0 {
		cfg.Reconnect.Initial = 50 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := amqp10.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("amqp10 open %q: %v (is the plugin on? rabbitmq-plugins enable rabbitmq_amqp1_0)", cfg.Queue, err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// TestConformance runs the broker conformance suite against RabbitMQ 3.10's
// AMQP 1.0 plugin, on durable classic queues. The plugin sends no delivery
// count (the header's delivery-count is always 0, and the adapter uses it
// only with Config.TrustDeliveryCount), so Features says DeliveryCount
// false; redeliveries are flagged by first-acquirer false.
func TestConformance(t *testing.T) {
	t.Parallel()
	declare := declarer(t)
	consumertest.Run(t, consumertest.Broker{
		Name: "amqp10-rabbitmq",
		// FirstDelivery is not asserted: RabbitMQ's AMQP 1.0 plugin does not
		// set first-acquirer on every first delivery (seen here), so those
		// take the marked path; a redelivery is never vouched for as first.
		Features: consumertest.Features{RedeliveredFlag: true},
		NewSource: func(t testing.TB, queue string) consumer.Source {
			return open(t, amqp10.Config{Queue: queue, Prefetch: 4})
		},
		NewPublisher: func(t testing.TB) dlq.Publisher { return open(t, amqp10.Config{}) },
		Declare:      declare,
	})
}
