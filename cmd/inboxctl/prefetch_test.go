package main

import (
	"testing"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/consumer"
)

// `run` asks the broker for twice the deliveries its goroutines take at
// once, up to the most RabbitMQ takes; an order key's held deliveries and
// store-then-process's receivers as before.
func TestRunPrefetch(t *testing.T) {
	t.Parallel()
	tx, stp := consumer.ModeTransactional, consumer.ModeStoreThenProcess
	for _, c := range []struct {
		concurrency, batch int
		ordered            bool
		mode               consumer.Mode
		want               int
	}{
		{1, 1, false, tx, 2},
		{4, 1, false, tx, 8},
		{4, 16, false, tx, 128},
		{64, 1000, false, tx, brokerurl.MaxPrefetch},         // twice 64,000 is more than RabbitMQ takes
		{100, 1000, false, tx, 100000},                       // more than it takes already: its adapter says so
		{3, 1, false, stp, 2 * consumer.DefaultReceivers(3)}, // two for each receiver
		{3, 16, false, stp, 96},
		{4, 1, true, tx, consumer.OrderHeld(4, 1)},
		{4, 1, true, stp, consumer.OrderHeld(4, 1)},
	} {
		if got := runPrefetch(c.concurrency, c.batch, c.ordered, c.mode); got != c.want {
			t.Errorf("runPrefetch(concurrency %d, batch %d, ordered %v, %s) = %d, want %d", c.concurrency, c.batch, c.ordered, c.mode, got, c.want)
		}
	}
}
