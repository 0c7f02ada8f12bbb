package main

import (
	"github.com/inboxkit/inboxkit/consumer"
)

// eventIDHelp is the --event-id-from part of run's help.
const eventIDHelp = `
Legacy producers that send no eventId header: --event-id-from takes an ordered list
of sources; the first one that holds a value is the event id, and its name is logged
(event_id_source) and stored in EVENT_ID_SOURCE, so audit shows it:

  header:NAME      a header (header:JMSCorrelationID / header:JMSMessageID: the broker's ids)
  json:PATH        a field of a JSON body, dot-separated (json:invoice.number, json:lines.0.id)
  xml:PATH         an element of an XML body, from the root (xml:Invoice/Header/Number)
  correlation-id   the correlation id audit shows: the correlationId header, else the
                   broker's (header:JMSCorrelationID reads the broker's only)
  message-id       the broker's message id

What each protects against: a header the producer sets catches redeliveries and
resends that keep it; a business key (json:/xml:) catches a resend built anew, but
drops a second, different event about the same key; the correlation id only works
where it is unique per event; message-id catches broker redeliveries only, NOT a
producer resend (new JMSMessageID) nor a DLQ replay: 'inboxctl check' lists ids that
came from it. An id longer than 120 bytes becomes "sha256:" + the hex SHA-256 of
the whole key (never truncated).`

// parseEventIDFrom turns --event-id-from into the consumer's EventIDFunc
// (nil when empty: the eventId header).
func parseEventIDFrom(spec string) (consumer.EventIDFunc, error) {
	if spec == "" {
		return nil, nil
	}
	fn, _, err := consumer.ParseEventIDChain(spec)
	if err != nil {
		return nil, usageErr("--event-id-from: %v", err)
	}
	return fn, nil
}

// orderKeyHelp is the --order-key part of run's help.
const orderKeyHelp = `

Order per key: --order-key takes the same sources as --event-id-from (the first
that holds a value is the key; e.g. header:JMSXGroupID,json:customerNo). A key's
messages run one at a time in arrival order, different keys run concurrently up to
--concurrency, and the key is stored in ORDER_KEY. A technical failure is retried
in this process while the key's later messages wait unacknowledged; a message
without a key runs without an order. With --mode store-then-process a key's
messages are stored in arrival order and the workers of every process take only
a key's oldest open entry. Across processes the broker must give a key to one
consumer at a time (?single-active-consumer=true on RabbitMQ, ?exclusive=true on
ActiveMQ): see docs/order.md.

A poison head (dead-lettered after its attempts, or at once as poison): with
--on-poison dead-letter (the default) its key goes on with the next message. With
--on-poison park-key the key is parked while a dead letter of it is in the DLQ (a
DEAD_LETTERED row of the consumer and key, not archived; in every process, across
restarts): its later messages are not processed but dead-lettered behind the head,
in arrival order, with reason KEY_PARKED; the other keys flow. 'inboxctl stats' and
the console list the parked keys. Release a key with 'inboxctl dlq replay --key K'
(its dead letters, head first), or give its head up with 'inboxctl dlq drop
--event-id ID --archive' and replay the rest.`

// parseOrderKey turns --order-key into the consumer's OrderKeyFunc (nil
// when empty: no order).
func parseOrderKey(spec string) (consumer.OrderKeyFunc, error) {
	if spec == "" {
		return nil, nil
	}
	fn, err := consumer.ParseOrderKey(spec)
	if err != nil {
		return nil, usageErr("--order-key: %v", err)
	}
	return fn, nil
}
