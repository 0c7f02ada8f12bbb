package consumer

import (
	"context"

	"github.com/inboxkit/inboxkit"
)

// Observer watches deliveries for metrics, traces, progress and tests: the
// one observation hook of a consumer (package observe implements it with
// Prometheus and OpenTelemetry, so this package imports neither;
// ObserveSettled makes one of a function). Config.Observer is nil by
// default: nothing is observed.
//
// In ModeStoreThenProcess both sides are observed: the receive (outcome
// STORED or DUPLICATE) and, as a delivery of its own, each entry a worker
// processed (outcome PROCESSED, REJECTED, RETRY or DEAD_LETTER; action ack,
// reject, requeue for a retry after a backoff, or dead-letter).
//
// The methods are called from the consumer's goroutines concurrently;
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
	// Batch is called with the number of deliveries of every batch of
	// Config.BatchSize above 1 (one database transaction: in
	// ModeTransactional a batch of deliveries, in ModeStoreThenProcess a
	// worker's batch of stored entries), before it runs.
	Batch(n int)
}

// ObserveSettled is an Observer that calls f with every settlement and
// observes nothing else.
type ObserveSettled func(Settled)

// Delivery implements Observer: f is called with the settlement.
func (f ObserveSettled) Delivery(ctx context.Context, _ inboxkit.Message) (context.Context, func(Settled)) {
	return ctx, f
}

// Handler implements Observer: h unchanged.
func (f ObserveSettled) Handler(h Handler) Handler { return h }

// Batch implements Observer: nothing.
func (f ObserveSettled) Batch(int) {}

// observe starts the observation of one delivery: it returns the context to
// handle it with and the function to call with its settlement, which also
// goes to the deprecated Config.OnSettled.
func (c *Consumer) observe(ctx context.Context, m inboxkit.Message) (context.Context, func(Settled)) {
	ctx, done := c.observeEntry(ctx, m)
	if f := c.cfg.OnSettled; f != nil {
		return ctx, func(s Settled) { done(s); f(s) }
	}
	return ctx, done
}

// observeEntry is observe for an entry a store-then-process worker
// processes: the Observer sees it, OnSettled does not (it never did: the
// delivery was settled with the broker when it was stored).
func (c *Consumer) observeEntry(ctx context.Context, m inboxkit.Message) (context.Context, func(Settled)) {
	if c.cfg.Observer == nil {
		return ctx, func(Settled) {}
	}
	return c.cfg.Observer.Delivery(ctx, m)
}
