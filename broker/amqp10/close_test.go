package amqp10_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
)

// TestCloseKeepsTheLastAcks: deliveries accepted one by one just before
// Close stay accepted, on a classic and on a quorum queue. Before Close
// detached the receiver and ended its session, RabbitMQ 3.10's plugin
// forgot some of them in 4 of 10 rounds on a classic queue and 8 of 10 on
// a quorum queue, and they came again.
func TestCloseKeepsTheLastAcks(t *testing.T) {
	t.Parallel()
	for _, queueType := range []string{"classic", "quorum"} {
		t.Run(queueType, func(t *testing.T) {
			t.Parallel()
			ch := confirmChannel(t)
			q := consumertest.QueueName(t.Name())
			if _, err := ch.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-queue-type": queueType}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
			const n = 64
			for round := range 5 {
				for i := range n {
					c, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{Body: []byte("x"), MessageId: fmt.Sprintf("E-%d-%d", round, i)})
					if err != nil {
						t.Fatal(err)
					}
					if i == n-1 && !c.Wait() {
						t.Fatal("publish not confirmed")
					}
				}
				a := open(t, amqp10.Config{Queue: q, Prefetch: n})
				ds := make([]consumer.Delivery, n)
				for i := range ds {
					ds[i] = receive(t, a)
				}
				for _, d := range ds {
					if err := d.Ack(context.Background()); err != nil {
						t.Fatalf("Ack: %v", err)
					}
				}
				if err := a.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				b := open(t, amqp10.Config{Queue: q, Prefetch: n})
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				d, err := b.Receive(ctx)
				cancel()
				if err == nil {
					t.Fatalf("round %d: %s came again after its Ack and Close; want every ack kept", round, d.Message().BrokerMessageID)
				}
				_ = b.Close()
			}
		})
	}
}

// TestCloseOnSingleActiveConsumer: on a single-active-consumer quorum
// queue, with Config.SingleActiveConsumer (from the URL), the standby
// takes over after Close with the delivery the first left unsettled, then
// the rest in queue order. Without it Close detaches first (the control
// that makes the test able to fail): the standby gets later messages
// before the one handed back.
func TestCloseOnSingleActiveConsumer(t *testing.T) {
	ch := confirmChannel(t)
	for _, tc := range []struct {
		name, query string
		inOrder     bool
	}{{"declared", "?single-active-consumer=true", true}, {"not declared", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			q := consumertest.QueueName(t.Name())
			if _, err := ch.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-queue-type": "quorum", "x-single-active-consumer": true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
			for i := 1; i <= 20; i++ {
				c, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{MessageId: fmt.Sprint(i)})
				if err != nil || !c.Wait() {
					t.Fatalf("publish #%d: %v", i, err)
				}
			}
			cfg := amqp10.Config{URL: rabbitURL + tc.query, Queue: q, Prefetch: 4}
			first := open(t, cfg)
			d := receive(t, first) // the standby opens after the first is active
			standby := open(t, cfg)
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, first).Message().BrokerMessageID; got != "2" {
				t.Fatalf("second delivery #%s, want #2", got)
			}
			_ = first.Close() // #2 and what it prefetched, unsettled
			var got []string
			for range 6 {
				d := receive(t, standby)
				got = append(got, d.Message().BrokerMessageID)
				if err := d.Ack(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"2", "3", "4", "5", "6", "7"}
			if inOrder := slices.Equal(got, want); inOrder != tc.inOrder {
				t.Errorf("the standby got %v after the takeover; in order (%v) = %v, want %v", got, want, inOrder, tc.inOrder)
			}
		})
	}
}

// confirmChannel opens an AMQP 0-9-1 channel in confirm mode, to declare
// the tests' queues and publish to them.
func confirmChannel(t *testing.T) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(rabbit091)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at 127.0.0.1:5672 (guest/guest); start it with: rabbitmq-server -detached: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}
