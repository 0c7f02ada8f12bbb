package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/rabbitmq"
)

// Issue 29.1, RabbitMQ: a quorum queue's delivery whose consumer was on
// the node leading the queue, that node killed (-9) before the ack, comes
// again from the new leader as a redelivery the adapter recognises: not a
// first delivery (so the inbox counts the attempt and a message that
// kills its consumer cannot loop uncounted), with the queue's
// x-delivery-count in DeliveryCount.
func TestQuorumRedeliveryAfterLeaderKillIsCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node RabbitMQ cluster, its queue leader killed; skipped with -short")
	}
	t.Parallel()
	c := startRabbitCluster(t, 5811, "ikrabbitq")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const q = "quorum.count"
	conn, err := rabbitmq.DialNodes(c.url(), amqp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("m-1"), MessageId: "m-1", DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	conn.Close()

	leader := c.leader(q)
	node := func(i int) string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", c.port+i-1) }
	open := func(url string) *rabbitmq.Adapter {
		a, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: url, Queue: q, QueueType: rabbitmq.QueueQuorum, Prefetch: 1})
		if err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
		return a
	}
	first := open(node(leader))
	d, err := first.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Message(); !m.FirstDelivery || m.DeliveryCount != 1 {
		t.Fatalf("the first delivery: FirstDelivery %v, DeliveryCount %d", m.FirstDelivery, m.DeliveryCount)
	}
	if out, err := c.script("kill", fmt.Sprint(leader)); err != nil {
		t.Fatalf("scripts/rabbit-cluster kill %d: %v\n%s", leader, err, out)
	}
	killed := time.Now()
	within(t, time.Minute, "closing the adapter of the killed node", func() { first.Close() })

	other := leader%3 + 1
	second := open(fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d/", c.port+other-1, c.port+other%3))
	defer within(t, time.Minute, "closing the second adapter", func() { second.Close() })
	d, err = second.Receive(ctx)
	if err != nil {
		t.Fatalf("no redelivery %v after the leader's kill: %v", time.Since(killed), err)
	}
	m := d.Message()
	t.Logf("leader node %d killed; redelivered through node %d after %v: Redelivered %v, DeliveryCount %d, FirstDelivery %v, BrokerMessageID %s",
		leader, other, time.Since(killed).Round(time.Millisecond), m.Redelivered, m.DeliveryCount, m.FirstDelivery, m.BrokerMessageID)
	if m.FirstDelivery || !m.Redelivered || m.DeliveryCount < 2 || m.BrokerMessageID != "m-1" {
		t.Errorf("the redelivery after the leader's death: FirstDelivery %v, Redelivered %v, DeliveryCount %d (want false, true, >= 2)", m.FirstDelivery, m.Redelivered, m.DeliveryCount)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// within runs f and fails the test, naming what, when f has not returned
// after d (f is left running).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}
