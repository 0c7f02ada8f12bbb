package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/inboxkit/inboxkit"
)

// ErrClosed is returned by Source.Receive after Close.
var ErrClosed = errors.New("consumer: source closed")

// Delivery is one message received from a broker and not yet settled.
//
// Exactly one of Ack or Requeue is called, once, by the consumer runtime,
// and only after the inbox transaction committed (rule 3). Implementations
// must be safe to call from a goroutine other than the one that received.
type Delivery interface {
	// Message returns the received message. Adapters fill Headers, Body,
	// Destination, BrokerMessageID, Redelivered and DeliveryCount; the
	// runtime fills ID and CorrelationID.
	Message() inboxkit.Message
	// Ack settles the delivery: the broker forgets the message. It returns
	// only after the broker accepted the acknowledgement when the protocol
	// confirms it (a STOMP receipt), or after the frame was written.
	Ack(ctx context.Context) error
	// Requeue hands the message back for a later redelivery, after delay when
	// the broker can delay. It must never route the message to the broker's
	// own dead-letter queue: dead-lettering is the runtime's decision, made
	// from the inbox's attempt count.
	Requeue(ctx context.Context, delay time.Duration) error
}

// Source receives deliveries from one queue or subject.
//
// Receive blocks until a delivery arrives, ctx is done (it returns ctx.Err())
// or the source is closed (ErrClosed). Receive may be called from several
// goroutines at once. A Source reconnects on its own after a broken
// connection; deliveries received on the broken connection can no longer be
// settled (their Ack returns an error) and come again from the broker.
// Close stops intake; deliveries not yet acknowledged are returned to the
// broker by it.
type Source interface {
	Receive(ctx context.Context) (Delivery, error)
	Close() error
}

// BatchAcker is implemented by a Source that acknowledges several of its
// deliveries with fewer frames than one each (broker/rabbitmq: one
// basic.ack with the multiple flag, where that acknowledges nothing but
// them). HandleBatch acknowledges the deliveries of a committed batch that
// need nothing but an acknowledgement through it; a Source without it has
// them acknowledged one by one.
type BatchAcker interface {
	// AckBatch acknowledges ds, deliveries received from this source and
	// not settled, as Ack on each would: errs[i] is what ds[i].Ack would
	// have returned. It must never settle a delivery not in ds.
	AckBatch(ctx context.Context, ds []Delivery) (errs []error)
}

// PlaceKeeper is implemented by a Delivery whose Requeue does not put the
// message back at its place in the queue (broker/stomp: Requeue sends a
// copy to the tail) while the Source's Close does (the broker delivers
// what was not acknowledged again, ahead of the queue's later messages).
// When Run stops with deliveries held for their order key
// (Config.OrderKeyFunc), it leaves those for which ReturnsOnClose reports
// true unsettled, and Run's Source.Close hands them back, so that a key's
// held deliveries come again before its later messages in the queue
// (docs/order.md).
type PlaceKeeper interface {
	Delivery
	ReturnsOnClose() bool
}

// Prefetcher is implemented by a Source that knows how many deliveries its
// broker sends ahead of their settlement; every adapter in broker/ does
// (basic.qos, link credit, activemq.prefetchSize, MaxAckPending). New logs
// a warning when the prefetch is below what the consumer takes at once
// (OrderHeld with Config.OrderKeyFunc, Receivers in ModeStoreThenProcess,
// else Concurrency × BatchSize): the goroutines beyond it wait for a
// delivery, and the consumer runs at the rate of fewer.
type Prefetcher interface {
	// Prefetch returns the most deliveries the broker sends this source
	// before any is settled; 0 when it sets no bound.
	Prefetch() int
}

// Readier is implemented by a Source that knows the state of its broker
// connection; every adapter in broker/ does. The runtime does not call it:
// a readiness check (observe.SourceCheck, inboxctl's /readyz) does.
type Readier interface {
	// Ready returns nil while the connection to the broker is up, and
	// otherwise an error saying why not (for example since when the
	// adapter has been reconnecting, and the last error). It returns
	// quickly, bounded by ctx.
	Ready(ctx context.Context) error
}

// OversizeDelivery is implemented by a Delivery whose body the source did
// not take because it is over the source's size limit (see
// broker/stomp's Limits). Its Message has the headers but no body. The
// runtime never runs the handler for it: it calls Reject, which moves the
// whole message to the broker's own dead-letter queue, records the event
// (when the headers name one) as DEAD_LETTERED with reason
// inboxkit.ReasonMessageTooLarge, and logs it. Ack and Requeue are not called.
type OversizeDelivery interface {
	Delivery
	// Oversize returns the body size and the limit it is over; size 0
	// means the delivery is whole and an ordinary one.
	Oversize() (size, limit int)
	// Reject hands the message to the broker's dead-letter queue (a STOMP
	// NACK on ActiveMQ), body included.
	Reject(ctx context.Context) error
}
