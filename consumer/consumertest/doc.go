// Package consumertest is the broker conformance suite of inboxkit: one set
// of test bodies that every broker adapter runs against its real broker and
// a real database, like watermill's tests.TestPubSub or river's
// riverdrivertest.
//
// # Use
//
// An adapter's test file describes its broker in a [Broker] and calls [Run]:
//
//	func TestConformance(t *testing.T) {
//		consumertest.Run(t, consumertest.Broker{
//			Name:         "activemq",
//			Features:     consumertest.Features{RedeliveredFlag: true},
//			NewSource:    func(t testing.TB, queue string) consumer.Source { ... },
//			NewPublisher: func(t testing.TB) dlq.Publisher { ... },
//		})
//	}
//
// Every body runs as a parallel subtest, per database of Broker.Databases
// (PostgreSQL and SQLite by default, each a fresh schema or file from
// internal/dbtest), on fresh queue names made of the test name and a random
// suffix. Nothing is mocked: a broker or database that is down fails the
// test loudly. Under go test -short the bodies run on the first database
// and batch size only, with at most 200 events (see [Run]).
//
// # The bodies
//
//   - Duplicates: Broker.Events events (default 1,000), 20% of them sent
//     twice under the same eventId as a new broker message, concurrency 4:
//     exactly one business row and one PROCESSED row per event, every
//     duplicate acknowledged, the queue empty.
//   - CrashAfterCommit: the source (its connection) is closed after the
//     inbox commit and before the ACK; the redelivery is a duplicate and
//     there is exactly one business row.
//   - CrashBeforeCommit: the handler closes the source and fails; the
//     redelivery is processed once.
//   - Backout: a handler that always fails technically is dead-lettered after
//     MaxAttempts (3) with the full envelope (reason MAX_ATTEMPTS_EXCEEDED,
//     attempts, consumer, original destination, event and correlation id,
//     error text, first and last failure, original headers, body unchanged).
//   - BackoutAfterCrashes: every delivery kills the consumer (its source is
//     closed inside the handler); the message is still dead-lettered after
//     MaxAttempts, counted by the inbox alone (brokers without a delivery
//     count, like ActiveMQ over STOMP, depend on this).
//   - PoisonAndReject: a malformed body, a missing and an over-long event id
//     go to the DLQ at once with their reason; a business rejection leaves a
//     REJECTED row, no business row, is acknowledged and published to the
//     reject queue.
//   - DeadLetterPublishFails: while the DLQ publisher is broken (closed
//     connection) the original is handed back, never acknowledged away; after
//     the publisher is repaired the message ends in the DLQ.
//   - Replay: a dead letter replayed with consumer.Replay is processed once
//     (status PROCESSED, REPLAY_COUNT 1, one business row).
//   - DatabaseOutage: the database is cut off (a TCP proxy) while a
//     handler runs on each of 4 goroutines and more messages wait, for 3s
//     (INBOXKIT_TEST_OUTAGE sets a longer one): at most 2 × concurrency ×
//     BatchSize hand-backs in the whole run, then every message PROCESSED
//     once with ATTEMPTS 1 after the consumer resumed by itself.
//   - GracefulShutdown: the context is cancelled while slow handlers run;
//     in-flight deliveries finish and are acknowledged; a restarted consumer
//     processes the rest; every event is processed exactly once.
//   - Order: 400 events over 20 keys with a per-key sequence number, in
//     bursts of one key, concurrency 4, one in a hundred failing
//     technically once, run with consumer.Config.OrderKeyFunc: the
//     handler's log shows every key's events in sequence, each once, and
//     ORDER_KEY holds the key.
//   - OrderStoreThenProcess: Order's events in ModeStoreThenProcess (four
//     receivers storing each key in arrival order, four workers claiming
//     only the oldest open entry of a key): the same log; batch size 1
//     only.
//   - OrderWithoutKey: the same events without an order key: the log shows
//     per-key inversions (what Order's zero is measured against); batch
//     size 1 only.
//   - OrderPoisonHoldsItsKey: the head of one key always fails; it is
//     retried in process up to MaxAttempts and dead-lettered, its key's
//     later events run after it in order, other keys run meanwhile.
//   - OrderParkKey: the same with consumer.OnPoisonParkKey: the head
//     dead-lettered, its key's later events follow it to the dead-letter
//     queue in order with reason KEY_PARKED, unprocessed, other keys run;
//     a second consumer (another process) parks a later event of the key
//     by the inbox's state; a replay of the key's dead letters runs all of
//     them in order and the key is no longer parked.
//   - OrderShutdownHandsBack: Run stopped while a key's head waits for its
//     retry returns at once; a restarted consumer processes the held
//     events.
//   - OrderDatabaseOutage: Order's events with a 2s database outage in the
//     middle: every event processed once, in sequence per key, the outage
//     no attempt; batch size 1 only.
//
// Each body logs how many messages it checked.
//
// # Throughput
//
// [Throughput] measures end-to-end messages per second (publish n messages,
// run the consumer with the inbox until all are processed); cmd/inboxbench
// prints it as a table for every broker.
package consumertest
