// Package dlq defines the dead-letter envelope and the [Publisher] port.
//
// A dead letter keeps the original body unchanged and the original headers
// (without the transport headers a broker sets on delivery), plus these
// headers:
//
//	inboxkit-dlq-reason                reason code (MAX_ATTEMPTS_EXCEEDED, MALFORMED_PAYLOAD, ...)
//	inboxkit-dlq-class                 TECHNICAL, POISON or BUSINESS
//	inboxkit-dlq-error                 the last error, one line, at most 1000 bytes
//	inboxkit-dlq-attempts              attempts counted in the inbox
//	inboxkit-dlq-consumer              the consumer name
//	inboxkit-dlq-original-destination  where the message came from (replay target)
//	inboxkit-dlq-event-id              the event id
//	inboxkit-dlq-correlation-id        the correlation id
//	inboxkit-dlq-first-failure         first technical failure (RFC 3339, UTC)
//	inboxkit-dlq-last-failure          last technical failure
//	inboxkit-dlq-time                  when it was dead-lettered
//
// The consumer acknowledges the original only after [Publisher.Publish]
// returned nil, which adapters return only once the broker confirmed the
// message (a STOMP receipt, a RabbitMQ publisher confirm, a JetStream
// publish ack). [Parse] reads an envelope back for listing and replay.
package dlq
