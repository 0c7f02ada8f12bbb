package dlq

import "context"

// Publisher sends one message to a destination (queue or subject).
//
// Publish returns nil only after the broker confirmed that it stored the
// message (a STOMP receipt, a RabbitMQ publisher confirm, a JetStream publish
// ack). The consumer acknowledges the original delivery only after that, so a
// failed publish leaves the original on the broker: nothing is lost.
// Publish must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error
}
