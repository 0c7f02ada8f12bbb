// Package consumer is the runtime of an idempotent consumer: it receives
// deliveries from a broker [Source], runs the inbox transaction around the
// [Handler], and settles every delivery according to the result.
//
// # Per delivery
//
//  1. The event id is read from a header (Config.EventIDHeader, default
//     "eventId") — never the broker's message id, which changes on a resend.
//     The correlation id comes from "correlationId", else the broker's own
//     "correlation-id" (JMSCorrelationID).
//  2. [inbox.Store.Process] runs the handler in one transaction with the
//     inbox row.
//  3. The delivery is settled, only after the commit, as follows.
//
// Settlement:
//
//	processed, duplicate      Ack
//	business rejection        the store publishes to Config.RejectQueue (if
//	                          set) before its commit, then Ack
//	technical failure         Requeue with a delay (the store's Retry.Redelivery,
//	                          or the error's RetryAfter)
//	poison, backout reached   the store publishes the envelope to the DLQ
//	                          while its DEAD_LETTERED write holds the row,
//	                          commits after the publish, then Ack
//	inbox unreachable,        Requeue: nothing is acknowledged that is not
//	DLQ publish failed        recorded, nothing is lost
//
// The consumer publishes nothing itself: New hands Config.DeadLetter and
// Config.Rejects to the store (inbox.Store.WithPorts), whose letter
// protocol is the same in both modes.
//
// # Modes
//
// New chooses the mode's engine once: ModeTransactional (transactional.go)
// runs the inbox transaction around the handler while the delivery is in
// hand; ModeStoreThenProcess (storethenprocess.go) stores and acknowledges
// at once, and its leased workers (inbox.Worker) process the stored
// entries. A new entry without an order key is stored already claimed by
// one of the workers and handed to it in process (inbox.Worker.Receive
// and Hand): no claim transaction and no poll stands between the store
// and the handler; the receivers that store at the same moment (more than
// three at once) share one INSERT; and a worker processes up to
// Config.BatchSize of the entries waiting for it in one transaction. The
// workers' poll (WorkerPollInterval) finds the rest: keyed entries in their
// key's turn, retries that are due, and entries whose lease expired (a
// process that died between the store and the handler). Both report to
// the one [Observer].
//
// # Concurrency and shutdown
//
// [Consumer.Run] uses Config.Concurrency goroutines (in store-then-process
// mode Config.Receivers receivers, four per worker by default, and
// Config.Concurrency workers). When its context is
// cancelled it stops receiving, finishes the deliveries in hand (they
// commit and are acknowledged), and closes the source. Messages not yet
// received stay on the broker.
//
// With Config.BatchSize above 1 (transactional mode) each goroutine
// gathers up to BatchSize deliveries (closing the batch after
// Config.BatchWait) and hands them to [Consumer.HandleBatch]: one
// [inbox.Store.ProcessBatch] transaction, then each delivery settled as
// above, acknowledgements only after the commit. A batch that does not
// commit is handed back whole.
//
// # Batches without savepoints
//
// Each delivery of a batch runs behind a savepoint, so that one failure
// rolls back only its own writes. A consumer whose handler's effects are
// all in the inbox transaction (its writes through tx, no call to another
// service, messages through an outbox: outbox.Store.Add) declares it with
// Config.EffectsInTx, and its batches run without savepoints: the batch
// commits when every handler succeeded; when one does not, the
// transaction is rolled back whole and the batch runs again with
// savepoints, to the same outcomes, rows and acknowledgements (in both
// modes: the workers' batches too). The neighbours' handlers then run
// twice, the first time without a trace in the database, which is why
// the declaration is the consumer's and never guessed: a handler that
// calls a service or publishes would do it twice. See docs/variants.md,
// "Batches".
//
// # Order per key
//
// With Config.OrderKeyFunc (ParseOrderKey: the sources of the event id)
// the deliveries of one key run one at a time, in the order Run received
// them, and different keys concurrently up to Concurrency; a batch holds
// at most one delivery of a key. Run then takes deliveries in with one
// receiver and holds at most OrderHeld(Concurrency, BatchSize) of them
// (set the broker's prefetch to that). A delivery of key K that the
// runtime would hand back (a technical failure, an outcome not recorded)
// is held instead, unacknowledged, and run again in process after the
// requeue's delay, while K's later deliveries wait unacknowledged: so none
// of them overtakes it. Its attempts are counted as for a redelivery; at
// the backout threshold it is dead-lettered and K goes on (with
// Config.OnPoison OnPoisonParkKey, K is parked instead: its later
// deliveries follow the head to the dead-letter queue with reason
// KEY_PARKED until an operator replays the key); the other keys flow
// meanwhile. When Run stops, what is held is handed back, each key's
// in the order received (a PlaceKeeper left unacknowledged for the
// Source's Close, which returns it at its place). The order holds within
// one process, and across processes where the broker gives a key to one
// consumer at a time. In ModeStoreThenProcess the same receiver stores a
// key's deliveries one at a time in arrival order, and the workers (of
// every process) claim a keyed entry only while it is the oldest open
// entry of its key (inbox.Worker.Claim), so no two workers hold one key,
// also after a lease expires. See docs/order.md.
//
// While Config.PausedFunc returns true (for example a circuit breaker's
// Open), no new delivery is taken.
//
// # Outages
//
// A delivery handed back because the runtime failed (the inbox's database
// or the dead-letter queue unreachable) begins an outage: intake stops on
// every goroutine, so the deliveries in hand are handed back once and the
// others stay on the broker, instead of coming back as fast as the broker
// redelivers them. The consumer probes with the store's Retry.Redelivery
// backoff (the database's Ping, and Ready of publishers that are a
// [Readier]); when they answer, one trial delivery (one batch) is taken,
// and once it is settled without a runtime error intake resumes by
// itself. The log says when the outage began, once per
// Config.SummaryInterval that it lasts, and when it ended; the summary
// counts the hand-backs (handed_back) apart from the settled deliveries.
//
// A database that stops answering while its connections stay open (a
// network partition, a hung server) raises no error by itself: every
// delivery's database work and handler run within Config.ProcessTimeout,
// so the delivery in hand fails when it passes and the outage above
// begins. The delivery is handed back; its attempt is taken back where the
// database answers in time for that (so that a partition does not use up
// a message's attempts).
//
// # Replay
//
// [Replay] moves dead letters back to their original destination with the
// same event id, resetting their inbox rows so they are processed once more.
//
// # Writing an adapter
//
// A broker adapter implements [Source] and [Delivery] (and dlq.Publisher,
// [Readier] for readiness checks and [Prefetcher] for New's check of the
// prefetch), in the shape of the adapters in
// broker/: Open(ctx, Config) returns an *Adapter that is all of them. The
// contract is on the interfaces; the conformance suite in
// consumer/consumertest checks it against a real broker.
package consumer
