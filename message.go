package inboxkit

import "time"

// Message is one delivery as the inbox sees it. Broker adapters fill it from
// the broker's frame; the consumer runtime extracts ID and CorrelationID from
// Headers according to its configuration.
type Message struct {
	// ID is the event id: the business identity of the event, stable across
	// producer resends and broker redeliveries. It is NOT the broker's message id.
	ID string
	// EventIDSource names where ID came from when it was derived (see
	// consumer.EventIDFunc): "header:eventId", "json:invoiceNo",
	// "message-id", ...; "" when it came from the configured event id header.
	EventIDSource string
	// CorrelationID links the events of one business case (audit).
	CorrelationID string
	// OrderKey is the key whose deliveries one consumer runs one at a time
	// in arrival order (consumer.Config.OrderKeyFunc: a customer number, a
	// JMSXGroupID); "" when none is configured or the message has none.
	OrderKey string
	// Headers are the message headers (application properties) as received.
	Headers map[string]string
	// Body is the payload, unchanged.
	Body []byte
	// Destination is the queue or subject the message was received from.
	Destination string
	// BrokerMessageID is the broker's own id of this delivery, for logs only.
	BrokerMessageID string
	// Redelivered is true when the broker says this delivery is not the first.
	Redelivered bool
	// FirstDelivery is true only when the broker vouches that this is the
	// message's first delivery (not merely that it is not flagged
	// redelivered): the inbox then runs it without an attempt marker
	// (inbox.Entry.FirstDelivery). Adapters that cannot tell leave it false.
	FirstDelivery bool
	// DeliveryCount is the broker's delivery count (1 for the first delivery),
	// or 0 when the broker does not tell.
	DeliveryCount int
}

// Header returns the value of header name, or "" when it is absent.
func (m Message) Header(name string) string {
	if m.Headers == nil {
		return ""
	}
	return m.Headers[name]
}

// Clock tells the time. Tests inject a fixed or stepping clock so that
// transcripts and retention are deterministic.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns time.Now in UTC.
func (SystemClock) Now() time.Time { return time.Now().UTC() }
