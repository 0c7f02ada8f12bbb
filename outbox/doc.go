// Package outbox sends what a transaction asks to send, after it commits:
// a message to a broker queue, or a POST to an HTTP endpoint (a letter or
// mail provider), without calling anything inside the transaction.
//
// # The guarantees
//
// Each outbox row is delivered at least once, with a message id fixed at
// insert; per key, in commit order; a receiver deduplicates by that id (an
// inboxkit consumer does: the id travels as the eventId header it reads by
// default, and as an HTTP destination's Idempotency-Key).
//
//   - A row is written by [Store.Add] inside the caller's transaction: it
//     commits with the business change or not at all, and a rollback sends
//     nothing.
//   - A [Relay] sends it after the commit and marks it SENT only once the
//     destination confirmed it (a STOMP receipt, a RabbitMQ publisher
//     confirm, a JetStream PubAck, an AMQP 1.0 accepted outcome, an HTTP
//     2xx). A relay that dies between the confirm and the mark leaves the
//     row PENDING: it is sent again, with the same id.
//   - The messages of one key leave one at a time, each after the previous
//     one was confirmed, in the order their transactions committed, also
//     with many relays in many processes. A message without a key is ordered
//     with nothing.
//   - No row is skipped: a relay never reads "ids above the last one seen",
//     which misses a transaction that wrote first and committed last.
//   - One message that cannot be sent blocks nothing but its own key: it is
//     tried again with the retry policy's jittered backoff, then PARKED with
//     its last error; with [ParkKey] its key waits for an operator, with
//     [SkipMessage] the key goes on without it. An operator retries or drops
//     it ([Store.Retry], [Store.Drop]; inboxctl outbox retry, drop).
//
// # How
//
// Two tables: the outbox table (INBOXKIT_OUTBOX: one row per message) and
// its key table (INBOXKIT_OUTBOX_KEY: one row per key). Add raises the
// key's LAST_SEQ and inserts the message with that number, in the caller's
// transaction: the key row stays locked until the commit, so a second
// transaction adding to the same key waits for the first to commit (or roll
// back), and the numbers of a key follow its commit order without gaps. A
// relay claims due keys (NEXT_AT <= now, FOR UPDATE SKIP LOCKED where the
// database has it) by setting NEXT_AT to the end of its lease, sends the
// key's messages after DONE_SEQ in order, and in one transaction marks them
// SENT and moves DONE_SEQ on. No database lock is held while a message is
// on its way; the lease keeps other relays off the key, and a relay that
// dies loses the key when its lease ends. A message without a key has no
// key row: it is its own key, with NEXT_AT and LEASE_OWNER on its row (SEQ
// 0), claimed beside the key rows. On PostgreSQL a NOTIFY after Add wakes
// the relays (LISTEN/NOTIFY, [Store.NotifyChannel]; at the commit of the
// first Add after a quiet [Config.NotifyInterval], for the others one
// outside the callers' transactions at the interval's end); the others
// poll.
//
// # What travels
//
// A broker destination gets Message.Headers and eventId (the message id),
// correlationId and causationId (the event whose handling wrote it: taken
// from the ctx of a consumer's handler, [inboxkit.MessageFromContext]),
// orderKey and JMSXGroupID (the key; ActiveMQ pins a group to one
// consumer). An http:// or https:// destination gets a POST of the body
// with Message.Headers, Idempotency-Key (the message id), X-Correlation-ID
// and X-Causation-ID; 2xx confirms, 408, 409, 425, 429 and 5xx are tried
// again (Retry-After is honoured), any other answer (a redirect included)
// parks the message at once.
//
// # Where it sits
//
// outbox is beside package inbox and uses its dialects (inbox.Dialect); it
// links no database driver and no broker adapter: a relay publishes through
// any dlq.Publisher (every adapter of broker/... is one) and wakes on any
// channel (driver/postgres.Listen gives PostgreSQL's notifications).
// inboxctl runs a relay inside `inboxctl run` and alone as `inboxctl
// relay`; `inboxctl outbox list|retry|drop` operate the table, `inboxctl
// migrate` creates it, `inboxctl purge` deletes old SENT rows.
package outbox
