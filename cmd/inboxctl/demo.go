package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/invoice/legacy"
	"github.com/inboxkit/inboxkit/outbox"
)

// demoEvent is one message of the demo's scripted invoice stream.
type demoEvent struct {
	eventID, corr, note string
	body                string
}

func invoiceBody(inv, cust, amount string) string {
	return fmt.Sprintf(`{"invoiceNo":%q,"customerNo":%q,"amount":%q,"currency":"EUR","issuedAt":"2026-01-05"}`, inv, cust, amount)
}

const (
	demoQueue      = "invoices"
	demoDLQ        = "DLQ.invoices"
	demoCrashEvent = "ev-1003"
	demoOutageInv  = "INV-1006"
	demoOutage     = 2 // failed sends of INV-1006 before the letter service is back
	demoAuditCorr  = "order-6"
)

var demoStream = []demoEvent{
	{"ev-1001", "order-1", "new invoice", invoiceBody("INV-1001", "K-100", "120.50")},
	{"ev-1001", "order-1", "producer resend (same event id)", invoiceBody("INV-1001", "K-100", "120.50")},
	{"ev-1002", "order-2", "new invoice", invoiceBody("INV-1002", "K-200", "80.00")},
	{"ev-1003", "order-3", "consumer crashes after commit, before ack: redelivered", invoiceBody("INV-1003", "K-100", "42.00")},
	{"ev-1004", "order-4", "unknown customer K-999", invoiceBody("INV-1004", "K-999", "10.00")},
	{"ev-1005", "order-5", "malformed message", `{"invoiceNo": "INV-1005", "amount": 12.5,`},
	{"ev-1006", "order-6", "letter service down for the first 2 sends", invoiceBody("INV-1006", "K-200", "99.90")},
}

// demoLetters is the demo's letter service: it deduplicates by idempotency
// key (as a real provider does) and fails the first sends of one invoice.
type demoLetters struct {
	mu     sync.Mutex
	keys   map[string]bool
	fails  map[string]int
	sent   int
	outage int
}

func newDemoLetters() *demoLetters {
	return &demoLetters{keys: map[string]bool{}, fails: map[string]int{}, outage: demoOutage}
}

func (l *demoLetters) Send(_ context.Context, letter invoice.Letter, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if letter.InvoiceNo == demoOutageInv && l.fails[letter.InvoiceNo] < l.outage {
		l.fails[letter.InvoiceNo]++
		return fmt.Errorf("letter service unavailable (HTTP 503), outage %d of %d", l.fails[letter.InvoiceNo], l.outage)
	}
	if key != "" && l.keys[key] {
		return nil
	}
	if key != "" {
		l.keys[key] = true
	}
	l.sent++
	return nil
}

// send is the relay's send of a letter request: the same service, keyed by
// the request's message id (the letter id).
func (l *demoLetters) send(ctx context.Context, m outbox.Outgoing) error {
	var r invoice.LetterRequest
	if err := json.Unmarshal(m.Body, &r); err != nil {
		return err
	}
	return l.Send(ctx, invoice.Letter{LetterID: r.LetterID, InvoiceNo: r.InvoiceNo}, m.ID)
}

func (l *demoLetters) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// crashSource drops the first acknowledgement of one event id, as a
// consumer that dies between its commit and its ack: the broker redelivers.
type crashSource struct {
	consumer.Source
	eventID string
	once    sync.Once
}

type crashDelivery struct {
	consumer.Delivery
	crash bool
}

func (d crashDelivery) Ack(ctx context.Context) error {
	if d.crash {
		return errors.New("simulated crash after commit: the ack never reached the broker")
	}
	return d.Delivery.Ack(ctx)
}

func (s *crashSource) Receive(ctx context.Context) (consumer.Delivery, error) {
	d, err := s.Source.Receive(ctx)
	if err != nil {
		return nil, err
	}
	crash := false
	if d.Message().Header("eventId") == s.eventID {
		s.once.Do(func() { crash = true })
	}
	return crashDelivery{Delivery: d, crash: crash}, nil
}

