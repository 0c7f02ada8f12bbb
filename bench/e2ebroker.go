package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// e2eBroker is the broker of the e2e section (-broker): it loads a queue
// with the plan, opens inboxkit's adapter on it, and hands the raw twin its
// deliveries.
type e2eBroker interface {
	label() string
	// load makes queue and puts the plan's messages on it, confirmed.
	load(ctx context.Context, queue string, p plan) error
	// cleanup removes queue and its dead-letter queues where it can.
	cleanup(queue string)
	// adapter is inboxkit's adapter consuming queue.
	adapter(ctx context.Context, queue string, prefetch int) (source, error)
	// raw consumes queue with the broker's client, no inboxkit runtime.
	raw(ctx context.Context, queue string, prefetch int) (<-chan rawMsg, func(), error)
	close()
}

// source is what inboxkit's consumer takes from an adapter.
type source interface {
	consumer.Source
	dlq.Publisher
	Close() error
}

// rawMsg is one delivery handed to the raw twin.
type rawMsg struct {
	id, corr string
	body     []byte
	ack      func() error
	nack     func(requeue bool) error
}

func newBroker(o options) (e2eBroker, error) {
	switch o.broker {
	case "rabbitmq":
		conn, err := amqp.Dial(o.amqp)
		if err != nil {
			return nil, fmt.Errorf("RabbitMQ at -amqp does not answer: %w (start it: rabbitmq-server -detached)", err)
		}
		return &rabbitBroker{url: o.amqp, conn: conn}, nil
	case "stomp":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := stomp.Dial(ctx, o.stompAddr, stomp.ConnOptions{})
		if err != nil {
			return nil, fmt.Errorf("ActiveMQ (STOMP) at -stomp %s does not answer: %w (start it: scripts/activemq start)", o.stompAddr, err)
		}
		return &stompBroker{addr: o.stompAddr, conn: c}, nil
	}
	return nil, fmt.Errorf("-broker %q: use rabbitmq or stomp", o.broker)
}

type rabbitBroker struct {
	url  string
	conn *amqp.Connection
}

func (b *rabbitBroker) label() string { return "RabbitMQ classic durable queue" }
func (b *rabbitBroker) close()        { b.conn.Close() }

func (b *rabbitBroker) load(ctx context.Context, queue string, p plan) error {
	if err := declareQueue(b.conn, queue); err != nil {
		return err
	}
	return load(ctx, b.conn, queue, p)
}

func (b *rabbitBroker) cleanup(queue string) {
	deleteQueues(b.conn, queue, queue+".dlq", queue+".poison")
}

func (b *rabbitBroker) adapter(ctx context.Context, queue string, prefetch int) (source, error) {
	return rabbitmq.Open(ctx, rabbitmq.Config{URL: b.url, Queue: queue, Prefetch: prefetch, Logger: quiet})
}

func (b *rabbitBroker) raw(ctx context.Context, queue string, prefetch int) (<-chan rawMsg, func(), error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, nil, err
	}
	ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan rawMsg)
	go func() {
		defer close(out)
		for d := range ds {
			id, _ := d.Headers["eventId"].(string)
			corr, _ := d.Headers["correlationId"].(string)
			out <- rawMsg{id: id, corr: corr, body: d.Body,
				ack:  func() error { return d.Ack(false) },
				nack: func(requeue bool) error { return d.Nack(false, requeue) }}
		}
	}()
	return out, func() { ch.Close() }, nil
}

type stompBroker struct {
	addr string
	conn *stomp.Conn
}

func (b *stompBroker) label() string { return "ActiveMQ queue over STOMP" }
func (b *stompBroker) close()        { b.conn.Close() }

// load sends the plan with 16 SENDs in flight (each waits for its
// RECEIPT); the resends may arrive before their originals, which changes
// nothing a consumer counts.
func (b *stompBroker) load(ctx context.Context, queue string, p plan) error {
	const senders = 16
	var wg sync.WaitGroup
	errs := make([]error, senders)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(p.Messages); i += senders {
				m := p.Messages[i]
				err := b.conn.Send(ctx, stomp.QueueDestination(queue), []stomp.Header{
					{Key: "eventId", Value: m.ID}, {Key: "correlationId", Value: m.Correlation}, {Key: "content-type", Value: "application/json"},
				}, m.Body)
				if err != nil {
					errs[w] = fmt.Errorf("load: send: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cleanup leaves the queue: STOMP cannot delete one, and it is empty.
func (b *stompBroker) cleanup(string) {}

func (b *stompBroker) adapter(ctx context.Context, queue string, prefetch int) (source, error) {
	return stomp.Open(ctx, stomp.Config{Addr: b.addr, Queue: queue, Prefetch: prefetch, Logger: quiet})
}

func (b *stompBroker) raw(ctx context.Context, queue string, prefetch int) (<-chan rawMsg, func(), error) {
	c, err := stomp.Dial(ctx, b.addr, stomp.ConnOptions{})
	if err != nil {
		return nil, nil, err
	}
	sub, err := c.Subscribe(ctx, stomp.QueueDestination(queue), stomp.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	out := make(chan rawMsg)
	rctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(out)
		for {
			f, err := sub.Next(rctx)
			if err != nil {
				return
			}
			ackID := f.Value("ack")
			select {
			case out <- rawMsg{id: f.Value("eventId"), corr: f.Value("correlationId"), body: f.Body,
				ack: func() error { return c.AckAsync(rctx, ackID) },
				nack: func(bool) error {
					return nil // left unacknowledged: the broker gives it again after the connection
				}}:
			case <-rctx.Done():
				return
			}
		}
	}()
	return out, func() { cancel(); c.Close() }, nil
}
