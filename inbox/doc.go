// Package inbox is the INBOX_EVENT_PROCESSING table: an idempotent consumer's
// memory of which events it has processed, written in the same transaction
// as the business change.
//
// Brokers deliver at least once. A consumer that crashes after its database
// commit and before its acknowledgement gets the same message again; a
// producer that resends after a timeout sends the same event twice. The
// inbox makes the second delivery harmless: the primary key (EVENT_ID,
// CONSUMER_NAME) rejects the second row, so the business change runs once.
//
// # Processing one message
//
// [Store.Process] takes an [Entry] (event id, consumer name, correlation id,
// payload hash, the broker's redelivery flag and count) and a [Handler]. It
// first commits an attempt marker (the row as TECHNICAL_FAILURE with
// ATTEMPTS raised by one), then in one transaction moves the row to
// PROCESSED and runs the handler; both commit or neither does. A broker's
// first delivery (Entry.FirstDelivery) skips the marker: its transaction
// inserts the row as PROCESSED and runs the handler, the statements of a
// hand-written inbox. What happened comes back as a [Result]:
//
//	PROCESSED      the handler committed with the row          acknowledge
//	DUPLICATE      the row was terminal already; its status    acknowledge
//	STORED         a store-then-process entry (RECEIVED,        acknowledge; a worker
//	               IN_PROGRESS) was there already               processes it
//	REJECTED       business rejection: handler writes rolled    acknowledge, never retry
//	               back, REJECTED recorded by its own UPDATE
//	RETRY          technical failure: rolled back, then         hand back to the broker
//	               TECHNICAL_FAILURE recorded in its own tx
//	DEAD_LETTER    poison, Retry.MaxAttempts reached, or a row  with ports: published,
//	               in a status the state machine does not know  acknowledge; without:
//	               (UNKNOWN_STATUS: see Adopted tables)         publish, MarkDeadLettered,
//	                                                            acknowledge
//
// The class of a handler error is read with Config.ClassifyFunc
// (classify.Of by default: the error's own decision, else the database
// condition it reports, such as DEADLOCK).
//
// # Rules the store keeps
//
//   - Duplicates are detected by the primary key, never by a SELECT
//     first: on PostgreSQL and SQLite an INSERT whose ON CONFLICT
//     (EVENT_ID, CONSUMER_NAME) DO NOTHING skipped the row (a first
//     delivery, a store-then-process receipt), else 23505 or
//     SQLITE_CONSTRAINT_PRIMARYKEY; MySQL/MariaDB 1062 or its ON
//     DUPLICATE KEY UPDATE; Oracle ORA-00001.
//   - Every transition is one INSERT or one conditional UPDATE (WHERE STATUS =
//     expected). A row is read only to report or route after such a
//     statement decided.
//   - A technical failure is recorded in its own transaction, so the
//     handler's rollback cannot erase it.
//   - An attempt is counted by a marker committed before the handler runs.
//     A message that kills the process therefore reaches the backout
//     threshold even when the broker never counts (ActiveMQ over STOMP after
//     a crash): after Retry.MaxAttempts attempts the result is DEAD_LETTER without
//     running the handler again. The broker's redelivery flag and delivery
//     count are not attempt counts (they also count deliveries handed back
//     while the database was down) and are not used to count. A first
//     delivery the broker vouches for runs without a marker (no handler
//     can have run for it before); what that gives up is stated at
//     [Store.Process], under "The first delivery".
//   - A delivery handed back because the database, the inbox or the DLQ was
//     unreachable never counts: Process takes its marker back when it
//     returns an error ([Store.ForgetAttempt]; when the database is still
//     unreachable the Store remembers and does it before the event's next
//     attempt). Deliveries of one event in one process take turns.
//   - Failures whose decision says NoAttempt (an open circuit breaker) do
//     not raise ATTEMPTS: an outage downstream does not dead-letter the queue.
//   - A message without an event id, with one longer than the column, or
//     with one holding a NUL byte or invalid UTF-8, is never processed:
//     DEAD_LETTER with MISSING_EVENT_ID, EVENT_ID_TOO_LONG or
//     INVALID_EVENT_ID.
//   - A value of the message the database refuses in the inbox's own
//     statements (a data exception, classify.ValueReason: text it cannot
//     store, a value longer than a legacy table's column) is the message's
//     fault, not an outage: DEAD_LETTER, POISON, with INVALID_ENCODING,
//     VALUE_TOO_LONG or INVALID_VALUE. Only the other errors of the
//     database (unreachable, too many connections, read-only, shutting
//     down) are returned as errors, for the delivery to be handed back.
//
// # Batches
//
// [Store.ProcessBatch] processes up to N deliveries in one database
// transaction, for throughput: the attempt markers of the batch commit
// together (a batch of first deliveries has none: its transaction starts
// with one INSERT of all their rows), then every handler runs behind its
// own savepoint in one business transaction, and one commit records them
// all. Each item's [Result] is what Process would have returned for it; a
// rejection, a poison message or a technical failure rolls back only its
// own writes and never fails its neighbours. When the commit fails the
// whole batch is handed back, and no attempt counts for the handlers that
// succeeded. The same event twice in one batch runs once (the second is a
// duplicate). WorkerConfig.BatchSize does the same for the
// store-then-process [Worker].
//
// A handler whose effects are all in the transaction (its writes through
// tx, no call to another service; messages through an outbox) may say so:
// [BatchItem].EffectsInTx, WorkerConfig.EffectsInTx. A batch whose running
// handlers all say so runs them without a savepoint each and commits when
// every one succeeded; when one does not, the transaction is rolled back
// whole and the batch runs again with savepoints, so its results and rows
// are those above. The store never guesses it. For one delivery the
// declaration is [Store.ProcessInTx]: a first delivery's INSERT may then
// wait for the handler's first statement (one round trip fewer through
// driver/postgres's DriverName), and a duplicate's handler is rolled back.
//
// # One engine
//
// A single delivery is a batch of one. One engine (engine.go) marks, runs
// and records the deliveries of Process, ProcessBatch, Worker.Process and a
// worker's batches, with one job type and the decision table of
// decide.go; alone it takes its fast paths (the one-statement marker, no
// savepoint, a first delivery's single INSERT). Where the pool's driver
// connections can (driver/postgres's DriverName), a delivery alone sends
// its marker, committed on its own, and the BEGIN and claim of its
// business transaction in one round trip; a marker that does not count
// (a duplicate, an exhausted row) then costs a second one, the rollback of
// that claim. A first delivery whose INSERT found the event's row (a
// producer's resend) reads the row: there with its transaction's rollback,
// in one round trip; through other drivers in its transaction first. A
// processed or rejected event is then a duplicate without the marker,
// its row neither locked nor written; any other row takes the marker.
//
// # Dead letters and rejections
//
// A Store derived with [Store.WithPorts] publishes what it dead-letters,
// and the rejections of a reject queue, itself, in both variants, by one
// protocol: the row is recorded (DEAD_LETTERED, REJECTED) in a
// transaction, the envelope (package dlq) published while that write holds
// the row, and the transaction committed only after the publish; a failed
// publish records nothing and gives the attempt back. So a message is in
// the dead-letter queue once per event, however many of its deliveries
// arrive at once. Package consumer hands its publishers to the store so.
//
// # Adopted tables
//
// A legacy table brings rows the state machine does not know: statuses of
// its own (FAILED, a lower-case processed; compared byte for byte, on a
// MySQL table with a case-blind collation too) and RECEIVED or IN_PROGRESS
// rows that no store-then-process receiver wrote (no payload hash, no
// lease: a legacy bean's unfinished work). Only a terminal row makes a
// delivery a duplicate, so such a row is never acknowledged silently: every
// path (Process, ProcessBatch, the first-delivery path, Receive) reports
// OutcomeDeadLetter with reason UNKNOWN_STATUS and an
// [*UnknownStatusError] naming the fix, without running the handler or
// counting an attempt, and the dead letter (the letter protocol,
// [Store.MarkDeadLettered]) leaves the row as it is. [MigrateDB] lists such values ([UnknownStatusesError], with the rows
// of each) and changes nothing until [MigrateDBWith] maps each one
// (MigrateOptions.MapStatus, to one of [MappableStatuses]), after the steps
// and under the same lock, recording every pair in INBOXKIT_HISTORY
// ([Store.StatusMappings]). [Store.UnknownStatuses] and
// [Store.UnknownStatusRows] find them at any time.
//
// [Store.Baseline] is when Migrate first ran on the table: rows older than
// it are the legacy consumer's (inboxctl check and audit tell them apart).
// [Store.ForReading] reads a table Migrate has not upgraded yet, the seed
// table included, for the read-only queries.
//
// # Retention
//
// [Store.Purge] deletes terminal rows (PROCESSED, REJECTED, DEAD_LETTERED)
// older than a window, by PROCESSED_AT (CREATED_AT where a legacy consumer
// left none), in bounded batches of short transactions. It refuses a window
// shorter than Config.RedeliveryHorizon (default 7 days), and never deletes
// TECHNICAL_FAILURE rows: their message is still expected. It runs beside
// live consumers at no more than PurgeOptions.MaxRowsPerSecond (default
// 150,000), pausing between batches, so that the write-ahead log it writes
// leaves them their throughput. Every run that deleted rows is recorded in
// INBOXKIT_HISTORY ([Store.PurgeRuns]: its time, cutoff, window and
// horizon), so that a duplicate it let through can be tied to it. It
// deletes the rows of [AttemptTable] of the events it deletes with them.
//
// # Audit and replay
//
// [Store.ByCorrelation] lists every row of a correlation id, oldest first;
// [Store.Get] reads one. [Store.ResetForReplay] prepares a dead-lettered row
// for a replay from the DLQ (REPLAY_COUNT keeps the trace).
// [Store.Attempts] is an event's history: each failure verdict recorded
// (technical failure, rejection, dead letter) is a row of [AttemptTable],
// written in the transaction that records it; a success writes none, a
// replay keeps them.
//
// # Databases
//
// Dialects: [Postgres] (pgx stdlib), [MySQL] (MariaDB 10.6+ and MySQL 8,
// go-sql-driver/mysql with parseTime=true&loc=UTC&time_zone='+00:00', and
// interpolateParams=true for one round trip a statement),
// [SQLite] (modernc.org/sqlite, pure Go; open with WAL, a busy timeout and
// _txlock=immediate), and [Oracle] (go-ora or godror; statements and error
// mapping only: no Oracle server is available to test it).
//
// This package links no database driver: a program imports the package of
// each database it uses (see package driver, which also says when the plain
// driver is enough). Duplicates are recognised by the database's error code,
// read without the driver (package dberr). [New] refuses [MySQL] with
// [ErrDriverNotLinked], naming the import, when driver/mysql is not linked,
// rather than let duplicates through (rule 1 of ARCHITECTURE.md).
// The DDL lives in package schema and is applied by [Store.Migrate].
//
// Note for MariaDB/MySQL: any DDL statement commits the open transaction
// implicitly, the inbox row with it. A handler must never run DDL.
package inbox
