// Package rabbitmq connects inboxkit to RabbitMQ over AMQP 0-9-1
// (github.com/rabbitmq/amqp091-go). An [Adapter] is the consumer.Source of
// one queue and a dlq.Publisher.
//
//	a, err := rabbitmq.Open(ctx, rabbitmq.Config{Queue: "invoice.events", QueueType: rabbitmq.QueueQuorum})
//	...
//	defer a.Close()
//	d, err := a.Receive(ctx) // consumer.Delivery
//	err = a.Publish(ctx, "invoice.events.dlq", headers, body)
//
// # Receiving
//
// Open uses Config.Queue as it is when it exists, whatever its type and
// arguments (a passive declare, which changes nothing: quorum queues,
// dead-letter exchanges, TTLs, length limits, delivery limits stay as the
// administrator set them); a missing queue is created durable, of
// Config.QueueType (or the URL's ?queue-type=quorum|classic|stream). It
// sets the channel QoS to Config.Prefetch and consumes with manual
// acknowledgement. A refusal by the broker (406 PRECONDITION_FAILED: a
// queue created at the same moment with other arguments, or a request the
// queue's type or a policy does not allow) wraps [ErrPreconditionFailed]
// and says what to compare; it is no outage. A delivery becomes an
// inboxkit.Message:
//
//   - Headers: the AMQP table headers, rendered as strings, plus the
//     correlation_id property as header "correlation-id".
//   - BrokerMessageID: the message_id property.
//   - Destination: the queue name.
//   - Redelivered: the AMQP redelivered flag.
//   - FirstDelivery: the redelivered flag is false and no x-delivery-count
//     says otherwise. A redelivery is never vouched for as first.
//   - DeliveryCount: x-delivery-count+1 where the header is present (quorum
//     queues set it on every redelivery: the header counts the earlier
//     deliveries); 1 on a first delivery with Config.QueueType quorum (the
//     header is absent on the first); otherwise 0, unknown (classic
//     queues, and first deliveries from a quorum queue whose type the
//     Adapter was not told).
//
// # Settling
//
// Ack sends basic.ack on the channel the delivery came from; AMQP does not
// confirm it, so nil means the frame was written. Requeue sends basic.nack
// with requeue=true, which dead-letters only past a delivery limit the
// queue has (see below). With a delay, the delivery is held unacknowledged (keeping its
// prefetch slot) and nacked when the delay has passed; Requeue returns at
// once. A delivery from a channel that has closed cannot be settled: Ack
// returns an error and the broker redelivers the message with the
// redelivered flag set.
//
// AckBatch (consumer.BatchAcker; the consumer's batch mode calls it)
// acknowledges several deliveries with one basic.ack carrying the multiple
// flag, which acknowledges every unacknowledged delivery of the channel up
// to its tag, so it is sent only up to the first delivery that is neither
// in the batch nor settled (one another goroutine holds, or one waiting for
// its delayed requeue); the batch's other deliveries are acknowledged one
// by one.
//
// # Publishing
//
// Publish uses a separate channel in confirm mode and returns nil only after
// the broker's basic.ack. It publishes persistent and mandatory to the
// default exchange with the destination queue as routing key, after
// declaring that queue durable if it does not exist (an existing queue is
// used as it is). A nack, a channel closed before the confirm ([ErrNacked])
// or a returned message ([ErrUnroutable]) is an error. Concurrent
// publishes on one Adapter await their confirms together (up to 256 at
// once; an outbox relay publishes many keys at a time), each returning
// once its own message is confirmed.
//
// # Connection loss and clusters
//
// One connection carries both channels. When the connection or either
// channel closes, the Adapter reconnects in the background with doubling
// backoff (Config.Reconnect, an inboxkit.Backoff),
// redeclares and consumes again. The URL of a cluster lists its nodes,
// comma-separated in the host part
// (amqp://guest:guest@rmq1:5672,rmq2:5672,rmq3:5672/?queue-type=quorum):
// the Adapter connects to the first node that answers, and after a lost
// connection tries the nodes from the one after the node it lost, round
// the list, so a consumer whose node died goes on on another. A quorum
// queue is served by every node of its cluster and keeps its messages
// while a majority of its members runs; a classic queue lives on one
// node and is gone while that node is down. A publish whose connection
// died before its confirm is sent again on the next connection, and a
// nacked one on a channel of its own (a quorum queue nacks until it
// elected a new leader): both can store a message twice, which the
// inbox makes a duplicate. Meanwhile Receive and Publish wait, bounded
// by their ctx, and [Adapter.Ready] reports the outage (for readiness
// checks). Close closes the connection; the broker requeues every
// unacknowledged delivery. The password of Config.URL never appears in
// errors or logs.
//
// [Adapter.Depth] counts the ready messages of a queue (a passive declare,
// which creates nothing): the depth of a dead-letter queue in
// "inboxctl stats".
//
// # A quorum queue's delivery-limit and the inbox's attempts
//
// The inbox dead-letters a message after Retry.MaxAttempts attempts of its
// handler, counted in the database, with the envelope that says why
// (ARCHITECTURE.md, rule 5). A quorum queue with a delivery limit
// (x-delivery-limit, or a policy's delivery-limit; newer RabbitMQ versions
// may set one by default: look at the queue's arguments and effective
// policy) drops or dead-letters a message itself once it was returned
// more often than that, through the queue's own dead-letter exchange,
// without the envelope and whatever the inbox counted. Its count also
// grows for every hand-back that is no attempt (a delivery handed back
// while the database was unreachable, deliveries held in the prefetch of a
// consumer that died). Keep the limit well above the inbox's attempts plus
// the hand-backs an outage can cause (MaxAttempts 5: a limit of 100 or
// none), so the inbox decides; a message the queue took away is not in the
// inbox's dead-letter queue and its row stays TECHNICAL_FAILURE
// ("inboxctl check" lists it as stuck). The adapter never sets a limit on
// the queues it creates.
//
// # Broker facts (RabbitMQ 3.10)
//
//   - Classic queues give no delivery count, only the redelivered flag.
//   - Quorum queues add x-delivery-count on redeliveries, also after a
//     consumer crash, and on a nack with requeue; they set no delivery
//     limit by default on 3.10. When the node that led the queue and held
//     the consumer dies before the ack, the new leader redelivers the
//     message flagged redelivered, with x-delivery-count 1 (3.10.8, a
//     3-node cluster): the adapter reports it as no first delivery.
//   - Declaring an existing queue with other arguments than it has (a
//     quorum queue without x-queue-type, a queue with a TTL without it)
//     is refused with 406 PRECONDITION_FAILED and closes the channel; a
//     passive declare is not.
//   - The broker closes a channel holding a delivery longer than
//     consumer_timeout (30 minutes by default): keep Requeue delays short.
//   - The broker has native dead-lettering (dead-letter exchanges); the
//     runtime does not rely on it.
//   - After the node of a quorum queue's leader dies, a channel that
//     published to that leader is nacked for every later publish to the
//     queue (seen for 11s, eight publishes, until the publisher gave up), while a new
//     channel's publish is confirmed once the queue elected a new leader
//     (under a second on loopback).
package rabbitmq
