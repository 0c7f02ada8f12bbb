package consumer

import (
	"context"

	"github.com/inboxkit/inboxkit"
)

// Observer watches deliveries for metrics and traces (package observe
// implements it with Prometheus and OpenTelemetry, so this package imports
// neither). Config.Observer is nil by default: nothing is observed.
//
// In ModeStoreThenProcess both sides are observed: the receive (outcome
// STORED or DUPLICATE) and, as a delivery of its own, each entry a worker
// processed (outcome PROCESSED, REJECTED, RETRY or DEAD_LETTER; action ack,
// reject, requeue for a retry after a backoff, or dead-letter).
//
// Both methods are called from the consumer's goroutines concurrently;
// implementations must be safe for that and must not block for long.
type Observer interface {
	// Delivery is called when a delivery is in hand, before the inbox sees
	// it. The returned context is used for everything the delivery does (the
	// inbox transaction, the handler, dead-letter and reject publishing), so
	// a span started here is the parent of all of it. The returned function
	// is called exactly once, with the settlement, after the delivery was
	// acknowledged or handed back.
	Delivery(ctx context.Context, m inboxkit.Message) (context.Context, func(Settled))
	// Handler wraps the handler, once, in New (for handler timing and a
	// child span). It must call h and return its error unchanged.
	Handler(h Handler) Handler
}

// observe starts the observation of one delivery: it returns the context to
// handle it with and the function to call with its settlement.
func (c *Consumer) observe(ctx context.Context, m inboxkit.Message) (context.Context, func(Settled)) {
	if c.cfg.Observer == nil {
		return ctx, func(Settled) {}
	}
	return c.cfg.Observer.Delivery(ctx, m)
}
