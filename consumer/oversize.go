package consumer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// oversize settles a delivery whose body the source could not take: the
// broker dead-letters the whole message (Reject), then the inbox records
// the event as DEAD_LETTERED with reason MESSAGE_TOO_LARGE. In that order,
// so that a failure leaves the message either on the queue (it comes again)
// or in the broker's dead-letter queue, never nowhere.
func (c *Consumer) oversize(ctx context.Context, d OversizeDelivery, m inboxkit.Message, entry inbox.Entry) Settled {
	size, limit := d.Oversize()
	cause := fmt.Errorf("consumer: message of %d bytes is over the client's limit of %d bytes: moved to the broker's dead-letter queue with its body (raise the source's body limit to receive it)", size, limit)
	s := Settled{Message: m, Result: inbox.Result{
		Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMessageTooLarge, Err: cause,
	}}
	defer func() { c.logOversize(s, size, limit); c.count(s) }()
	if err := d.Reject(ctx); err != nil {
		// Still unacknowledged: it comes again after a reconnect.
		s.Err = fmt.Errorf("consumer: hand the oversize message to the broker's dead-letter queue: %w", err)
		return s
	}
	s.Action = inboxkit.ActionDeadLetter
	entry.PayloadHash = "" // the body was not read
	st, err := c.cfg.Store.MarkDeadLettered(ctx, inbox.DeadLetter{Entry: entry, Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMessageTooLarge, Err: cause})
	if err != nil {
		s.Err = fmt.Errorf("consumer: the oversize message is in the broker's dead-letter queue, but its inbox row was not written: %w", err)
	}
	s.Result.Status = st
	return s
}

// logOversize is the one log line of an oversize delivery (at warn, as
// every dead letter): what was done with it, its size and the limit.
func (c *Consumer) logOversize(s Settled, size, limit int) {
	m := s.Message
	attrs := []any{slog.String("consumer", c.cfg.Name), slog.String("event_id", m.ID),
		slog.String("correlation_id", m.CorrelationID), slog.String("broker_message_id", m.BrokerMessageID),
		slog.String("destination", m.Destination), slog.Int("size", size), slog.Int("limit", limit),
		slog.String("action", string(s.Action)), slog.String("reason", s.Result.Reason)}
	if s.Result.Status != "" {
		attrs = append(attrs, slog.String("status", string(s.Result.Status)))
	}
	if s.Err != nil {
		attrs = append(attrs, slog.String("runtime_error", s.Err.Error()))
	}
	c.cfg.Logger.Warn("message over the size limit", attrs...)
}
