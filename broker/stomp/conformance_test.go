package stomp_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
)

// TestConformance runs the broker conformance suite against ActiveMQ
// Classic over STOMP (start it with `scripts/activemq start`).
func TestConformance(t *testing.T) {
	t.Parallel()
	base := brokerConfig(t) // fails loudly, naming scripts/activemq start
	consumertest.Run(t, consumertest.Broker{
		Name: "activemq",
		// ActiveMQ over STOMP gives no delivery count after a consumer
		// crash: attempts are the inbox's alone.
		Features:   consumertest.Features{RedeliveredFlag: true, FirstDelivery: true, HandBackInOrder: true},
		BatchSizes: []int{1, 16}, // batching changes no outcome (issue 15)
		NewSource: func(t testing.TB, queue string) consumer.Source {
			t.Helper()
			cfg := base
			cfg.Queue = queue
			cfg.Prefetch = consumertest.Prefetch(t, 4) // ×16 in the batch16 bodies
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := stomp.Open(ctx, cfg)
			if err != nil {
				t.Fatalf("stomp source on %s: %v", queue, err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		NewPublisher: func(t testing.TB) dlq.Publisher {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := stomp.Open(ctx, base)
			if err != nil {
				t.Fatalf("stomp publisher: %v", err)
			}
			return p
		},
	})
}
