// Package amqp10 connects inboxkit to AMQP 1.0 brokers
// (github.com/Azure/go-amqp): IBM MQ AMQP channels, ActiveMQ Artemis, Azure
// Service Bus, Qpid, Solace, and RabbitMQ's AMQP 1.0 plugin. An [Adapter] is
// the consumer.Source of one queue and a dlq.Publisher.
//
//	a, err := amqp10.Open(ctx, amqp10.Config{URL: "amqp10://app:secret@mq.example:5672", Queue: "INVOICE.EVENTS"})
//	...
//	defer a.Close()
//	d, err := a.Receive(ctx) // consumer.Delivery
//	err = a.Publish(ctx, "INVOICE.EVENTS.DLQ", headers, body)
//
// # Receiving
//
// Open attaches one receiver link to Config.Queue, named "inboxkit:QUEUE",
// with a durable source terminus that never expires, and link credit
// Config.Prefetch. Credit is managed by the adapter: deliveries held and
// not settled keep theirs, and new credit is issued only when the link has
// none left (a flow crossing transfers in flight makes RabbitMQ 3.10's
// plugin send more than the credit, which stalls go-amqp's receiver). The
// queue must exist. Messages from JMS producers over AMQP (Qpid JMS, IBM MQ
// JMS) read as over STOMP:
//
//   - Headers: the application properties (JMS properties such as eventId),
//     rendered as strings, plus the correlation-id property as header
//     "correlation-id" (JMSCorrelationID).
//   - BrokerMessageID: the message-id property (JMSMessageID).
//   - Ids (message-id, correlation-id) in the form of [IDString]: a string
//     as it is; binary, as IBM MQ sends the 24-byte MQMD MsgId and
//     CorrelId, as "ID:" + lower-case hex (the JMS form, "ID:414d5120..."),
//     never as raw bytes (a database refuses NULs in an event id); uuid
//     as 8-4-4-4-12 lower-case hex; ulong as decimal. Every reader of an id
//     sees that form: the event id (--event-id-from message-id or
//     correlation-id), the inbox row, audit, the dead-letter envelope,
//     replay.
//   - Body: data sections (BytesMessage) as they are; an amqp-value string
//     (TextMessage) as its UTF-8 bytes; other amqp-values and
//     amqp-sequences (MapMessage, StreamMessage) as JSON.
//   - Redelivered: the header's first-acquirer is false, or its
//     delivery-count is above 0. FirstDelivery: its negation, only when
//     the message has a header.
//   - DeliveryCount: 0 (unknown), unless Config.TrustDeliveryCount.
//
// # Settling
//
// Ack settles with the accepted outcome. Requeue settles with released,
// which never dead-letters and does not raise the delivery count, or with
// modified (delivery-failed) under Config.RequeueModified. With a delay the
// delivery is held unsettled, keeping its credit, and released after the
// delay (the way the RabbitMQ adapter holds and nacks): AMQP 1.0 has no
// delayed release, and re-sending a copy then accepting the original (what
// the STOMP adapter does) would change the message-id and lose the
// first-acquirer flag. Receivers settle first (rcv-settle-mode first): the
// broker does not confirm a disposition, so nil from Ack means it was
// written. A delivery from a connection that has ended cannot be settled:
// Ack returns an error and the broker delivers the message again.
//
// The receiver's attach asks for unsettled deliveries (snd-settle-mode
// unsettled): the broker keeps a delivery until the adapter settles it. A
// broker that answers another mode (settled, or mixed: it may settle some
// deliveries itself) sends at most once, and a delivery in hand when the
// consumer dies, or handed back, is gone. Open fails then with
// [ErrPresettled], naming the broker's mode; Config.AllowPresettled
// (?allow-presettled) accepts such a broker on purpose and logs a warning
// naming the mode at every connect. Apache Qpid Proton's example broker
// answers mixed and sends every delivery settled (tested).
//
// # The delivery count and the inbox
//
// The inbox counts attempts itself; a broker's count may only raise that
// number where it cannot overcount (a delivery handed back because the
// database was down must not burn an attempt). The header's delivery-count
// can overcount: brokers raise it for every unsettled delivery of a
// connection that broke, also those that waited in the link credit and never
// reached a handler, and modified(delivery-failed) raises it for every
// Requeue, outage or not. So it is ignored by default; Config.TrustDeliveryCount
// uses it (for Prefetch 1 on a broker that keeps the count) and refuses to be
// combined with RequeueModified. RabbitMQ 3.10's plugin sends 0 always.
//
// # Publishing
//
// Publish attaches a sender link per destination (each on its own session)
// and sends unsettled; it returns nil only after the broker settled the
// transfer with accepted. Any other outcome ([ErrNotAccepted]), a lost
// connection before the settlement or a refused attach is an error. The
// message is durable, with a fresh string message-id, the headers as
// application properties (header "correlation-id" as the correlation-id
// property) and the body as one data section; it carries no message
// annotations. A correlation id in the binary form of IDString goes out
// as the bytes it names (an MQ CorrelId comes back as it came); any other
// goes out as a string, whole.
//
// # Addresses
//
// Config.Addressing turns a queue name into a link address. Plain
// addressing (IBM MQ, Artemis, Service Bus) uses the name and sets the
// "queue" capability on the terminus (IBM MQ attaches a topic without it),
// durable as the receiver's source.
// RabbitMQ addressing, chosen automatically when the broker's open frame says
// product RabbitMQ, receives from "/amq/queue/NAME" and publishes to
// "/queue/NAME" (declaring a missing queue durable), falling back to
// "/amq/queue/NAME" when the queue exists with other arguments (quorum
// queues). The plugin accepts and drops a message sent to "/amq/queue/" of
// a queue that does not exist, so Publish never does that.
//
// # IBM MQ
//
// amqp10://…?profile=ibmmq (Config.Profile ProfileIBMMQ) sets what IBM MQ
// AMQP channels need: plain addressing with the "queue" capability on
// every terminus (without it MQ attaches a topic), and one session per
// connection for the receiver and all senders (a channel supports a single
// session and disconnects a client that begins a second). A container id
// given with it must be a valid MQ client id (letters, digits, '%', '/',
// '.', '_'; the default, "inboxkit_" and hex digits, is one).
//
// What Publish sends keeps to what a queue manager accepts of an incoming
// AMQP message, on every profile: the message-id is a string (MQ rejects a
// uuid or ulong message-id or correlation-id), there are no message
// annotations (MQ rejects any). MQ keeps 24 bytes of a correlation id, as
// the binary MQMD CorrelId. The rule here: a correlation id in the binary
// form of IDString goes out as the bytes it names, so an MQ CorrelId that
// came in ("ID:" + 48 hex digits) goes back as the same 24 bytes; any
// other correlation id goes out as a string, whole, never cut: MQI and JMS
// applications see its first 24 bytes as the CorrelId, AMQP consumers of
// the queue the whole string (MQ keeps the AMQP properties beside the
// MQMD), and a dead letter carries it whole in
// inboxkit-dlq-correlation-id. TestPublishFrames and TestProfileIBMMQ pin
// this in the frames the adapter writes.
//
// Not tested against a live queue manager: none was at hand where this
// adapter is tested (RabbitMQ's plugin and Qpid Proton's example broker
// are). IBM MQ 9.0's documentation also lists accepted as the only
// disposition state of an AMQP channel; if a queue manager refuses
// released (Requeue), expect what RabbitMQ does with modified: the link
// or session ends and the message comes again after the reconnect.
//
// # Connection loss
//
// When the connection, a session or the receiver link ends, the Adapter
// reconnects in the background with doubling, jittered backoff
// (Config.Reconnect, an inboxkit.Backoff) and attaches
// again. Meanwhile Receive and Publish wait, bounded by their ctx, and
// [Adapter.Ready] reports the outage (for readiness checks). Close closes
// the connection; the broker hands back every unsettled delivery. The
// password of Config.URL never appears in errors or logs (url.URL.Redacted).
//
// AMQP 1.0 has no request for a queue's depth, so this adapter cannot tell
// how many messages a dead-letter queue holds ("inboxctl stats" says so).
//
// # Broker facts (RabbitMQ 3.10.8, rabbitmq_amqp1_0)
//
//   - The modified outcome is refused ("Unrecognised state") and ends the
//     session; the delivery comes again. Keep RequeueModified off.
//   - rcv-settle-mode second is refused (not-implemented); a request for
//     snd-settle-mode unsettled is answered unsettled.
//   - The header's delivery-count is 0 on every delivery, also on quorum
//     queues; first-acquirer is false on redeliveries.
//   - A message of several data sections arrives with the sections in
//     reverse order (one section, what JMS BytesMessage sends, is fine).
//   - "/queue/NAME" on an existing quorum queue is refused
//     (PRECONDITION_FAILED, inequivalent arg); "/amq/queue/NAME" of a
//     missing queue accepts and drops.
//   - Accepts written just before the connection closes can be forgotten,
//     on classic and quorum queues, and those messages come again. Ending
//     the session first keeps them on a classic queue only; detaching the
//     receiver first keeps them on both (Adapter.Close does both). The
//     plugin never answers that detach (Close waits 100ms for it), and the
//     detach cancels the consumer, which on a single-active-consumer queue
//     hands the queue to the standby ahead of the deliveries not settled
//     (Config.SingleActiveConsumer).
package amqp10
