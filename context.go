package inboxkit

import "context"

type messageKey struct{}

// ContextWithMessage returns ctx carrying m, the message being handled. The
// consumer runtime calls it before the handler, so that code called from
// the handler with its ctx (an outbox write: outbox.Store.Add records the
// event id and correlation id of the message that caused it) finds the
// message without being passed it.
func ContextWithMessage(ctx context.Context, m Message) context.Context {
	return context.WithValue(ctx, messageKey{}, m)
}

// MessageFromContext returns the message ContextWithMessage put into ctx,
// and false when there is none (code running outside a handler).
func MessageFromContext(ctx context.Context) (Message, bool) {
	m, ok := ctx.Value(messageKey{}).(Message)
	return m, ok
}
