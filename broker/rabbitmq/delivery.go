package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
)

// HeaderCorrelationID is the message header that carries the AMQP
// correlation_id property, in both directions.
const HeaderCorrelationID = "correlation-id"

// headerDeliveryCount is set by quorum queues on redeliveries: the number of
// earlier deliveries.
const headerDeliveryCount = "x-delivery-count"

// ErrSettled is returned by Ack or Requeue on a delivery already settled.
var ErrSettled = errors.New("rabbitmq: delivery already settled")

type delivery struct {
	d       amqp.Delivery
	msg     inboxkit.Message
	acks    *acks // of the channel d came from
	settled atomic.Bool
}

func newDelivery(queue string, quorum bool, d amqp.Delivery, acks *acks) *delivery {
	headers := make(map[string]string, len(d.Headers)+1)
	for k, v := range d.Headers {
		headers[k] = headerString(v)
	}
	if d.CorrelationId != "" {
		headers[HeaderCorrelationID] = d.CorrelationId
	}
	count := 0
	if n, ok := deliveryCount(d.Headers[headerDeliveryCount]); ok {
		count = n + 1
	} else if quorum && !d.Redelivered {
		// A quorum queue's first delivery has no header. A redelivery
		// without one (the queue is not quorum after all) stays unknown.
		count = 1
	}
	return &delivery{
		d:    d,
		acks: acks,
		msg: inboxkit.Message{
			Headers:         headers,
			Body:            d.Body,
			Destination:     queue,
			BrokerMessageID: d.MessageId,
			Redelivered:     d.Redelivered || count > 1,
			DeliveryCount:   count,
			// The redelivered flag is set on every delivery of a message
			// delivered before (requeued, or unacknowledged when a channel
			// closed), by classic and quorum queues alike.
			FirstDelivery: !d.Redelivered && count <= 1,
		},
	}
}

func (d *delivery) Message() inboxkit.Message { return d.msg }

// Ack acknowledges the delivery on the channel it came from. AMQP does not
// confirm acknowledgements: nil means the frame was written. A delivery from
// a channel that has since closed returns an error (the broker redelivers
// it).
func (d *delivery) Ack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	return d.ackErr(d.acks.settle(d.d.DeliveryTag, func() error { return d.d.Ack(false) }))
}

// Requeue returns the delivery to its queue with basic.nack requeue=true,
// which dead-letters only past the queue's own delivery limit, if it has
// one (see the package doc). With delay > 0
// the delivery is held unacknowledged for delay, keeping its prefetch slot,
// and nacked then; Requeue returns at once. Should the channel close in the
// meantime, the broker requeues the message itself. Keep delay well below
// the broker's consumer_timeout (30 minutes by default), which closes a
// channel holding a delivery longer.
func (d *delivery) Requeue(_ context.Context, delay time.Duration) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	nack := func() error { return d.acks.settle(d.d.DeliveryTag, func() error { return d.d.Nack(false, true) }) }
	if delay > 0 {
		time.AfterFunc(delay, func() { _ = nack() })
		return nil
	}
	if err := nack(); err != nil {
		return fmt.Errorf("rabbitmq: requeue delivery of %s: %w", d.msg.Destination, err)
	}
	return nil
}

// ReturnsOnClose reports true: a delivery left unacknowledged is requeued
// at its place when the channel closes, while a Requeue (basic.nack) of a
// consumer that is still subscribed lets the broker send the queue's next
// messages into the freed prefetch slots, and after the close those were
// seen ahead of the requeued ones (consumer.PlaceKeeper; the conformance
// body OrderShutdownHandsBack).
func (d *delivery) ReturnsOnClose() bool { return true }

var _ consumer.PlaceKeeper = (*delivery)(nil)

func deliveryCount(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		return int(n), true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}

// headerString renders an AMQP table value as a string.
func headerString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	default:
		return fmt.Sprint(x)
	}
}
