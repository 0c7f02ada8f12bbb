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
// # Packages
//
// Every package of the module, by layer (ARCHITECTURE.md has the arrows
// between them: nothing imports a package listed above it in its table).
// A program imports inbox, consumer, a broker adapter and a driver; the rest
// is for operators, tests and the legacy migration. A test keeps this list
// complete.
//
// The core, which links no database driver and no broker:
//
//   - inboxkit (this package): the vocabulary and the RetryPolicy.
//   - schema: the DDL of the inbox table per dialect, embedded.
//   - dberr: reads a database's error code without linking its driver.
//   - classify: errors as decisions (Reject, Retry, Poison), transient
//     error detection, the in-process retry loop.
//   - classify/breaker: a circuit breaker (its own package, so that inbox
//     and classify do not link gobreaker).
//   - dlq: the dead-letter envelope and the Publisher port.
//   - inbox: the INBOX_EVENT_PROCESSING table, written in the same
//     transaction as the business change (Process, ProcessBatch), the
//     store-then-process Receive and Worker, retention, audit and checks.
//   - outbox: what a transaction sends, written in it (Add) and sent after
//     the commit by a Relay: at least once, with a message id fixed at
//     insert; per key, in commit order; to a broker queue or an HTTP
//     endpoint.
//
// Databases, one package each, imported by a main package:
//
//   - driver: the directory of the four below, and which to import.
//   - driver/postgres, driver/mysql, driver/sqlite, driver/oracle.
//
// The runtime and the brokers:
//
//   - consumer: ties a broker Source to the inbox (ack, requeue, reject
//     queue, dead letter; concurrency, batches, drain, replay).
//   - consumer/consumertest: the conformance suite every adapter runs.
//   - broker/stomp (ActiveMQ Classic), broker/rabbitmq (AMQP 0-9-1),
//     broker/jetstream (NATS JetStream), broker/amqp10 (IBM MQ AMQP
//     channels, Artemis, Service Bus, RabbitMQ's plugin): the adapters, one
//     shape each.
//   - broker/jetstream/embedded: a NATS server with JetStream inside the
//     process (the demo's broker; its own package, so that a program that
//     only consumes JetStream does not link nats-server).
//   - broker/brokerurl: a broker URL to its adapter, for commands only.
//
// Operations:
//
//   - observe: Prometheus metrics, OpenTelemetry spans, health endpoints.
//   - observe/otlp: the OTLP trace exporter, when OTEL_* asks for it.
//
// The legacy migration and the reference consumer:
//
//   - golden: the approval (golden-master) harness, in process and
//     black-box against a running process.
//   - golden/goldentest: the harness inside go test (Run, RunBlackBox).
//   - invoice: the reference invoice consumer; invoice/legacy the legacy
//     bean it replaces, ported faithfully; invoice/invoicegolden both
//     connected to the approval harness.
//   - examples/claims, examples/reportworker: small consumers with their
//     approval cases; examples/noinbox: what to do when an inbox is not
//     the right tool (docs/when-not.md).
//
// Commands:
//
//   - cmd/inboxctl: the command line (demo, migrate, run, relay, outbox,
//     publish, audit, dlq, purge, check, stats, golden, mq lint);
//     cmd/inboxctl/internal/target its URL parsing, cmd/inboxctl/internal/mqsc
//     the IBM MQ queue definitions `mq lint` reads (MQSC text).
//   - cmd/inboxbench: end-to-end throughput on every broker.
//   - cmd/inboxtorture: the torture rig (kill -9, restarts, a ledger).
//
// Internal, for the packages above and their tests:
//
//   - internal/reconnect: the broker session supervision rabbitmq and
//     amqp10 share.
//   - internal/failpoint: kill points for the torture rig (build tag
//     failpoints).
//   - internal/hold: the mark outbox.Store.Add puts on its INSERT so that
//     driver/postgres's DriverName sends it with the transaction's next
//     statement or COMMIT.
//   - internal/dbtest: a fresh database per test on the real servers.
//   - internal/tcpproxy: a loopback proxy that makes a service unreachable
//     or hang, for tests.
//   - internal/protonbroker: Qpid Proton's example broker, the AMQP 1.0
//     peer that settles deliveries itself, for broker/amqp10's tests.
//   - internal/rabbittest: a RabbitMQ queue declared for a test.
//
// The module bench (directory bench, its own go.mod) measures inboxkit
// beside Watermill and raw database/sql; bench/README.md has every figure.
package inboxkit
