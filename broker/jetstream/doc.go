// Package jetstream connects inboxkit to NATS JetStream
// (github.com/nats-io/nats.go/jetstream). An [Adapter] is the
// consumer.Source of one subject, read through a durable pull consumer, and
// a dlq.Publisher. Package broker/jetstream/embedded runs a NATS server
// with JetStream inside the process, for the zero-setup demo and for tests;
// this package does not link the server.
//
//	a, err := jetstream.Open(ctx, jetstream.Config{Subject: "invoice.events"})
//	...
//	defer a.Close()
//	d, err := a.Receive(ctx) // consumer.Delivery
//	err = a.Publish(ctx, "invoice.events.dlq", headers, body) // creates INBOXKIT_INVOICE_EVENTS_DLQ
//
// # Stream and consumer
//
// Open makes sure Config.Stream (by default [StreamName] of the subject,
// INBOXKIT_INVOICE_EVENTS above) captures Config.Subject. A missing stream is
// created with file storage and work-queue retention: the stream is a queue,
// and a message is removed once acknowledged (Config.KeepAcked chooses
// limits retention instead). An existing stream keeps its settings; Subject
// is added to its subjects if it does not capture it. The durable pull
// consumer Config.Durable is created or updated with explicit ack,
// Config.AckWait, MaxAckPending Config.Prefetch and MaxDeliver -1 (unlimited):
// dead-lettering is the inboxkit runtime's decision, made from the inbox's
// own attempt count, so the server never gives up on a message.
//
// # Receiving
//
// Receive pulls one message per request, each waiting up to Config.PollWait
// on the server. A delivery becomes an inboxkit.Message:
//
//   - Headers: the NATS headers, first value of each.
//   - Destination: the subject.
//   - BrokerMessageID: the stream sequence, in decimal.
//   - DeliveryCount: the consumer's NumDelivered (1 for the first delivery),
//     known also after a consumer crash.
//   - Redelivered: NumDelivered > 1; FirstDelivery: NumDelivered is 1.
//
// # Settling
//
// Ack is a DoubleAck: it returns after the server confirmed the
// acknowledgement. Requeue is a Nak, or NakWithDelay(delay) when delay > 0,
// followed by a flush; the server redelivers after the delay. Term is never
// used. A delivery not settled within AckWait is redelivered by the server,
// which is how a crashed consumer's messages come back. Close naks the
// deliveries it handed out and that are not settled yet, so they come back
// at once.
//
// # Publishing
//
// Publish is a JetStream publish with headers and returns nil only after the
// stream's PubAck. For a subject that no stream captures (a DLQ or reject
// subject) Publish creates the stream [StreamName] of the subject (file
// storage, limits retention: dead letters stay until replayed or purged)
// and publishes again; Config.NoStreamCreation makes that an error instead.
// [Adapter.EnsureStream] creates or extends a stream of a chosen name ahead
// of time. [Adapter.Depth] counts a subject's messages in its stream.
//
// # A cluster
//
// Config.URL lists the servers of a JetStream cluster, and Config.Replicas
// is the number of copies of every stream the Adapter creates: 3 on a
// cluster of three keeps a stream, and what it confirmed, through the loss
// of one node. When the node leading the stream or the durable consumer
// dies, the others elect a new leader within seconds; meanwhile Publish
// fails and Receive gets nothing, then both carry on without help, on a
// connection nats.go moved to a live node. An Ack lost with the old leader
// makes the message come back after AckWait, a duplicate for the inbox.
//
// # Connection loss
//
// nats.go reconnects forever (Config.Reconnect, an inboxkit.Backoff,
// between attempts); [Adapter.Ready] reports
// whether the connection is up, for readiness checks.
// Nothing is buffered while disconnected, so an Ack, Requeue or Publish that
// returns an error was not sent. Receive issues a new pull request after a
// lost one and so resumes after a reconnect, within Config.PollWait. A
// delivery received before the connection broke can still be acknowledged
// after the reconnect if the server still holds it as pending; otherwise
// the server redelivers it after AckWait. The password of a URL never
// appears in errors or logs.
//
// # Broker facts (NATS JetStream)
//
//   - The delivery count and redelivery are known for every delivery.
//   - Delayed redelivery is native (NakWithDelay).
//   - There is no dead-letter queue: a message past MaxDeliver is only
//     announced by an advisory; inboxkit sets MaxDeliver -1 and publishes its
//     own dead letters.
//   - A work-queue stream allows only one consumer per subject.
package jetstream
