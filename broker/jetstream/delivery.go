package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit"
)

// ErrSettled is returned by Ack or Requeue on a delivery already settled
// (also by Close, which naks what is left).
var ErrSettled = errors.New("jetstream: delivery already settled")

type delivery struct {
	a       *Adapter
	msg     jetstream.Msg
	m       inboxkit.Message
	settled atomic.Bool
}

func newDelivery(a *Adapter, msg jetstream.Msg) *delivery {
	m := inboxkit.Message{
		Headers:     make(map[string]string, len(msg.Headers())),
		Body:        msg.Data(),
		Destination: msg.Subject(),
	}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			m.Headers[k] = v[0]
		}
	}
	if md, err := msg.Metadata(); err == nil {
		m.BrokerMessageID = strconv.FormatUint(md.Sequence.Stream, 10)
		m.DeliveryCount = int(md.NumDelivered)
		m.Redelivered = md.NumDelivered > 1
		m.FirstDelivery = md.NumDelivered == 1
	}
	return &delivery{a: a, msg: msg, m: m}
}

func (d *delivery) Message() inboxkit.Message { return d.m }

// Ack acknowledges with a request and returns after the server confirmed
// it (DoubleAck), bounded by ctx or, without a deadline, by 5s. An error
// means the server may redeliver the message.
func (d *delivery) Ack(ctx context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	d.a.forget(d)
	if err := d.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("jetstream: ack %s seq %s: %w", d.m.Destination, d.m.BrokerMessageID, err)
	}
	return nil
}

// Requeue naks the delivery, with a delay when delay > 0, so the server
// redelivers it after delay (at once without one). It never uses Term, and
// the consumer has no MaxDeliver, so the message is never dropped. The nak
// is sent as a request and Requeue returns after the server's reply, once
// the server has processed it (see nak), at most 5s later; it is sent also
// when ctx is already done (a delivery abandoned at a shutdown timeout is
// handed back). If it is lost the server redelivers after AckWait anyway.
func (d *delivery) Requeue(ctx context.Context, delay time.Duration) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	d.a.forget(d)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.nak(ctx, delay); err != nil {
		return fmt.Errorf("jetstream: requeue %s seq %s: %w", d.m.Destination, d.m.BrokerMessageID, err)
	}
	return nil
}

// nak sends a negative acknowledgement ("-NAK", with {"delay": ns} when
// delay > 0) to the delivery's reply subject as a request: the server
// answers an acknowledgement that has a reply subject once it has
// processed it. nats.go's Nak only publishes it, and a flush only says
// that the server read it: a server stopped right after (an embedded one
// at the end of a command) could keep the message pending for AckWait.
func (d *delivery) nak(ctx context.Context, delay time.Duration) error {
	body := []byte("-NAK")
	if delay > 0 {
		body = fmt.Appendf(body, ` {"delay": %d}`, delay.Nanoseconds())
	}
	_, err := d.a.nc.RequestWithContext(ctx, d.msg.Reply(), body)
	return err
}
