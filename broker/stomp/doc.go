// Package stomp is inboxkit's adapter for ActiveMQ Classic, written on a
// small STOMP 1.2 client of its own (no third-party STOMP module).
//
// # What it does
//
// [Open] returns an [Adapter], the shape of every adapter in broker/: it
// consumes Config.Queue (a consumer.Source) and sends persistent messages
// with a receipt (a dlq.Publisher); without Config.Queue it only publishes.
//
//	a, err := stomp.Open(ctx, stomp.Config{URL: "stomp://127.0.0.1:61613", Queue: "invoices", Prefetch: 4})
//	...
//	defer a.Close()
//	d, err := a.Receive(ctx) // consumer.Delivery
//	err = a.Publish(ctx, "DLQ.invoices", headers, body)
//
// [Adapter.Ready] reports whether the receiving connection is up (for
// readiness checks). [Browse] lists a queue without consuming it (the
// CLI's "dlq list"). Below them, [Conn] is a STOMP 1.2 connection (CONNECT with
// heart-beat negotiation, SUBSCRIBE, ACK/NACK, SEND with receipt,
// DISCONNECT with receipt) and [FrameReader] / [WriteFrame] are the frame
// codec.
//
// # The contract
//
// The Adapter subscribes with ack:client-individual and activemq.prefetchSize
// set to Config.Prefetch. Receive may be called from several goroutines.
// Every delivery is settled exactly once, by Ack or Requeue, from any
// goroutine:
//
//   - Ack sends ACK and returns once it is written (Conn.AckAsync); with
//     Config.AckWait it waits for the broker's RECEIPT. Acknowledgements
//     that do not wait follow each other on the connection instead of
//     costing a round trip each; the connection still asks for a RECEIPT
//     whenever none is outstanding and is given up when it does not come
//     within Config.ReceiptTimeout. An ACK lost with its connection brings
//     the message again (redelivered), a duplicate the inbox absorbs. The
//     consumer calls Ack only after the commit.
//   - Requeue never NACKs (a NACK on ActiveMQ goes straight to its own
//     dead-letter queue unless the redeliveryPlugin is configured). It sends
//     a persistent copy of the message (same headers and body) to the same
//     queue, with header inboxkit-requeued incremented and, when delay >=
//     1ms, ActiveMQ's AMQ_SCHEDULED_DELAY; after the copy's RECEIPT it ACKs
//     the original. The copy arrives with Redelivered=true. If the ACK
//     fails after the copy was stored, both exist: a duplicate, which the
//     inbox absorbs by event id.
//
// The receiving and the publishing connection are two connections. When
// the receiving one breaks (read or write error, ERROR frame, or no data
// and no heart-beat from the broker for three times the negotiated
// interval), the Adapter reconnects with exponential backoff
// (Config.Reconnect, an inboxkit.Backoff). Deliveries of
// the broken connection can no longer be settled: Ack and Requeue return an
// error wrapping [ErrConnClosed], and the broker delivers the message again
// with redelivered:true. Close disconnects; unacknowledged messages go back
// to the broker.
//
// Publish returns nil only after the broker's RECEIPT for the SEND; an ERROR
// frame fails it with a [*BrokerError] carrying the broker's message.
//
// # Message mapping
//
// Every MESSAGE header goes into Message.Headers, unescaped (the first
// occurrence when repeated). Destination is the destination header,
// BrokerMessageID the message-id header (for logs only), Redelivered is
// true for redelivered:true or a non-zero inboxkit-requeued header,
// FirstDelivery is its negation, and DeliveryCount is always 0. ActiveMQ
// forgets the redelivered flag of messages dispatched before a broker
// restart unless the destination policy sets persistJMSRedelivered="true":
// without it, a message that kills the consumer and then the broker, over
// and over, arrives as a first delivery every time and is never counted
// (see "The first delivery" at inbox.Store.Process). The event id travels in an application header
// of the producer's choice (e.g. eventId); JMS producers' JMSCorrelationID
// arrives as correlation-id. ActiveMQ leaves a message's group
// (JMSXGroupID) out of the MESSAGE frame: Publish also sends it as
// HeaderGroup, and a message with HeaderGroup arrives with JMSXGroupID set
// from it (see HeaderGroup; message groups keep per-key order across
// consumers, docs/order.md).
//
// # ActiveMQ facts
//
//   - The broker ignores a client-set message-id; ids arrive escaped per
//     STOMP 1.2 (ID\cvm-...) and are unescaped here.
//   - A consumer that dies without ACK gets its messages again with
//     redelivered:true but without a delivery count, and the broker never
//     dead-letters them: attempts must be counted in the inbox.
//   - Delayed Requeue needs schedulerSupport="true" in the broker config
//     (scripts/activemq sets it); without it the delay is ignored.
//   - A SEND with content-length becomes a JMS BytesMessage for Java
//     consumers; this package always sends content-length, so requeued and
//     published messages are BytesMessages.
//   - Browsing uses SUBSCRIBE browser:true; the broker ends the browse with a
//     MESSAGE carrying browser:end.
//   - Heart-beats: ActiveMQ sends its first heart-beat only after twice the
//     interval, hence the three-interval tolerance.
//
// # Limits
//
// Frames from the broker are bounded by [Limits]: 4 MiB body, 1000 headers
// and 64 KiB per line by default. A MESSAGE whose body is over the limit is
// skipped on the wire and delivered with its size (Delivery.Oversize, a
// consumer.OversizeDelivery): the consumer runtime NACKs it, so ActiveMQ
// moves it, body included, to its own dead-letter queue (DLQ.<queue> with
// the individual strategy, else ActiveMQ.DLQ), records the event as
// DEAD_LETTERED with reason MESSAGE_TOO_LARGE, and goes on with the next
// message. Any other frame over a limit breaks the connection with a clear
// error instead of growing memory. Transactions (BEGIN/COMMIT) and
// topics are not used. A Subscription buffers Prefetch frames. The reader
// never waits for the subscriber of an acknowledged subscription (the
// RECEIPTs of its Acks may come behind the frames): frames that a broker
// sends beyond Prefetch, ignoring activemq.prefetchSize, are kept in order
// up to MaxOverflowMessages or MaxOverflowBytes, and past those the
// connection fails saying so (the broker takes back what was not
// acknowledged). Only an "auto" subscription (a queue browser) makes the
// reader wait for room. Tests need the broker started by "scripts/activemq
// start".
package stomp
