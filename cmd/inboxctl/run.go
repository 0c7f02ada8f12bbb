package main

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/internal/failpoint"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/observe"
)

const defaultConsumer = "invoice-consumer"

// newLogger returns the slog logger of run: text or JSON on w.
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("--log-format %q: use text or json", format)
}

// withMessage wraps h with the mid-handler failpoint.
func withMessage(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		err := h(ctx, tx, m)
		failpoint.Hit(failpoint.MidHandler) // business rows written, not committed; no-op unless -tags failpoints
		return err
	}
}

type runFlags struct {
	db           dbFlags
	brokerURL    string
	queue        string
	name         string
	dlq          string
	rejectQueue  string
	concurrency  int
	batch        int
	batchWait    time.Duration
	mode         string
	logFormat    string
	letters      string
	requeueDelay time.Duration
	shutdown     time.Duration
	process      time.Duration
	lease        time.Duration
	eventIDFrom  string
	orderKey     string
	onPoison     string
	logLevel     string
	metricsAddr  string
	noRelay      bool
	relay        relayFlags
	shadow       shadowRunFlags
}

func newRunCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run --db URL --broker URL --queue NAME",
		Short: "Run the invoice consumer until SIGINT/SIGTERM, then drain",
		Long: `run consumes InvoiceCreated events from --queue with the refactored invoice consumer:
each message is processed in one database transaction with its inbox row
(duplicates are acknowledged and do nothing), business rejections are recorded
(and sent to --reject-queue when set), technical failures are retried up to
--max-attempts, then dead-lettered to --dlq with their reason.

On SIGINT or SIGTERM it logs "draining N deliveries", stops taking messages,
finishes those in hand (commit, then acknowledge) and exits: 0 after SIGTERM
(a service manager's stop), 130 after SIGINT (Ctrl-C), as every command does.
If that takes longer than --shutdown-timeout (a hung database connection), the
deliveries still in hand are handed back unacknowledged (the broker delivers
them again), each is logged, and it exits 1 (130 after SIGINT). A second signal
exits at once: 130 for SIGINT, 143 for SIGTERM.
Each message's database work and handler run within --process-timeout: a
database that stops answering while its connection stays open (a partition)
fails the message, which is handed back and delivered again once the database
answers, instead of holding it for as long as the partition lasts.
Every log line carries event_id and correlation_id.

The handler calls nothing outside the database: it writes each letter request to
the outbox table in its transaction, and the relay sends it after the commit to
--letter-service URL (POST, JSON, the letter id as Idempotency-Key; the contract the
golden black-box recorder serves), at least once, until the provider confirms (2xx);
after --relay-max-attempts failed sends it is parked ('inboxctl outbox list
--parked'). Without --letter-service the relay logs each letter request (destination
` + logLetters + `) instead of sending it. A technical failure is redelivered after --requeue-delay, doubling
per attempt up to one minute. With --batch N up to N messages share one database
transaction (closed at N or --batch-wait after its first message), and are
acknowledged after its commit (in store-then-process mode: the workers process
N stored entries per transaction). An outbox relay runs beside the consumer (see
'inboxctl relay'; --relay-* flags) and sends what handlers wrote to the outbox
table after their commits; --no-relay leaves that to 'inboxctl relay' processes. The tables must exist at this build's schema version: run 'inboxctl migrate' first
(run exits 2 with "run inboxctl migrate" otherwise).

With --shadow it is a shadow run beside the legacy consumer (docs/shadow.md): it
consumes only a copy (--queue ending in .shadow; JetStream: --consumer), refuses a
--db that is --production-db, and records every send (letter requests, dead
letters, rejections) in the shadow database's INBOXKIT_SHADOW_CALLS instead of
sending it. Without --shadow, run refuses a shadow database.` + eventIDHelp + orderKeyHelp,
		Example: `  inboxctl run --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
    --broker stomp://127.0.0.1:61613 --queue invoices --dlq DLQ.invoices --log-format json
  inboxctl run --broker stomp://127.0.0.1:61613 --queue invoices \
    --event-id-from header:eventId,json:invoiceNo,header:JMSCorrelationID,message-id
  inboxctl run --shadow --db 'postgres://postgres@127.0.0.1:5432/test?search_path=invoices_shadow&sslmode=disable' \
    --production-db 'postgres://postgres@127.0.0.1:5432/test?search_path=invoices&sslmode=disable' \
    --broker stomp://127.0.0.1:61613 --queue invoices.shadow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.queue == "" {
				return usageErr("run needs --queue NAME, the queue of InvoiceCreated events (e.g. invoices)")
			}
			mode := consumer.Mode(f.mode)
			if mode != consumer.ModeTransactional && mode != consumer.ModeStoreThenProcess {
				return usageErr("--mode %q is unknown: use transactional (the inbox row and the business change in one transaction) or store-then-process (store and acknowledge at once, leased workers process)", f.mode)
			}
			if f.shutdown <= 0 {
				return usageErr("--shutdown-timeout must be positive (got %s): it bounds the drain on SIGTERM", f.shutdown)
			}
			if f.process <= 0 {
				return usageErr("--process-timeout must be positive (got %s): it bounds one message's database work and handler", f.process)
			}
			if f.lease < 0 || (f.lease > 0 && mode != consumer.ModeStoreThenProcess) {
				return usageErr("--lease %s: it is the store-then-process workers' lease on a stored entry (default 30s), so it needs --mode store-then-process and a positive duration", f.lease)
			}
			if f.lease > 0 && f.lease <= f.process {
				return usageErr("--lease %s is not above --process-timeout %s: an entry would be claimed again while its worker still processes it; raise --lease or lower --process-timeout", f.lease, f.process)
			}
			if f.concurrency < 1 {
				return usageErr("--concurrency must be at least 1 (got %d)", f.concurrency)
			}
			if f.batch < 1 {
				return usageErr("--batch must be at least 1 (got %d): 1 is one transaction per message", f.batch)
			}
			if err := f.relay.validate(); err != nil {
				return err
			}
			if f.dlq == "" {
				f.dlq = "DLQ." + f.queue
			}
			if f.shadow.on {
				if err := checkShadowSource(f.brokerURL, f.queue, f.name); err != nil {
					return err
				}
				if f.noRelay {
					return usageErr("--no-relay with --shadow: the shadow run's relay records the outbox's messages in %s; a relay of its own ('inboxctl relay') would send them for real", shadowCallsTable)
				}
			} else if f.shadow.productionDB != "" {
				return usageErr("--production-db is for --shadow runs only")
			}
			eventID, err := parseEventIDFrom(f.eventIDFrom)
			if err != nil {
				return err
			}
			orderKey, err := parseOrderKey(f.orderKey)
			if err != nil {
				return err
			}
			onPoison := consumer.OnPoison(f.onPoison)
			switch {
			case onPoison != consumer.OnPoisonDeadLetter && onPoison != consumer.OnPoisonParkKey:
				return usageErr("--on-poison %q is unknown: use dead-letter (the key goes on after its head is dead-lettered) or park-key (the key waits until an operator replays its dead letters)", f.onPoison)
			case onPoison == consumer.OnPoisonParkKey && orderKey == nil:
				return usageErr("--on-poison park-key parks a key: give --order-key too (e.g. --order-key header:JMSXGroupID)")
			}

			level, err := parseLevel(f.logLevel)
			if err != nil {
				return err
			}
			logger, err := newLogger(cmd.ErrOrStderr(), f.logFormat, level)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if f.requeueDelay <= 0 {
				return usageErr("--requeue-delay must be positive (got %s)", f.requeueDelay)
			}
			// The first redelivery after --requeue-delay, doubling up to 1m.
			f.db.redelivery = inboxkit.Backoff{Initial: f.requeueDelay, Max: max(f.requeueDelay, time.Minute)}
			if f.shadow.on {
				// Before anything else opens --db.
				if err := checkShadowDB(ctx, f.db.url, f.shadow.productionDBURL(), shadowTables(f.db.table, f.relay.outbox.table)); err != nil {
					return err
				}
			}
			st, t, err := f.db.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			var rec *shadowRecorder
			if !hasInvoiceTables(ctx, st.DB()) {
				return usageErr("database %s has no invoice tables (shipping_letters): run inboxctl migrate", t.Display)
			}
			if !f.shadow.on {
				if err := refuseShadowDB(ctx, st.DB(), t, "run"); err != nil {
					return err
				}
			}
			if f.shadow.on {
				if rec, err = newShadowRecorder(ctx, st.DB(), t.Dialect, f.dlq, f.rejectQueue); err != nil {
					return err
				}
				f.relay.send = rec.Send
			}
			b, err := openBroker(f.brokerURL, logger)
			if err != nil {
				return err
			}
			defer b.Close()
			ob, err := f.relay.outbox.open(ctx, st.DB(), t, true)
			if err != nil {
				return err
			}
			letters := logLetters
			if u := orEnv(f.letters, envLetterService); u != "" {
				letters = u
			}
			h, err := invoice.NewHandler(invoice.Config{Dialect: t.Dialect, Outbox: ob, LetterDestination: letters})
			if err != nil {
				return err
			}
			if handlerVariant != nil {
				if !f.shadow.on {
					return usageErr("this inboxctl is a test build with a %s: it runs only with --shadow", handlerVariantName)
				}
				logger.Warn("shadow run with a handler variant", "variant", handlerVariantName)
				h = handlerVariant(h, ob)
			}
			var pub dlq.Publisher = rec // a shadow run publishes nothing: it records
			if rec == nil {
				if pub, err = b.Publisher(ctx); err != nil {
					return err
				}
			}
			o, err := startOps(ctx, f.metricsAddr, f.name, st, b, logger)
			if err != nil {
				return err
			}
			defer o.stop()
			prefetch := runPrefetch(f.concurrency, f.batch, orderKey != nil, mode)
			src, err := b.Source(ctx, f.queue, f.name, prefetch)
			if err != nil {
				return err
			}
			cons, err := consumer.New(consumer.Config{
				Name: f.name, Source: src, Store: st, Handler: withMessage(h), DeadLetter: observe.TracePublisher(pub), DeadLetterQueue: f.dlq,
				// The invoice handler writes only through tx (invoice.NewHandler);
				// a test build's variant declares nothing.
				EffectsInTx: handlerVariant == nil,
				RejectQueue: f.rejectQueue, Concurrency: f.concurrency, BatchSize: f.batch, BatchWait: f.batchWait, Logger: logger, Mode: mode,
				ShutdownTimeout: f.shutdown,
				ProcessTimeout:  f.process,
				LeaseDuration:   f.lease,
				EventIDFunc:     eventID,
				OrderKeyFunc:    orderKey,
				OnPoison:        onPoison,
				Observer:        o.obs,
			})
			if err != nil {
				src.Close()
				return usageErr("%v", err)
			}
			relayCtx, stopRelay := context.WithCancel(ctx)
			defer stopRelay()
			if !f.noRelay {
				r, err := startRunRelay(relayCtx, ob, t, pub, f.relay, o, f.metricsAddr != "", logger)
				if err != nil {
					src.Close()
					return err
				}
				defer func() { stopRelay(); <-r.done }()
			}
			if f.shadow.on {
				logger.Info("shadow run: sends, dead letters and rejections are recorded in "+shadowCallsTable+", never sent", "queue", f.queue, "db", t.Display)
			}
			logger.Info("consumer started", "consumer", f.name, "queue", f.queue, "dlq", f.dlq, "db", t.Display, "shadow", f.shadow.on,
				"broker", b.t.Display, "max_attempts", st.Config().Retry.MaxAttempts, "concurrency", f.concurrency, "batch", f.batch, "mode", f.mode)
			err = cons.Run(ctx)
			if errors.Is(err, consumer.ErrShutdownTimeout) {
				logger.Error("consumer stopped: shutdown timeout", "consumer", f.name, "error", err.Error())
				return &exitError{code: exitFindings, err: err}
			}
			if err != nil {
				return err
			}
			logger.Info("consumer stopped: drained", "consumer", f.name)
			return nil
		},
	}
	f.db.register(c)
	f.db.registerAttempts(c)
	c.Flags().StringVar(&f.brokerURL, "broker", "", "broker URL: stomp://, amqp://, nats:// (default $"+envBroker+")")
	c.Flags().StringVar(&f.queue, "queue", "", "queue (or subject) of InvoiceCreated events (required)")
	c.Flags().StringVar(&f.name, "consumer", defaultConsumer, "consumer name, stored in CONSUMER_NAME")
	c.Flags().StringVar(&f.dlq, "dlq", "", "dead-letter queue (default DLQ.<queue>)")
	c.Flags().StringVar(&f.rejectQueue, "reject-queue", "", "queue for business rejections (default: none, rejections are only recorded)")
	c.Flags().IntVar(&f.concurrency, "concurrency", 1, "messages handled at once (store-then-process: workers, each with four receivers)")
	c.Flags().IntVar(&f.batch, "batch", 1, "messages per database transaction, acknowledged after its commit (store-then-process: the workers' batch)")
	c.Flags().DurationVar(&f.batchWait, "batch-wait", 5*time.Millisecond, "how long a batch waits for more messages after its first (with --batch N)")
	c.Flags().StringVar(&f.mode, "mode", "transactional", "inbox variant: transactional or store-then-process")
	c.Flags().StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	c.Flags().StringVar(&f.letters, "letter-service", "", "letter service URL the relay POSTs the letter requests to (default $"+envLetterService+"; none: the relay logs them)")
	c.Flags().DurationVar(&f.requeueDelay, "requeue-delay", time.Second, "delay before a technical failure is redelivered; doubles per attempt, at most 1m")
	c.Flags().DurationVar(&f.process, "process-timeout", 30*time.Second, "how long one message's (one batch's) database work and handler may take before it is handed back (a database that stopped answering)")
	c.Flags().DurationVar(&f.lease, "lease", 0, "store-then-process: how long a worker holds a stored entry; an entry whose worker died (or lost its database) is claimed again after it; keep it above --process-timeout (default 30s)")
	c.Flags().DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long to finish the messages in hand before handing them back unacknowledged (exit 1)")
	c.Flags().StringVar(&f.eventIDFrom, "event-id-from", "", "where the event id comes from, in order (default: the eventId header); e.g. header:eventId,json:invoiceNo,header:JMSCorrelationID,message-id")
	c.Flags().StringVar(&f.orderKey, "order-key", "", "run each key's messages one at a time in arrival order; the key's sources as --event-id-from's, e.g. header:JMSXGroupID,json:customerNo (default: no order)")
	c.Flags().StringVar(&f.onPoison, "on-poison", string(consumer.OnPoisonDeadLetter), "with --order-key, what a dead-lettered head does to its key: dead-letter (the key goes on) or park-key (its later messages follow it to the DLQ, reason KEY_PARKED, until 'inboxctl dlq replay --key K')")
	c.Flags().StringVar(&f.logLevel, "log-level", "info", "log level: debug (a line per message), info (a summary per minute, outages), warn, error")
	c.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port (e.g. 127.0.0.1:9464; default: off)")
	c.Flags().BoolVar(&f.noRelay, "no-relay", false, "run no outbox relay in this process (run 'inboxctl relay' on its own instead)")
	f.relay.register(c, "relay-")
	f.shadow.register(c)
	return c
}

// runPrefetch is the broker prefetch of `inboxctl run`. Every goroutine
// fills batches of its own: the prefetch covers them all twice, a batch in
// hand and the next on its way (with one, each acknowledgement waits a
// round trip to the broker for the next delivery), up to the most
// RabbitMQ takes; with an order key, all the deliveries the consumer holds
// for their keys; in store-then-process, at least two for each receiver.
func runPrefetch(concurrency, batch int, ordered bool, mode consumer.Mode) int {
	if ordered {
		return consumer.OrderHeld(concurrency, batch)
	}
	n := concurrency * batch
	n = max(n, min(2*n, brokerurl.MaxPrefetch))
	if mode == consumer.ModeStoreThenProcess {
		n = max(n, 2*consumer.DefaultReceivers(concurrency))
	}
	return n
}
