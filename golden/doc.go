// Package golden is the approval (golden-master) harness: it plays a
// scenario through a consumer on a real database with a scripted broker and
// scripted downstream services, writes a normalized transcript of every
// effect, and compares it with the approved file a person signed off.
// "Erst Verhalten sichern, dann Struktur ändern": pin down what the legacy
// consumer does, refactor, and see every difference as a diff.
//
// # Cases
//
// A case is a directory holding a file named "scenario" and one approved
// transcript per consumer label: approved.txt, or approved.<label>.txt when
// one case is approved for several consumers (golden.Label("legacy"),
// golden.Label("refactored")). Coverage grows by adding a directory.
//
//	func TestInvoice(t *testing.T) {
//		goldentest.Run(t, "testdata/golden", invoicegolden.Refactored(nil), golden.Label("refactored"))
//	}
//
// Package goldentest holds the parts that need package testing (Run,
// RunBlackBox, the -update flag), so that golden itself does not link it.
//
// # Scenario format
//
// Line based; '#' starts a comment line; indented lines belong to the
// message above them.
//
//	queue invoices                 # destination name (default events)
//	max-attempts 3                 # inbox backout threshold (default 3)
//	broker-max-deliveries 5        # the broker's own redelivery limit (default 5)
//	instances 2                    # consumer instances (default 1)
//
//	message inv-1                  # defines a message; the name is not sent
//	  header eventId E-1001        # header NAME VALUE (value: rest of line)
//	  header correlationId C-1
//	  body {"invoiceNo":"INV-1001"} # body TEXT (rest of line; several lines join with \n)
//
//	fail letter-service 2          # the next 2 Env.Call("letter-service") calls fail
//	fail commit 1                  # the next commit fails with a database error
//	crash before-commit            # the next delivery dies right before its commit
//	crash after-commit             # the next acknowledgement is lost after the commit
//	crash during letter-service    # the process dies inside the next letter-service call
//	database down                  # black box only: the database becomes unreachable
//	database up                    # ... and reachable again
//	send inv-1                     # the producer sends; the broker delivers until idle
//	send inv-1 parallel 2          # two copies at once, one to each instance
//	send inv-1 inv-2 inv-1b        # several at once: queued together, first deliveries at one time (fills a batch; in process only)
//	note free text                 # copied into the transcript
//
// The scripted broker redelivers every message that was handed back or never
// acknowledged (Redelivered set, DeliveryCount counted; the first delivery
// vouched as first, as by the adapters: FirstDelivery) until it is settled
// or reached broker-max-deliveries, then moves it to its own dead-letter
// queue, as ActiveMQ does for a legacy consumer without a backout threshold.
// Nothing sleeps: the scenario clock moves one second per delivery.
//
// # Transcript
//
// Per delivery the action (ack, redelivery, reject, dead-letter, crash) with
// the inbox outcome, class, reason and attempts; then the calls to external
// services, the business tables and the inbox table sorted by key, the
// messages published to DLQ.<queue> and <queue>.REJECTED, the broker's
// dead-letter queue, and faults that never triggered. Ids come from
// Env.IDFunc and times from Env.Clock (injected at the source); [Scrub]
// then replaces them with labeled placeholders (<id_1>, <time_1>) so the
// links between values stay visible and every database produces the same
// text.
//
// # Outbox relays
//
// A subject that sends through an outbox (package outbox) gives the runner
// its relay (Subject.Relay): the runner calls it once a send step's
// deliveries settled, never inside a delivery, and again at each retry's
// due time (the clock jumps there) until nothing is due. Its lines
// ("relay after the commit: 1 sent", "1 failed (tried again in 1s)", "1
// parked", a crash inside its call) follow the step's deliveries, its calls
// are marked "[relay, after the commit]", and the outbox table
// (Subject.Outbox) follows the inbox table. A "crash during SERVICE" that
// hits the relay kills the relay alone: it starts again once its claims
// ended (Subject.RelayLease), and sends again with the same key.
//
// # Approving
//
// On a mismatch goldentest.Run writes received[.<label>].txt beside the approved file
// (git ignores it), fails with a unified diff and prints the command that
// approves. go test ./golden/... -update, or INBOXKIT_UPDATE_GOLDEN=1,
// writes approved files. With CI=true approved files are never written and a
// missing one fails. [Verify] and [Approve] do the same without package
// testing, for `inboxctl golden verify|approve DIR`.
//
// # Batches
//
// The option [BatchSize] plays every case with a consumer of that
// consumer.Config.BatchSize against the same approved files: deliveries
// queued together (after "send A B C", or redeliveries) go to
// consumer.HandleBatch as one batch, and the transcript must not change.
// A crash inside a batch takes its neighbours with it (they are not
// acknowledged and come again), so a case that crashes while several
// deliveries are queued is not expected to match; the conformance suite
// checks crashes inside batches on real brokers instead.
//
// # Black-box recording
//
// goldentest.RunBlackBox, [PlayBlackBox], [VerifyBlackBox] and [RecordBlackBox] play
// the same scenario files against a running consumer process instead of a
// Go function (see [BlackBox]): the real legacy bean, as it runs in
// production, recorded from the outside. The recorder publishes to the real
// broker, serves the letter service over HTTP, kills and restarts the
// process for "crash during letter-service", holds the service's calls
// during "send M parallel N" so that competing instances overlap, waits
// until nothing changes (and no outbox message is pending), and snapshots
// the business tables, the inbox and outbox tables (if the process made
// them), the queue, DLQ.<queue> and <queue>.REJECTED.
// Its transcripts are headed by the label (not by BlackBox.Name, so that
// `inboxctl golden record` and a test agree), show no deliveries (a black
// box has none to show) and normalize ids and times to unnumbered <id> and
// <time>. A JMS bean is told the broker's OpenWire address
// (BlackBox.OpenWire; derived only for ActiveMQ's default ports) and every
// recording logs what its processes were told (BlackBox.Log); messages
// that wait on the queue with no sign of life from running instances fail
// the recording after BlackBox.Stall, naming that address and the queue. Steps that need a
// hook inside the process (crash before-commit, crash after-commit, fail
// commit) are refused; "database down" / "database up" cut and restore the
// recorder's TCP proxy between the process and PostgreSQL (the shared
// server is never touched) and exist only for black-box recordings. `inboxctl golden record --black-box --exec CMD DIR`
// is the command line.
//
// # Reconciliation
//
// [Reconcile] compares what the legacy consumer did in production with
// what the refactored one did as a shadow on a copy of the same messages
// (`inboxctl shadow diff`): per event, the rows of the effects a
// [ReconcileConfig] names (business tables, calls as recorded, the
// outcome), formatted as the transcript's table cells, noise scrubbed
// (`--calibrate` finds it by comparing two legacy copies). Every event is
// identical, expected (a built-in rule, [BuiltinRules], or the config's)
// or unexpected. Each side's effects are streamed ordered by key and
// merged: memory holds one event. docs/shadow.md describes the config.
//
// # Databases
//
// SQLite by default. INBOXKIT_GOLDEN_BACKENDS lists the databases to play
// every case on (sqlite, postgres, mysql; CI=true plays all three):
// "postgres" in a fresh schema on INBOXKIT_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), "mysql" in a
// fresh database on the MariaDB or MySQL server of INBOXKIT_TEST_MYSQL
// (default root@tcp(127.0.0.1:3306)/). Every backend must produce the
// approved transcript.
package golden
