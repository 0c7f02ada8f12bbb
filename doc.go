// Package inboxkit holds the vocabulary shared by every part of the toolkit:
// the [Message] a consumer receives, the [Decision] an error carries
// (business reject, technical retry, poison), the reason codes (Reason*) and
// the [Clock] that time is read from. It has no dependencies; every name is
// defined here once.
//
// What became of one delivery is told by four types, one per question, so a
// word may appear in several of them (REJECTED is a Status, an Outcome and,
// as "reject", an Action):
//
//	[Status]   what the inbox row says (the STATUS column)
//	[Class]    what kind of failure it was (ERROR_CLASS); a Reason* code says which
//	[Outcome]  what the inbox did with the delivery (inbox.Result)
//	[Action]   what the consumer runtime told the broker (consumer.Settled)
//
// How often and when a failed message is tried again is one [RetryPolicy]
// (the backout threshold, the redelivery [Backoff], in-process retries),
// with its defaults documented there once; it is set on the inbox store and
// read by the consumer runtime, the store-then-process worker and
// classify.Do.
//
// The parts that do the work live in sub-packages:
//
//   - inbox: the INBOX_EVENT_PROCESSING table, written in the same transaction
//     as the business change, with SQL dialects for PostgreSQL, MariaDB/MySQL,
//     SQLite and Oracle.
//   - classify: errors as decisions (Reject, Retry, Poison), transient driver
//     error detection and the in-process retry loop; classify/breaker: a
//     circuit breaker.
//   - dlq: the dead-letter envelope and replay.
//   - consumer: the runtime that ties a broker Source to the inbox.
//   - broker/stomp, broker/rabbitmq, broker/jetstream: broker adapters.
package inboxkit
