package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkOrderRatio measures the cost of order keys (issue 28): every op
// runs the throughput body twice on RabbitMQ (quorum queues) and
// PostgreSQL, 2,000 events at concurrency 8, first without an order key,
// then with 200 keys (the other way round every second op), so that a shared machine's changing load falls on
// both alike. Both sources have the prefetch the ordered consumer holds
// (consumer.OrderHeld). "ratio" is ordered over unordered throughput.
//
//	go test -run '^$' -bench OrderRatio -benchtime 3x ./broker/rabbitmq/
func BenchmarkOrderRatio(b *testing.B) {
	const messages, concurrency, keys = 2000, 8, 200
	var unordered, ordered time.Duration
	i := 0
	for b.Loop() {
		// Which runs first alternates: the first run of an op warms up.
		i++
		for _, k := range [][]int{{0, keys}, {keys, 0}}[i%2] {
			res := orderThroughput(b, messages, concurrency, k)
			if k == 0 {
				unordered += res.Consumed
			} else {
				ordered += res.Consumed
			}
		}
	}
	n := float64(messages * b.N)
	b.ReportMetric(n/unordered.Seconds(), "unordered-msg/s")
	b.ReportMetric(n/ordered.Seconds(), "ordered-msg/s")
	b.ReportMetric(unordered.Seconds()/ordered.Seconds(), "ratio")
}

func orderThroughput(b *testing.B, messages, concurrency, keys int) consumertest.ThroughputResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := dbtest.New(b, dbtest.Postgres)
	open := func(queue string) (*rabbitmq.Adapter, error) {
		return rabbitmq.Open(ctx, rabbitmq.Config{URL: conformanceURL, Queue: queue, QueueType: rabbitmq.QueueQuorum,
			Prefetch: consumer.OrderHeld(concurrency, 1)})
	}
	queue := consumertest.QueueName(b.Name())
	pub, err := open("")
	if err != nil {
		b.Fatalf("RabbitMQ at 127.0.0.1:5672: %v", err)
	}
	defer pub.Close()
	var src *rabbitmq.Adapter
	defer func() {
		if src != nil {
			src.Close()
		}
	}()
	// The queue exists before anything is published to it.
	if src, err = open(queue); err != nil {
		b.Fatal(err)
	}
	defer deleteQueue(b, queue)
	res, err := consumertest.Throughput(ctx, consumertest.ThroughputConfig{
		Messages: messages, Concurrency: concurrency, OrderKeys: keys, Queue: queue, Publisher: pub, DB: db.DB, Dialect: inbox.Postgres,
		NewSource: func(context.Context, string) (consumer.Source, error) { return src, nil },
	})
	if err != nil {
		b.Fatalf("throughput with %d keys: %v", keys, err)
	}
	return res
}

func deleteQueue(b *testing.B, queue string) {
	conn, err := amqp.Dial(conformanceURL)
	if err != nil {
		b.Logf("delete queue %s: %v", queue, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Logf("delete queue %s: %v", queue, err)
		return
	}
	defer ch.Close()
	_, _ = ch.QueueDelete(queue, false, false, false)
}