func newDemoCmd() *cobra.Command {
	var dir string
	var verbose bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run the zero-setup demo: embedded JetStream, SQLite, a scripted invoice stream",
		Long: `demo needs nothing installed. It starts a NATS JetStream server inside the process and
uses SQLite files in a fresh temporary directory (--dir keeps them), publishes a
scripted invoice stream — a producer resend, a redelivery after a crash, an unknown
customer, a malformed message, a letter-service outage — and runs the refactored
invoice consumer on it. It prints the outcome of every event, the dead-letter queue,
the audit of one correlation id, and how many letters the legacy consumer would
have sent for the same deliveries.`,
		Example: `  go run ./cmd/inboxctl demo
  inboxctl demo --dir ./demo-data    # keep the SQLite files and the JetStream store`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), dir, verbose)
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "keep the demo's files in this directory (default: a temporary directory, removed)")
	c.Flags().BoolVar(&verbose, "verbose", false, "also print the consumer's log")
	return c
}

func runDemo(ctx context.Context, out io.Writer, dir string, verbose bool) error {
	start := time.Now()
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	where, kept := "files kept in "+dir, dir != ""
	if dir == "" {
		where = "temporary files removed; keep them with --dir"
		tmp, err := os.MkdirTemp("", "inboxctl-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageErr("--dir %s: %v", dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "inbox.db")); err == nil {
			return usageErr("--dir %s already holds a demo (inbox.db): choose an empty directory", dir)
		}
	}
	logOut := io.Discard
	if verbose {
		logOut = out
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil))

	step("starting an embedded NATS JetStream server (store in %s)", filepath.Join(dir, "jetstream"))
	b, err := openBroker("embedded:"+filepath.Join(dir, "jetstream"), logger)
	if err != nil {
		return err
	}
	defer b.Close()
	b.AckWait = time.Second

	step("creating the inbox and invoice tables in %s", filepath.Join(dir, "inbox.db"))
	st, db, err := demoDB(ctx, filepath.Join(dir, "inbox.db"), inbox.Config{ClassifyFunc: classify.Of, Retry: inboxkit.RetryPolicy{
		MaxAttempts: 5, Redelivery: inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond},
	}})
	if err != nil {
		return err
	}
	defer db.Close()

	pub, err := b.Publisher(ctx)
	if err != nil {
		return err
	}
	step("publishing %d messages to %s", len(demoStream), demoQueue)
	fmt.Fprintf(out, "    %-8s %-12s %s\n", "EVENT", "CORRELATION", "WHAT HAPPENS")
	for _, ev := range demoStream {
		h := map[string]string{"eventId": ev.eventID, "correlationId": ev.corr}
		if err := pub.Publish(ctx, demoQueue, h, []byte(ev.body)); err != nil {
			return err
		}
		fmt.Fprintf(out, "    %-8s %-12s %s\n", ev.eventID, ev.corr, ev.note)
	}

	step("running the refactored invoice consumer (inbox + classification + DLQ)")
	deliveryLine := func(event, outcome, status, action string) {
		fmt.Fprintf(out, "    %-8s %-12s %-18s %s\n", event, outcome, status, action)
	}
	deliveryLine("EVENT", "OUTCOME", "INBOX STATUS", "BROKER ACTION")
	letters := newDemoLetters()
	ob, err := outbox.New(db, inbox.SQLite, outbox.Config{})
	if err != nil {
		return err
	}
	if _, err := ob.Migrate(ctx); err != nil {
		return err
	}
	h, err := invoice.NewHandler(invoice.Config{Dialect: inbox.SQLite, Outbox: ob, LetterDestination: "https://letters.example/v1/letters"})
	if err != nil {
		return err
	}
	src, err := b.Source(ctx, demoQueue, defaultConsumer, 4)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	settled := map[string]int{}
	done := make(chan struct{}, 1)
	cons, err := consumer.New(consumer.Config{
		Name: defaultConsumer, Source: &crashSource{Source: src, eventID: demoCrashEvent}, Store: st, Handler: h,
		DeadLetter: pub, DeadLetterQueue: demoDLQ, Concurrency: 2, Logger: logger,
		Observer: consumer.ObserveSettled(func(s consumer.Settled) {
			what := string(s.Action)
			if s.Err != nil {
				what += ": " + s.Err.Error()
			} else if s.Result.Reason != "" {
				what += " (" + s.Result.Reason + ")"
			}
			deliveryLine(orDash(s.Message.ID), string(s.Result.Outcome), string(s.Result.Status), what)
			mu.Lock()
			if s.Action != inboxkit.ActionRequeue {
				settled[s.Message.ID]++
			}
			total := 0
			for _, n := range settled {
				total += n
			}
			mu.Unlock()
			if total >= len(demoStream)+1 { // + the redelivery after the crash
				select {
				case done <- struct{}{}:
				default:
				}
			}
		}),
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- cons.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		stop()
		if err := <-runErr; err != nil {
			return fmt.Errorf("demo: the consumer did not settle every message within 30s: %w", err)
		}
		return errors.New("demo: the consumer did not settle every message within 30s")
	case <-ctx.Done():
		stop()
		if err := <-runErr; err != nil {
			return err
		}
		return ctx.Err()
	}
	stop()
	if err := <-runErr; err != nil {
		return err
	}

	fmt.Fprintln(out)
	step("the outbox relay sends the letter requests after the commits (letter id = Idempotency-Key)")
	if err := demoRelay(ctx, out, ob, letters, logger); err != nil {
		return err
	}

	fmt.Fprintln(out)
	step("summary: the inbox table")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tCORRELATION\tSTATUS\tREASON\tATTEMPTS")
	seen := map[string]bool{}
	for _, ev := range demoStream {
		if seen[ev.corr] {
			continue
		}
		seen[ev.corr] = true
		recs, err := st.ByCorrelation(ctx, ev.corr)
		if err != nil {
			return err
		}
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.EventID, r.CorrelationID, r.Status, orDash(r.ReasonCode), r.Attempts)
		}
	}
	tw.Flush()

	fmt.Fprintln(out)
	step("the dead-letter queue %s", demoDLQ)
	ms, err := b.Browse(ctx, demoDLQ, 100)
	if err != nil {
		return err
	}
	es := make([]dlqEntry, 0, len(ms))
	for _, m := range ms {
		es = append(es, dlqEntryOf(m))
	}
	printDLQ(out, demoDLQ, es)

	fmt.Fprintln(out)
	step("audit of correlation id %s", demoAuditCorr)
	recs, err := st.ByCorrelation(ctx, demoAuditCorr)
	if err != nil {
		return err
	}
	rows, err := auditRows(ctx, st, recs)
	if err != nil {
		return err
	}
	printAudit(out, "correlation id "+demoAuditCorr, rows)

	fmt.Fprintln(out)
	step("the legacy consumer on the same deliveries (%s)", filepath.Join(dir, "legacy.db"))
	legacySent, legacyRows, err := demoLegacy(ctx, filepath.Join(dir, "legacy.db"))
	if err != nil {
		return err
	}
	var inboxRows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM shipping_letters`).Scan(&inboxRows); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tLEGACY MDB\tINBOXKIT")
	fmt.Fprintf(tw, "letters sent\t%d\t%d\n", legacySent, letters.count())
	fmt.Fprintf(tw, "shipping_letters rows\t%d\t%d\n", legacyRows, inboxRows)
	tw.Flush()
	fmt.Fprintf(out, "\n4 invoices deserve a letter. demo finished in %s; %s\n", time.Since(start).Round(10*time.Millisecond), where)
	fmt.Fprintln(out)
	printDemoNextSteps(out, dir, kept)
	return nil
}

// printDemoNextSteps prints the commands that look at what the demo left:
// check on the legacy database finds the legacy bean's double letters,
// the same check on the inbox database finds none.
func printDemoNextSteps(out io.Writer, dir string, kept bool) {
	fmt.Fprintln(out, "==> next steps")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if !kept {
		dir = "demo-data"
		fmt.Fprintf(tw, "    inboxctl demo --dir %s\t# keep the databases and the JetStream store, then:\n", dir)
	}
	legacyDB, inboxDB := "sqlite:"+filepath.Join(dir, "legacy.db"), "sqlite:"+filepath.Join(dir, "inbox.db")
	fmt.Fprintf(tw, "    inboxctl check --db %s\t# the legacy bean's double letters: FOUND duplicate-letters, exit 1\n", legacyDB)
	fmt.Fprintf(tw, "    inboxctl check --db %s\t# the inbox consumer's tables: no findings\n", inboxDB)
	fmt.Fprintf(tw, "    inboxctl audit --db %s --correlation-id %s\t# one business case, row by row\n", inboxDB, demoAuditCorr)
	fmt.Fprintf(tw, "    inboxctl dlq list --broker embedded:%s --queue %s\t# the dead letter, with its reason\n", filepath.Join(dir, "jetstream"), demoDLQ)
	tw.Flush()
}

// demoDB opens (creating) a SQLite file with the inbox and invoice tables
// and the demo customers.
func demoDB(ctx context.Context, path string, cfg inbox.Config) (*inbox.Store, *sql.DB, error) {
	db, err := sql.Open("sqlite", target.SQLiteDSN(path))
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(4)
	st, err := inbox.New(db, inbox.SQLite, cfg)
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err == nil {
		err = invoice.Migrate(ctx, db, "sqlite")
	}
	if err == nil {
		err = invoice.SeedCustomers(ctx, db, inbox.SQLite)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return st, db, nil
}

// demoRelay sends what the consumer wrote to the outbox (the letter
// service fails the first sends of one invoice: tried again after 100ms,
// doubling) and prints each request with what became of it.
func demoRelay(ctx context.Context, out io.Writer, ob *outbox.Store, letters *demoLetters, logger *slog.Logger) error {
	relay, err := outbox.NewRelay(ob, outbox.RelayConfig{SendFunc: letters.send, Logger: logger,
		Retry: inboxkit.RetryPolicy{MaxAttempts: 5, Redelivery: inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}}})
	if err != nil {
		return err
	}
	for {
		d, err := relay.Drain(ctx)
		if err != nil {
			return err
		}
		if d.NextDue.IsZero() {
			break
		}
		select {
		case <-time.After(time.Until(d.NextDue)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rows, err := ob.List(ctx, outbox.ListOptions{Statuses: []outbox.Status{outbox.StatusPending, outbox.StatusSent, outbox.StatusParked}})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    EVENT\tLETTER\tSTATUS\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\t%s\n", r.CauseEventID, r.ID, r.Status, r.Attempts, orDash(r.LastError))
	}
	return tw.Flush()
}

// demoLegacy feeds the legacy MDB the deliveries the broker would make: the
// same stream, the crash redelivery, and a redelivery after every thrown
// exception up to ActiveMQ's default of 6 redeliveries.
func demoLegacy(ctx context.Context, path string) (sent, rows int, err error) {
	_, db, err := demoDB(ctx, path, inbox.Config{})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	letters := newDemoLetters()
	mdb, err := legacy.New(legacy.Config{DB: db, Dialect: inbox.SQLite, Letters: letters})
	if err != nil {
		return 0, 0, err
	}
	const maxRedeliveries = 6
	var deliveries []demoEvent
	for _, ev := range demoStream {
		deliveries = append(deliveries, ev)
		if ev.eventID == demoCrashEvent {
			deliveries = append(deliveries, ev) // the redelivery after the crash
		}
	}
	for _, ev := range deliveries {
		m := inboxkit.Message{ID: ev.eventID, CorrelationID: ev.corr, Body: []byte(ev.body), Destination: demoQueue,
			Headers: map[string]string{"eventId": ev.eventID, "correlationId": ev.corr}}
		for try := 0; try <= maxRedeliveries; try++ {
			m.Redelivered = try > 0
			if mdb.OnMessage(ctx, m) == nil {
				break
			}
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM shipping_letters`).Scan(&rows); err != nil {
		return 0, 0, err
	}
	return letters.count(), rows, nil
}
