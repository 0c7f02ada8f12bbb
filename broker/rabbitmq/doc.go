// Package rabbitmq connects inboxkit to RabbitMQ over AMQP 0-9-1
// (github.com/rabbitmq/amqp091-go). An [Adapter] is the consumer.Source of
// one queue and a dlq.Publisher.
//
//	a, err := rabbitmq.Open(ctx, rabbitmq.Config{Queue: "invoice.events", Quorum: true})
//	...
//	defer a.Close()
//	d, err := a.Receive(ctx) // consumer.Delivery
//	err = a.Publish(ctx, "invoice.events.dlq", headers, body)
//
// # Receiving
//
// Open declares Config.Queue durable (a quorum queue with Config.Quorum),
// sets the channel QoS to Config.Prefetch and consumes with manual
// acknowledgement. A delivery becomes an inboxkit.Message:
//
//   - Headers: the AMQP table headers, rendered as strings, plus the
//     correlation_id property as header "correlation-id".
//   - BrokerMessageID: the message_id property.
//   - Destination: the queue name.
//   - Redelivered: the AMQP redelivered flag.
//   - FirstDelivery: the redelivered flag is false and no x-delivery-count
//     says otherwise.
//   - DeliveryCount: on quorum queues x-delivery-count+1 (the header counts
//     the earlier deliveries and is absent on the first, which counts 1);
//     on classic queues 0, unknown.
//
// # Settling
//
// Ack sends basic.ack on the channel the delivery came from; AMQP does not
// confirm it, so nil means the frame was written. Requeue sends basic.nack
// with requeue=true, which never dead-letters because no x-delivery-limit is
// declared. With a delay, the delivery is held unacknowledged (keeping its
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
// or a returned message ([ErrUnroutable]) is an error. Publishes on one
// Adapter are serialized, one confirm at a time: dead-letter traffic is
// small.
//
// # Connection loss
//
// One connection carries both channels. When the connection or either
// channel closes, the Adapter reconnects in the background with doubling
// backoff (Config.Reconnect, an inboxkit.Backoff),
// redeclares and consumes again. Meanwhile Receive and Publish wait, bounded
// by their ctx, and [Adapter.Ready] reports the outage (for readiness
// checks). Close closes the connection; the broker requeues every
// unacknowledged delivery. The password of Config.URL never appears in
// errors or logs.
//
// [Adapter.Depth] counts the ready messages of a queue (a passive declare,
// which creates nothing): the depth of a dead-letter queue in
// "inboxctl stats".
//
// # Broker facts (RabbitMQ 3.10)
//
//   - Classic queues give no delivery count, only the redelivered flag.
//   - Quorum queues add x-delivery-count on redeliveries, also after a
//     consumer crash, and could dead-letter after x-delivery-limit; inboxkit
//     never sets that limit (dead-lettering is the runtime's decision).
//   - The broker closes a channel holding a delivery longer than
//     consumer_timeout (30 minutes by default): keep Requeue delays short.
//   - The broker has native dead-lettering (dead-letter exchanges); the
//     runtime does not rely on it.
package rabbitmq
