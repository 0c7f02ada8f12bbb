package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
)

// ErrWorkQueueStream is returned by AddDurable for a subject held by a
// work-queue stream: such a stream gives each message to one consumer, so a
// second durable on the subject cannot receive a copy.
var ErrWorkQueueStream = errors.New("brokerurl: the stream is a work-queue stream, which gives each message to one consumer only")

// ErrNotFound is wrapped by BindCopy's error for an exchange that does not
// exist, and by AddDurable's and DurablePending's for a subject no stream
// captures.
var ErrNotFound = errors.New("brokerurl: not found")

// BindCopy makes queue a copy of what exchange routes with each of keys
// (one binding per key; none: one binding with the empty key, as a fanout
// exchange needs) on RabbitMQ: it declares queue durable (the URL's
// ?queue-type, else the server's default) unless it exists, and binds it.
// The exchange must exist (it is not declared: a passive declare checks
// it, so a mistyped name fails instead of creating an exchange nobody
// publishes to). Declaring and binding are idempotent. Only for amqp://.
func (b *Broker) BindCopy(ctx context.Context, queue, exchange string, keys []string) error {
	if b.URL.Kind != AMQP {
		return fmt.Errorf("brokerurl: BindCopy is for RabbitMQ (amqp://), not %s", b.URL.Kind)
	}
	conn, err := rabbitmq.DialNodes(b.URL.URL, amqp091.Config{Dial: amqp091.DefaultDial(10 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclarePassive(exchange, "direct", true, false, false, false, nil); err != nil {
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return fmt.Errorf("%w: exchange %q does not exist (%v)", ErrNotFound, exchange, err)
		}
		return fmt.Errorf("exchange %q: %w", exchange, err)
	}
	if exists, err := rabbitmq.QueueExists(ctx, b.URL.URL, queue); err != nil {
		return err
	} else if !exists {
		var args amqp091.Table
		if b.opts.QueueType != "" {
			args = amqp091.Table{"x-queue-type": b.opts.QueueType}
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
			return fmt.Errorf("declare queue %q: %w", queue, err)
		}
	}
	if len(keys) == 0 {
		keys = []string{""}
	}
	for _, k := range keys {
		if err := ch.QueueBind(queue, k, exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %q to exchange %q with key %q: %w", queue, exchange, k, err)
		}
	}
	return ch.Close()
}

// AddDurable creates (or leaves as it is) the durable pull consumer durable
// on the JetStream stream that captures subject, with
// the settings a Source of that durable uses (explicit ack, every message
// the stream holds, filter subject), so that `Source(ctx, subject, durable,
// ...)` reads it afterwards. The stream must exist and keep acknowledged
// messages (limits or interest retention); a work-queue stream is refused
// with ErrWorkQueueStream. Only for nats:// and embedded.
func (b *Broker) AddDurable(ctx context.Context, subject, durable string) error {
	js, nc, err := b.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	stream, err := streamOf(ctx, js, subject)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s (holding %s): %w", stream, subject, err)
	}
	if s.CachedInfo().Config.Retention == natsjs.WorkQueuePolicy {
		return fmt.Errorf("%w: stream %s", ErrWorkQueueStream, stream)
	}
	_, err = js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{
		Durable: durableName(durable), FilterSubject: subject, DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy: natsjs.AckExplicitPolicy, MaxDeliver: -1, MaxAckPending: sharedDurablePrefetch,
	})
	if err != nil {
		return fmt.Errorf("create durable %s on stream %s: %w", durableName(durable), stream, err)
	}
	return nil
}

// DurablePending is the number of messages of the stream holding subject
// that the durable consumer durable has not acknowledged yet (pending and
// in flight); ok is false when the durable does not exist. Only for
// nats:// and embedded.
func (b *Broker) DurablePending(ctx context.Context, subject, durable string) (n int, ok bool, err error) {
	js, nc, err := b.jetStream()
	if err != nil {
		return 0, false, err
	}
	defer nc.Close()
	stream, err := streamOf(ctx, js, subject)
	if err != nil {
		return 0, false, err
	}
	c, err := js.Consumer(ctx, stream, durableName(durable))
	if errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrStreamNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	info := c.CachedInfo()
	return int(info.NumPending) + info.NumAckPending, true, nil
}

// streamOf is the stream that captures subject.
func streamOf(ctx context.Context, js natsjs.JetStream, subject string) (string, error) {
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			return "", fmt.Errorf("%w: no stream captures %s: create one with limits retention first (inboxkit would name it %s)", ErrNotFound, subject, jetstream.StreamName(subject))
		}
		return "", fmt.Errorf("look up the stream of %s: %w", subject, err)
	}
	return name, nil
}

func (b *Broker) jetStream() (natsjs.JetStream, *nats.Conn, error) {
	if b.URL.Kind != NATS && b.URL.Kind != Embedded {
		return nil, nil, fmt.Errorf("brokerurl: JetStream (nats://, embedded) only, not %s", b.URL.Kind)
	}
	nc, err := nats.Connect(b.natsURL, nats.Name("inboxkit-shadow"), nats.Timeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc, nil
}
