// Package rabbittest declares queues on the machine's RabbitMQ for tests
// that send to a queue which must exist first (RabbitMQ's AMQP 1.0 plugin
// sends and receives only on an existing queue).
package rabbittest

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// URL is the machine's RabbitMQ over AMQP 0-9-1.
const URL = "amqp://guest:guest@127.0.0.1:5672/"

// Declare creates queue (durable, classic) and deletes it at test end. A
// RabbitMQ that does not answer fails the test with the command that
// starts it.
func Declare(t testing.TB, queue string) {
	t.Helper()
	conn, err := amqp.Dial(URL)
	if err != nil {
		t.Fatalf("RabbitMQ not reachable at 127.0.0.1:5672 (start it with rabbitmq-server -detached): %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		conn.Close()
	})
}
