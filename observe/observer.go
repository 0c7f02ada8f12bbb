package observe

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// traceContext reads and writes the W3C traceparent and tracestate headers.
var traceContext = propagation.TraceContext{}

// delivery is the state of one observed delivery, carried in its context.
type delivery struct {
	mu         sync.Mutex
	handlerEnd time.Time
}

type deliveryKey struct{}

// Delivery implements consumer.Observer: it starts the delivery's span (a
// child of the message's traceparent, if any) and counts the settlement.
func (o *Observer) Delivery(ctx context.Context, m inboxkit.Message) (context.Context, func(consumer.Settled)) {
	start := time.Now()
	o.m.inFlight.Inc()
	ctx = traceContext.Extract(ctx, headerCarrier(m.Headers))
	ctx, span := o.tracer.Start(ctx, "inboxkit.delivery", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("event_id", m.ID),
			attribute.String("correlation_id", m.CorrelationID),
			attribute.String("consumer", o.cfg.Consumer),
			attribute.String("messaging.destination.name", m.Destination),
			attribute.Bool("redelivered", m.Redelivered),
		))
	st := &delivery{}
	ctx = context.WithValue(ctx, deliveryKey{}, st)
	return ctx, func(s consumer.Settled) {
		now := time.Now()
		o.m.inFlight.Dec()
		o.count(s)
		o.m.delivery.Observe(now.Sub(start).Seconds())
		st.mu.Lock()
		if !st.handlerEnd.IsZero() {
			o.m.commit.Observe(now.Sub(st.handlerEnd).Seconds())
		}
		st.mu.Unlock()
		span.SetAttributes(
			attribute.String("outcome", outcome(s)),
			attribute.String("action", string(s.Action)),
			attribute.Int("attempts", s.Result.Attempts),
		)
		if s.Result.Status != "" {
			span.SetAttributes(attribute.String("status", string(s.Result.Status)))
		}
		if s.Result.Reason != "" {
			span.SetAttributes(attribute.String("reason", s.Result.Reason))
		}
		switch {
		case s.Err != nil:
			span.RecordError(s.Err)
			span.SetStatus(codes.Error, s.Err.Error())
		case s.Result.Err != nil && s.Action != inboxkit.ActionAck:
			span.RecordError(s.Result.Err)
			span.SetStatus(codes.Error, s.Result.Err.Error())
		}
		span.End()
	}
}

// Batch implements consumer.Observer: the histogram of deliveries per
// database transaction of a batching consumer (Config.BatchSize above 1).
func (o *Observer) Batch(n int) { o.m.batchSize.Observe(float64(n)) }

// Handler implements consumer.Observer: it times the handler in a child span.
func (o *Observer) Handler(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		ctx, span := o.tracer.Start(ctx, "inboxkit.handler")
		start := time.Now()
		err := h(ctx, tx, m)
		end := time.Now()
		o.m.handler.Observe(end.Sub(start).Seconds())
		if st, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
			st.mu.Lock()
			st.handlerEnd = end
			st.mu.Unlock()
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		return err
	}
}

// outcome is the outcome label: the inbox's outcome, or "ERROR" when the
// inbox gave none (it was unreachable).
func outcome(s consumer.Settled) string {
	if s.Result.Outcome == "" {
		return "ERROR"
	}
	return string(s.Result.Outcome)
}

func (o *Observer) count(s consumer.Settled) {
	status := string(s.Result.Status)
	if status == "" {
		status = "NONE"
	}
	o.m.deliveries.WithLabelValues(outcome(s), string(s.Action), status).Inc()
	if s.Result.Attempts > 0 {
		o.m.attempts.Observe(float64(s.Result.Attempts))
	}
	if s.Err != nil {
		o.m.runtimeErrors.Inc()
		return
	}
	switch {
	case s.Result.Outcome == inboxkit.OutcomeDuplicate:
		o.m.duplicates.Inc()
	case s.Action == inboxkit.ActionDeadLetter:
		o.m.deadLetters.WithLabelValues(reason(s.Result.Reason)).Inc()
	case s.Action == inboxkit.ActionReject || s.Result.Outcome == inboxkit.OutcomeRejected:
		o.m.rejections.WithLabelValues(reason(s.Result.Reason)).Inc()
	}
}

func reason(r string) string {
	if r == "" {
		return "NONE"
	}
	return r
}

// headerCarrier adapts message headers to the propagation API.
type headerCarrier map[string]string

func (h headerCarrier) Get(key string) string { return h[key] }
func (h headerCarrier) Set(key, value string) { h[key] = value }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// TracePublisher wraps a dead-letter (or reject) publisher so that every
// envelope carries the W3C traceparent of the span in the publish context —
// the delivery's span when the consumer has an Observer — replacing the
// original message's. Without a span in the context headers pass unchanged.
func TracePublisher(p dlq.Publisher) dlq.Publisher { return tracePublisher{p} }

type tracePublisher struct{ dlq.Publisher }

func (t tracePublisher) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	if trace.SpanContextFromContext(ctx).IsValid() {
		h := make(headerCarrier, len(headers)+2)
		for k, v := range headers {
			h[k] = v
		}
		traceContext.Inject(ctx, h)
		headers = h
	}
	return t.Publisher.Publish(ctx, destination, headers, body)
}
