package amqp10_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
)

// What IBM MQ's AMQP channel refuses of an incoming message (issue 23.5):
// a message-id or correlation-id of type uuid or ulong, and any message
// annotations; it keeps 24 bytes of a correlation id. checkForMQ fails
// the test for each message in the recorded frames that MQ would refuse.
func checkForMQ(t *testing.T, ms []*amqp.Message) {
	t.Helper()
	for i, m := range ms {
		if len(m.Annotations) > 0 {
			t.Errorf("message %d carries message annotations %v (MQ rejects the message)", i, m.Annotations)
		}
		if m.Properties == nil {
			t.Errorf("message %d has no properties section", i)
			continue
		}
		if _, ok := m.Properties.MessageID.(string); !ok {
			t.Errorf("message %d: message-id %T %v, want a string (MQ rejects uuid and ulong ids)", i, m.Properties.MessageID, m.Properties.MessageID)
		}
		switch c := m.Properties.CorrelationID.(type) {
		case nil, string, []byte:
		default:
			t.Errorf("message %d: correlation-id of type %T (MQ rejects uuid and ulong ids)", i, c)
		}
	}
}

// TestPublishFrames pins what Publish puts on the wire, read from the bytes
// the adapter sent (a recording proxy in front of RabbitMQ's plugin): a
// string message-id, no message annotations, a durable header, and the
// rule for correlation ids: the binary form of amqp10.IDString ("ID:" +
// hex, 48 digits for an MQ CorrelId) goes out as its 24 bytes, any other
// correlation id as a string, whole, also over 24 bytes (a queue manager
// keeps its first 24 bytes as the CorrelId; AMQP consumers of MQ get the
// whole one back).
func TestPublishFrames(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	declarer(t)(t, q)
	rec := newRecorder(t, "127.0.0.1:5672")
	a := open(t, amqp10.Config{URL: "amqp10://guest:guest@" + rec.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mqCorrel := mqID(7)
	long := "order-2026-000042/line-0007/attempt-3" // 37 bytes
	for _, corr := range []string{jmsForm(mqCorrel), long, ""} {
		h := map[string]string{"eventId": "ev-" + corr}
		if corr != "" {
			h[amqp10.HeaderCorrelationID] = corr
		}
		if err := a.Publish(ctx, q, h, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	conns := rec.connections(t)
	if len(conns) != 1 {
		t.Fatalf("%d connections recorded, want 1", len(conns))
	}
	ms := messages(t, conns[0])
	if len(ms) != 3 {
		t.Fatalf("%d messages in the recorded transfers, want 3", len(ms))
	}
	checkForMQ(t, ms)
	if got, ok := ms[0].Properties.CorrelationID.([]byte); !ok || !slices.Equal(got, mqCorrel) {
		t.Errorf("correlation-id %q went out as %T %v, want the 24 bytes %x", jmsForm(mqCorrel), ms[0].Properties.CorrelationID, ms[0].Properties.CorrelationID, mqCorrel)
	}
	if got := ms[1].Properties.CorrelationID; got != long {
		t.Errorf("correlation-id of %d bytes went out as %T %v, want the string whole", len(long), got, got)
	}
	if got := ms[2].Properties.CorrelationID; got != nil {
		t.Errorf("no correlation-id header, but the property is %v", got)
	}
	for i, m := range ms {
		if m.Header == nil || !m.Header.Durable || m.DeliveryAnnotations != nil || m.ApplicationProperties[amqp10.HeaderCorrelationID] != nil {
			t.Errorf("message %d: header %+v, delivery annotations %v, application properties %v", i, m.Header, m.DeliveryAnnotations, m.ApplicationProperties)
		}
	}
}

// TestProfileIBMMQ: ?profile=ibmmq opens one session per connection for
// the receiver and every sender, with plain addresses and the "queue"
// capability on each terminus, and asks for unsettled deliveries that the
// receiver settles first; what it publishes passes checkForMQ. Read from
// the frames the adapter sent to RabbitMQ's plugin, which takes a plain
// address as the name of a transient queue it declares itself (so the
// queues are not declared here, only deleted); no IBM MQ queue manager
// was at hand.
func TestProfileIBMMQ(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	other := q + ".other"
	c091, err := amqp091.Dial(rabbit091)
	if err != nil {
		t.Fatalf("RabbitMQ over AMQP 0-9-1: %v", err)
	}
	t.Cleanup(func() {
		if ch, err := c091.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_, _ = ch.QueueDelete(other, false, false, false)
		}
		c091.Close()
	})
	rec := newRecorder(t, "127.0.0.1:5672")
	a := open(t, amqp10.Config{URL: "amqp10://guest:guest@" + rec.addr() + "?profile=ibmmq", Queue: q})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dest := range []string{q, other} {
		if err := a.Publish(ctx, dest, map[string]string{"eventId": "ev-1", amqp10.HeaderCorrelationID: "corr-1"}, []byte("x")); err != nil {
			t.Fatalf("publish to %s: %v", dest, err)
		}
	}
	d := receive(t, a)
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	conns := rec.connections(t)
	if len(conns) != 1 {
		t.Fatalf("%d connections recorded, want 1", len(conns))
	}
	defer refusedAttachOnTheOneSession(t, ctx, a, c091, q)
	var begins, attaches int
	for _, f := range conns[0] {
		switch f.desc {
		case descBegin:
			begins++
		case descAttach:
			attaches++
			if f.channel != 0 {
				t.Errorf("attach on channel %d, want the one session's channel 0", f.channel)
			}
			receiver, _ := f.field(2).(bool)
			term := terminus(f, 6) // a sender's target
			capIdx := 6
			if receiver {
				term, capIdx = terminus(f, 5), 10 // the receiver's source
			}
			addr, _ := term[0].(string)
			var caps []string
			if len(term) > capIdx {
				caps = symbols(term[capIdx])
			}
			if strings.HasPrefix(addr, "/") || !slices.Contains(caps, "queue") {
				t.Errorf("attach (receiver %v): address %q capabilities %v, want a plain queue name with capability queue", receiver, addr, caps)
			}
			if receiver && (f.field(3) != uint64(0) || f.field(4) != uint64(0)) {
				t.Errorf("receiver attach: snd-settle-mode %v rcv-settle-mode %v, want 0 (unsettled) and 0 (first)", f.field(3), f.field(4))
			}
		}
	}
	if begins != 1 || attaches != 3 {
		t.Errorf("%d begin and %d attach frames on the connection, want 1 session with 3 links", begins, attaches)
	}
	checkForMQ(t, messages(t, conns[0]))
}

// refusedAttachOnTheOneSession: a sender attach the broker refuses ends
// the one session on RabbitMQ's plugin (a quorum queue addressed with a
// declaring address), with every link on it; the adapter starts over on
// a new connection, and the next Publish works.
func refusedAttachOnTheOneSession(t *testing.T, ctx context.Context, a *amqp10.Adapter, c091 *amqp091.Connection, q string) {
	t.Helper()
	quorum := q + ".quorum"
	ch, err := c091.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(quorum, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(quorum, false, false, false) })
	if err := a.Publish(ctx, quorum, nil, []byte("refused")); err == nil {
		t.Fatalf("publish to quorum queue %s by a declaring address succeeded; the premise is gone", quorum)
	} else {
		t.Logf("refused as expected: %v", err)
	}
	if err := a.Publish(ctx, q, map[string]string{"eventId": "ev-2"}, []byte("after")); err != nil {
		t.Fatalf("publish after a refused attach: %v", err)
	}
	if d := receive(t, a); d.Message().Header("eventId") != "ev-2" {
		t.Errorf("received %q, want ev-2", d.Message().Header("eventId"))
	}
}
