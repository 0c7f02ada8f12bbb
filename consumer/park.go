package consumer

import (
	"context"
	"fmt"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// park settles keyed delivery d when its key is parked
// (inbox.Store.KeyParked, one query): d is dead-lettered with reason
// KEY_PARKED by the store's letter protocol (row DEAD_LETTERED, envelope
// published, commit, then the acknowledgement), without its handler; a row
// of the event that is terminal already makes it a duplicate (acknowledged,
// nothing published). ok is false when the key is not parked: d runs.
// When the question or the dead letter cannot be answered or recorded
// (database or dead-letter queue unreachable), d is handed back like any
// delivery whose outcome could not be recorded: in the orderer it stays in
// hand and is asked about again (an outage), never run meanwhile.
func (c *Consumer) park(ctx context.Context, d Delivery) (s Settled, ok bool) {
	m := c.Message(d)
	check := inbox.ParkCheck{ConsumerName: c.cfg.Name, OrderKey: m.OrderKey, EventID: m.ID, Replayed: m.Header(dlq.HeaderReplayedAt) != ""}
	bctx, cancel := c.cfg.bounded(ctx)
	parked, err := c.store.KeyParked(bctx, check)
	cancel()
	if err == nil && !parked {
		return Settled{}, false
	}
	ctx, done := c.observe(ctx, m)
	defer func() { done(s) }()
	s = Settled{Message: m}
	if err != nil {
		s.Err = fmt.Errorf("consumer: is key %q parked: %w", m.OrderKey, err)
		return c.settle(ctx, d, s), true
	}
	bctx, cancel = c.cfg.bounded(ctx)
	defer cancel()
	cause := fmt.Errorf("key %q is parked: an earlier message of it is in the dead-letter queue; replay the key's dead letters, head first (inboxctl dlq replay --key %s)", m.OrderKey, m.OrderKey)
	s.Result, s.Err = c.store.DeadLetter(bctx, inbox.DeadLetter{Entry: c.entry(m), Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonKeyParked, Err: cause})
	return c.settle(ctx, d, s), true
}
