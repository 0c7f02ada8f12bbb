package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// channel opens a channel on a connection of its own, closed at test end.
func channel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(testURL)
	if err != nil {
		t.Fatalf("%s: %v", startHint, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declareWith declares queue over its own connection with args, as an
// administrator or another application would before inboxkit starts.
func declareWith(t *testing.T, queue string, args amqp.Table) {
	t.Helper()
	if _, err := channel(t).QueueDeclare(queue, true, false, false, false, args); err != nil {
		t.Fatalf("declare %s with %v: %v", queue, args, err)
	}
}

// TestExistingQueueAsItIs (issue 23.15): a queue that exists is consumed
// and published to as it is, whatever its type and arguments and whatever
// Config.QueueType says; its arguments are left unchanged. Before the fix
// Open redeclared it with the adapter's own arguments and failed with
// PRECONDITION_FAILED (inequivalent arg 'x-queue-type', 'x-message-ttl').
// A quorum queue's x-delivery-count is the delivery count, and a
// redelivery is never vouched for as first.
func TestExistingQueueAsItIs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      amqp.Table
		queueType string
		quorum    bool // the queue sends x-delivery-count
	}{
		{"quorum, no type configured", amqp.Table{"x-queue-type": "quorum"}, "", true},
		{"quorum with delivery-limit, classic configured", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(50)}, QueueClassic, true},
		{"classic with DLX, TTL, max-length, quorum configured", amqp.Table{"x-dead-letter-exchange": "", "x-message-ttl": int32(600000), "x-max-length": int32(1000)}, QueueQuorum, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, _ := testQueue(t)
			declareWith(t, q, tc.args)
			a := open(t, Config{Queue: q, QueueType: tc.queueType})
			publish(t, a, q, map[string]string{"eventId": "E-1"}, "x")

			d := receive(t, a, 5*time.Second)
			if m := d.Message(); m.Redelivered || !m.FirstDelivery {
				t.Errorf("first delivery: Redelivered=%v FirstDelivery=%v, want false true", m.Redelivered, m.FirstDelivery)
			}
			if err := d.Requeue(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			d = receive(t, a, 5*time.Second)
			m := d.Message()
			if !m.Redelivered || m.FirstDelivery {
				t.Errorf("redelivery: Redelivered=%v FirstDelivery=%v, want true false", m.Redelivered, m.FirstDelivery)
			}
			if want := map[bool]int{true: 2, false: 0}[tc.quorum]; m.DeliveryCount != want {
				t.Errorf("redelivery: DeliveryCount=%d, want %d", m.DeliveryCount, want)
			}
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
			// The queue kept its arguments: redeclaring with them matches.
			declareWith(t, q, tc.args)
		})
	}
}

// TestQueueTypeOfNewQueues: a missing queue is created of the type the URL
// (?queue-type=) or Config.QueueType names; a consumed stream and an
// unknown type are refused, naming the field.
func TestQueueTypeOfNewQueues(t *testing.T) {
	t.Parallel()
	q, name := testQueue(t)
	dest := name("dest")
	a := open(t, Config{URL: testURL + "?queue-type=quorum", Queue: q})
	publish(t, a, dest, nil, "x")
	publish(t, a, q, nil, "x")
	for _, n := range []string{q, dest} {
		declareWith(t, n, amqp.Table{"x-queue-type": "quorum"}) // equivalent: it is a quorum queue
	}
	if m := receive(t, a, 5*time.Second).Message(); m.DeliveryCount != 1 {
		t.Errorf("first delivery from a quorum queue: DeliveryCount=%d, want 1", m.DeliveryCount)
	}

	stream := name("stream")
	p := open(t, Config{QueueType: QueueStream})
	publish(t, p, stream, nil, "x")
	declareWith(t, stream, amqp.Table{"x-queue-type": "stream"})

	for _, cfg := range []Config{
		{URL: testURL, Queue: stream, QueueType: QueueStream},
		{URL: testURL + "?queue-type=lazy", Queue: q},
	} {
		_, err := Open(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "queue type") {
			t.Errorf("Open(%+v) = %v, want an error about the queue type", cfg, err)
		}
	}
}

// TestPreconditionNamed: a 406 from the broker is wrapped with
// ErrPreconditionFailed and what to compare; other errors are not.
func TestPreconditionNamed(t *testing.T) {
	pf := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"}
	err := precondition(fmt.Errorf("declare: %w", pf))
	if !errors.Is(err, ErrPreconditionFailed) || !strings.Contains(err.Error(), "inequivalent arg") || !strings.Contains(err.Error(), "arguments") {
		t.Errorf("precondition(406) = %v", err)
	}
	if again := precondition(err); again != err {
		t.Errorf("wrapped twice: %v", again)
	}
	other := &amqp.Error{Code: amqp.NotFound}
	if err := precondition(other); errors.Is(err, ErrPreconditionFailed) {
		t.Errorf("precondition(404) = %v, want it unchanged", err)
	}
}
