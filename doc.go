// Package inboxkit holds the vocabulary shared by every part of the toolkit:
// the [Message] a consumer receives, the [Status] of an inbox row, the
// [Decision] an error carries (business reject, technical retry, poison) and
// the [Clock] that time is read from. It has no dependencies.
//
// The parts that do the work live in sub-packages:
//
//   - inbox: the INBOX_EVENT_PROCESSING table, written in the same transaction
//     as the business change, with SQL dialects for PostgreSQL, MariaDB/MySQL,
//     SQLite and Oracle.
//   - classify: errors as decisions (Reject, Retry, Poison), transient driver
//     error detection, backoff and a circuit breaker.
//   - dlq: the dead-letter envelope and replay.
//   - consumer: the runtime that ties a broker Source to the inbox.
//   - broker/stomp, broker/rabbitmq, broker/jetstream: broker adapters.
package inboxkit
