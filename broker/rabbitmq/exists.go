package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueExists reports whether queue exists on the broker at rawURL (the
// first of its nodes that answers: see Config.URL). It uses
// a passive declare, which never creates the queue (an Adapter with
// Config.Queue declares it, so a tool that only looks at a queue, such as a
// dead-letter listing, asks this first).
func QueueExists(ctx context.Context, rawURL, queue string) (bool, error) {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	conn, err := DialNodes(rawURL, amqp.Config{Dial: amqp.DefaultDial(timeout), Locale: "en_US"})
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("rabbitmq: open channel on %s: %w", redact(rawURL), err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rabbitmq: passive declare of %s: %w", queue, err)
	}
	return true, nil
}
