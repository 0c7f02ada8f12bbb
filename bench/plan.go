package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

// event is one message of the send plan.
type event struct {
	ID, Correlation string
	Body            []byte
}

// plan is the stream of messages every contender consumes: n messages of
// which round(n*dup) are producer resends (same event id, correlation id
// and body as an earlier message, never the first), spread over the stream.
// The same seed gives the same stream.
type plan struct {
	Messages []event
	Distinct int
	Resends  int
}

func newPlan(n int, dup float64, seed uint64) plan {
	resends := int(float64(n)*dup + 0.5)
	if resends >= n {
		resends = n - 1
	}
	r := rand.New(rand.NewPCG(seed, 0x1b0c))
	var originals []event
	msgs := make([]event, 0, n)
	leftOrig, leftDup := n-resends, resends
	for i := 0; i < n; i++ {
		resend := len(originals) > 0 && leftDup > 0 && (leftOrig == 0 || r.IntN(leftOrig+leftDup) < leftDup)
		if resend {
			msgs = append(msgs, originals[r.IntN(len(originals))])
			leftDup--
			continue
		}
		k := len(originals) + 1
		e := event{
			ID:          fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, 0x8000|r.Uint32()&0x3fff, r.Uint64()&0xffffffffffff),
			Correlation: "C-" + strconv.Itoa(k),
			Body:        fmt.Appendf(nil, `{"invoiceNo":"I-%d","customerNo":"K-%d","amount":"%d.%02d","currency":"EUR"}`, k, k%97, k%1000, k%100),
		}
		originals = append(originals, e)
		msgs = append(msgs, e)
		leftOrig--
	}
	return plan{Messages: msgs, Distinct: n - resends, Resends: resends}
}

// declareQueue declares a classic durable queue (no arguments: what both
// inboxkit's rabbitmq adapter without Quorum and Watermill's durable-queue
// config declare).
func declareQueue(conn *amqp.Connection, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	return err
}

func deleteQueues(conn *amqp.Connection, names ...string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, n := range names {
		_, _ = ch.QueueDelete(n, false, false, false)
	}
}

// load publishes the plan to queue (default exchange, persistent, headers
// eventId and correlationId as strings), with publisher confirms, and
// returns when the broker confirmed every message.
func load(ctx context.Context, conn *amqp.Connection, queue string, p plan) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	const window = 500
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	flush := func() error {
		for _, c := range pending {
			ok, err := c.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("load: the broker refused (nack) message %d", c.DeliveryTag)
			}
		}
		pending = pending[:0]
		return nil
	}
	for _, m := range p.Messages {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			Headers:      amqp.Table{"eventId": m.ID, "correlationId": m.Correlation},
			Body:         m.Body,
		})
		if err != nil {
			return fmt.Errorf("load: publish: %w", err)
		}
		pending = append(pending, c)
		if len(pending) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
