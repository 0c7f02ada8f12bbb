package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/observe"
	"github.com/inboxkit/inboxkit/outbox"
)

// outboxFlags name the outbox table of a command.
type outboxFlags struct{ table string }

func (f *outboxFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.table, "outbox-table", outbox.DefaultTable, "outbox table name (its key table is <name>_KEY)")
}

// open returns the outbox store on db; with check, a missing or outdated
// outbox is a configuration error (exit 2, "run inboxctl migrate").
func (f *outboxFlags) open(ctx context.Context, db *sql.DB, t target.DB, check bool) (*outbox.Store, error) {
	st, err := outbox.New(db, t.Dialect, outbox.Config{Table: f.table})
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if check {
		if err := st.CheckSchema(ctx); err != nil {
			if errors.Is(err, inbox.ErrSchemaOutdated) {
				return nil, &exitError{code: exitUsage, err: fmt.Errorf("database %s: %w", t.Display, err)}
			}
			return nil, err
		}
	}
	return st, nil
}

// openDB opens the database of f and its outbox, which must be at this
// build's version (exit 2 otherwise). Close st.DB() when done.
func (f *outboxFlags) openDB(ctx context.Context, df dbFlags) (*outbox.Store, target.DB, error) {
	db, t, err := openDB(ctx, orEnv(orEnv(df.url, envDB), envDatabaseURL))
	if err != nil {
		return nil, t, err
	}
	st, err := f.open(ctx, db, t, true)
	if err != nil {
		db.Close()
		return nil, t, err
	}
	return st, t, nil
}

// existing returns the outbox store when its table exists on db (nil
// otherwise, or on a database the outbox does not run on): the commands
// that operate an inbox show the outbox where there is one.
func (f *outboxFlags) existing(ctx context.Context, db *sql.DB, t target.DB) (*outbox.Store, error) {
	st, err := outbox.New(db, t.Dialect, outbox.Config{Table: f.table})
	if err != nil {
		if errors.Is(err, outbox.ErrUnsupportedDialect) {
			return nil, nil
		}
		return nil, &exitError{code: exitUsage, err: err}
	}
	ok, err := st.Exists(ctx)
	if err != nil || !ok {
		return nil, err
	}
	return st, nil
}

// relayFlags configure a relay; prefix is "" for `relay` and "relay-" for
// the relay inside `run`.
type relayFlags struct {
	outbox      outboxFlags
	concurrency int
	maxAttempts int
	onPoison    string
	poll        time.Duration
	lease       time.Duration
	retryDelay  time.Duration
	prefix      string // "--" or "--relay-": how the flags are named in messages
	// send, if set, replaces every send (run --shadow: the recorder).
	send func(ctx context.Context, m outbox.Outgoing) error
}

func (f *relayFlags) register(c *cobra.Command, prefix string) {
	f.prefix = "--" + prefix
	f.outbox.register(c)
	c.Flags().IntVar(&f.concurrency, prefix+"concurrency", 32, "outbox keys sent at once (a key's messages leave one at a time, in commit order); keyless messages 4 to a key's place (outbox.KeylessPerSlot)")
	c.Flags().IntVar(&f.maxAttempts, prefix+"max-attempts", 10, "send attempts of an outbox message before it is parked (backoff: "+prefix+"retry-delay, doubling to 1m)")
	c.Flags().StringVar(&f.onPoison, prefix+"on-poison", string(outbox.ParkKey), "what a parked message does to its key: park-key (later messages of the key wait for 'outbox retry' or 'outbox drop') or skip (they go on)")
	c.Flags().DurationVar(&f.poll, prefix+"poll", 250*time.Millisecond, "how often an idle relay looks for messages (PostgreSQL also wakes it at each commit)")
	c.Flags().DurationVar(&f.lease, prefix+"lease", 30*time.Second, "how long a relay holds the keys it claimed: a relay that died gives them back after it (a send is bounded by a third of it, at most 10s)")
	c.Flags().DurationVar(&f.retryDelay, prefix+"retry-delay", time.Second, "delay before a failed send is tried again; doubles per attempt, at most 1m (±50% jitter)")
}

// validate checks the flags before anything is opened.
func (f *relayFlags) validate() error {
	if f.maxAttempts < 1 {
		return usageErr("%smax-attempts of the relay must be at least 1 (got %d): a message that always fails must be parked, not tried forever", f.prefix, f.maxAttempts)
	}
	if f.lease <= 0 || f.retryDelay <= 0 {
		return usageErr("%slease (%s) and %sretry-delay (%s) must be positive", f.prefix, f.lease, f.prefix, f.retryDelay)
	}
	return nil
}

// relay is a running relay with what it needs: metrics, the wake-ups.
type relay struct {
	*outbox.Relay
	metrics *observe.RelayMetrics
	done    chan struct{}
}

// startRelay starts a relay of st that publishes through pub; on
// PostgreSQL it listens for Add's notifications. reg (nil: none) gets its
// metrics. It stops when ctx is done; wait for it with <-done.
func startRelay(ctx context.Context, st *outbox.Store, t target.DB, pub dlq.Publisher, f relayFlags, reg prometheus.Registerer, logger *slog.Logger) (*relay, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	cfg := outbox.RelayConfig{
		Concurrency: f.concurrency, OnPoison: outbox.PoisonPolicy(f.onPoison), PollInterval: f.poll, Logger: logger, Lease: f.lease,
		Retry: inboxkit.RetryPolicy{MaxAttempts: f.maxAttempts, Redelivery: inboxkit.Backoff{Initial: f.retryDelay, Max: max(f.retryDelay, time.Minute)}},
		SendFunc: func(ctx context.Context, m outbox.Outgoing) error {
			if f.send != nil {
				return f.send(ctx, m)
			}
			if m.Destination == logLetters {
				logLetter(ctx, logger, m)
				return nil
			}
			return outbox.Send(ctx, m, pub, nil)
		},
	}
	r := &relay{done: make(chan struct{})}
	if reg != nil {
		m, err := observe.NewRelayMetrics(reg, st, logger)
		if err != nil {
			return nil, err
		}
		r.metrics, cfg.Observer = m, m
	}
	if t.Dialect.Name() == "postgres" {
		cfg.Wake = postgres.Listen(ctx, t.DSN, st.NotifyChannel(), logger)
	}
	var err error
	if r.Relay, err = outbox.NewRelay(st, cfg); err != nil {
		return nil, usageErr("%v", err)
	}
	go func() {
		defer close(r.done)
		_ = r.Run(ctx)
	}()
	logger.Info("outbox relay started", "outbox", st.Table(), "concurrency", r.Config().Concurrency, "max_attempts", f.maxAttempts, "on_poison", f.onPoison)
	return r, nil
}

func newRelayCmd() *cobra.Command {
	var f dbFlags
	var rf relayFlags
	var brokerURL, logFormat, logLevel, metricsAddr string
	c := &cobra.Command{
		Use:   "relay --db URL --broker URL",
		Short: "Send the outbox's messages after their transactions committed, until SIGINT/SIGTERM",
		Long: `relay sends what handlers wrote to the outbox table (INBOXKIT_OUTBOX, or --outbox-table):
a destination that is an http:// or https:// URL gets a POST with the message id as
Idempotency-Key; any other destination is a queue (a subject on JetStream) of --broker.
A message is marked SENT only once the broker or the endpoint confirmed it; a relay
that dies before the mark leaves it to be sent again, with the same id (eventId
header), which a receiver deduplicates by.

The messages of one key leave one at a time, in the order their transactions
committed, also with several relays at once ('inboxctl run' has one inside unless
--no-relay). A send that fails is tried again with a backoff (--retry-delay, 1s,
doubling to 1m); a relay that dies gives its keys back after --lease (30s);
after --max-attempts, or at once when the destination refuses it for good (an HTTP
4xx), it is PARKED with its last error: see 'inboxctl outbox list --parked', then
'outbox retry' or 'outbox drop'. --on-poison says whether its key waits (park-key)
or goes on without it (skip). On PostgreSQL the relay wakes at each commit (LISTEN);
elsewhere it polls every --poll.

On SIGINT or SIGTERM it finishes the sends in hand, records them and exits 0.`,
		Example: `  inboxctl relay --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --broker amqp://guest:guest@127.0.0.1:5672/
  inboxctl relay --db sqlite:./inbox.db --broker stomp://127.0.0.1:61613 --on-poison skip --metrics-addr 127.0.0.1:9465`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rf.validate(); err != nil {
				return err
			}
			level, err := parseLevel(logLevel)
			if err != nil {
				return err
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logFormat, level)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, t, err := rf.outbox.openDB(ctx, f)
			if err != nil {
				return err
			}
			db := st.DB()
			defer db.Close()
			if err := refuseShadowDB(ctx, db, t, "relay"); err != nil {
				return err
			}
			var pub dlq.Publisher
			if orEnv(brokerURL, envBroker) != "" {
				b, err := openBroker(brokerURL, logger)
				if err != nil {
					return err
				}
				defer b.Close()
				if pub, err = b.Publisher(ctx); err != nil {
					return err
				}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			r, err := startRelay(ctx, st, t, pub, rf, reg, logger)
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				h := observe.NewHealth()
				h.Add("database", db.PingContext)
				h.Add("outbox-relay", r.Ready)
				stop, err := serveOps(ctx, metricsAddr, observe.MuxFor(reg, h), logger)
				if err != nil {
					return err
				}
				defer stop()
				go r.metrics.Run(ctx, 15*time.Second)
			}
			<-r.done
			logger.Info("outbox relay stopped")
			return nil
		},
	}
	f.register(c)
	rf.register(c, "")
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL for queue destinations: stomp://, amqp://, amqp10://, nats:// (default $"+envBroker+"; none: only http(s) destinations can be sent)")
	c.Flags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	c.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port (default: off)")
	return c
}

// serveOps serves mux on addr until the returned stop is called.
func serveOps(ctx context.Context, addr string, mux *http.ServeMux, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageErr("--metrics-addr %s: %v\n\tuse a free host:port, e.g. 127.0.0.1:9465", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving metrics and health", "addr", ln.Addr().String())
	var once sync.Once
	return func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
	}, nil
}

func newOutboxCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "outbox",
		Short: "List, retry and drop the outbox's messages (parked ones above all)",
		Long: `The outbox holds what handlers asked to send after their commit (see 'inboxctl relay').
A message that could not be sent after its attempts, or that its destination refused
for good, is PARKED with its last error; 'list --parked' shows them, 'retry' sends
them again (attempts reset; with --on-poison park-key the key's later messages
follow), 'drop' gives them up (the key goes on; the row stays as DROPPED until purge).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newOutboxListCmd(), newOutboxRepairCmd(true), newOutboxRepairCmd(false))
	return c
}

func newOutboxListCmd() *cobra.Command {
	var f dbFlags
	var of outboxFlags
	var o outputFlags
	var parked, sent bool
	var key, messageID, causedBy string
	var limit int
	c := &cobra.Command{
		Use:   "list --db URL [--parked] [--key K] [-o json]",
		Short: "List the outbox's unsent messages (PENDING and PARKED), oldest first",
		Example: `  inboxctl outbox list --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --parked
  inboxctl outbox list --db sqlite:./inbox.db --caused-by INV-42 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, _, err := of.openDB(ctx, f)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			opt := outbox.ListOptions{Key: key, MessageID: messageID, Limit: limit}
			switch {
			case parked:
				opt.Statuses = []outbox.Status{outbox.StatusParked}
			case sent:
				opt.Statuses = []outbox.Status{outbox.StatusPending, outbox.StatusParked, outbox.StatusSent, outbox.StatusDropped}
			}
			if causedBy != "" {
				opt.CauseEventIDs = []string{causedBy}
			}
			rows, err := st.List(ctx, opt)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"outbox": st.Table(), "rows": rows})
			}
			printOutboxRows(cmd.OutOrStdout(), rows)
			return nil
		},
	}
	f.register(c)
	of.register(c)
	o.register(c)
	c.Flags().BoolVar(&parked, "parked", false, "only PARKED messages")
	c.Flags().BoolVar(&sent, "all", false, "SENT and DROPPED messages too")
	c.Flags().StringVar(&key, "key", "", "only the messages of this key")
	c.Flags().StringVar(&messageID, "message-id", "", "only this message")
	c.Flags().StringVar(&causedBy, "caused-by", "", "only the messages written while this event id was handled")
	c.Flags().IntVar(&limit, "limit", 100, "at most this many messages")
	return c
}

func printOutboxRows(w io.Writer, rows []outbox.Row) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no outbox messages")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE\tKEY\tSEQ\tSTATUS\tATTEMPTS\tDESTINATION\tCAUSED BY\tCREATED\tLAST ERROR")
	for _, r := range rows {
		created := r.CreatedAt
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, orDash(r.Key), r.Seq, r.Status, r.Attempts, outbox.DestinationLabel(r.Destination),
			orDash(r.CauseEventID), fmtTime(&created), orDash(shorten(r.LastError, 60)))
	}
	tw.Flush()
}

// newOutboxRepairCmd is `outbox retry` (retry) or `outbox drop`.
func newOutboxRepairCmd(retry bool) *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var of outboxFlags
	var sel outbox.Selector
	use, short, did := "drop", "Give up parked messages: never sent, their key goes on", "dropped"
	if retry {
		use, short, did = "retry", "Send parked messages again (attempts reset)", "retried"
	}
	c := &cobra.Command{
		Use:   use + " --db URL (--message-id ID | --key K" + map[bool]string{true: " | --all-parked", false: ""}[retry] + ")",
		Short: short,
		Example: `  inboxctl outbox ` + use + ` --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --message-id 0190b6a4-...
  inboxctl outbox ` + use + ` --db sqlite:./inbox.db --key customer-K-100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, set := range []bool{sel.MessageID != "", sel.Key != "", sel.All} {
				if set {
					n++
				}
			}
			if n != 1 {
				return usageErr("outbox %s needs exactly one of --message-id ID or --key K%s", use, map[bool]string{true: " or --all-parked", false: ""}[retry])
			}
			ctx := cmd.Context()
			st, t, err := of.openDB(ctx, f)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			act := st.Drop
			if retry {
				act = st.Retry
			}
			done, err := act(ctx, sel)
			if errors.Is(err, outbox.ErrNotParked) {
				return &exitError{code: exitFindings, err: fmt.Errorf("no parked outbox message matches (list them with inboxctl outbox list --parked)")}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %d parked message(s) in %s\n", did, done, st.Table())
			a := inbox.Action{Table: st.Table(), Operator: op.who(), Action: "outbox-" + use, Rows: int64(done)}
			switch {
			case sel.MessageID != "":
				a.EventIDs, a.Detail = []string{sel.MessageID}, "--message-id "+sel.MessageID
			case sel.Key != "":
				a.Detail = "--key " + sel.Key
			default:
				a.Detail = "--all-parked"
			}
			return recorded(ctx, cmd.ErrOrStderr(), a, func(ctx context.Context, a inbox.Action) error {
				return inbox.RecordAction(ctx, st.DB(), t.Dialect, a)
			})
		},
	}
	f.register(c)
	op.register(c)
	of.register(c)
	c.Flags().StringVar(&sel.MessageID, "message-id", "", "the parked message with this id")
	c.Flags().StringVar(&sel.Key, "key", "", "every parked message of this key")
	if retry {
		c.Flags().BoolVar(&sel.All, "all-parked", false, "every parked message (after an outage of a destination)")
	}
	return c
}

// startRunRelay is the relay inside `run`: it publishes through the
// consumer's publisher, reports to /readyz as "outbox-relay", keeps its
// metrics in the consumer's registry and, with a metrics address, refreshes
// the outbox gauges.
func startRunRelay(ctx context.Context, ob *outbox.Store, t target.DB, pub dlq.Publisher, f relayFlags, o *ops, gauges bool, logger *slog.Logger) (*relay, error) {
	r, err := startRelay(ctx, ob, t, pub, f, o.obs.Registry(), logger)
	if err != nil {
		return nil, err
	}
	o.health.Add("outbox-relay", r.Ready)
	if gauges {
		go r.metrics.Run(ctx, 15*time.Second)
	}
	return r, nil
}

// planOutbox is migrate --dry-run's outbox plan; on Oracle, where the
// outbox does not run, the whole script as text.
func planOutbox(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags) (*inbox.Plan, error) {
	st, err := outbox.New(db, t.Dialect, outbox.Config{Table: f.table})
	if errors.Is(err, outbox.ErrUnsupportedDialect) {
		if err := outbox.ValidateTable(f.table); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		p, _ := outbox.CreateScript(t.Dialect, f.table)
		return &inbox.Plan{Dialect: t.Dialect.Name(), Table: f.table, Latest: outbox.SchemaVersion, Steps: []inbox.PlannedStep{{Description: "the outbox's DDL (text only on " + t.Dialect.Name() + ")", Statements: []string{p}}}}, nil
	}
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	p, err := st.PlanMigration(ctx)
	return &p, err
}

// migrateOutbox creates or upgrades the outbox tables (nil on a database
// the outbox does not run on).
func migrateOutbox(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags) (*inbox.Plan, error) {
	st, err := outbox.New(db, t.Dialect, outbox.Config{Table: f.table})
	if errors.Is(err, outbox.ErrUnsupportedDialect) {
		return nil, nil
	}
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	p, err := st.Migrate(ctx)
	return &p, err
}

// purgeOutbox purges the outbox where its table exists (nil: none).
func purgeOutbox(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags, opt outbox.PurgeOptions) (*int64, error) {
	if opt.OlderThan <= 0 {
		return nil, usageErr("--outbox-older-than must be positive (got %s)", opt.OlderThan)
	}
	st, err := f.existing(ctx, db, t)
	if err != nil || st == nil {
		return nil, err
	}
	n, err := st.Purge(ctx, opt)
	return &n, err
}

// outboxStats is stats' outbox part.
type outboxStats struct {
	Table  string          `json:"table"`
	Counts []outbox.Counts `json:"counts"`
	// OldestPending is the CREATED_AT of the oldest PENDING row (null: none).
	OldestPending           *time.Time `json:"oldestPending"`
	OldestPendingAgeSeconds float64    `json:"oldestPendingAgeSeconds"`
	Pending                 int64      `json:"pending"`
	Parked                  int64      `json:"parked"`
}

// collectOutboxStats counts the outbox where its table exists (nil: none).
func collectOutboxStats(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags, at time.Time) (*outboxStats, error) {
	st, err := f.existing(ctx, db, t)
	if err != nil || st == nil {
		return nil, err
	}
	counts, err := st.Stats(ctx, true)
	if err != nil {
		return nil, err
	}
	s := &outboxStats{Table: st.Table(), Counts: counts}
	for _, c := range counts {
		switch c.Status {
		case outbox.StatusPending:
			s.Pending += c.Rows
			if c.Oldest != nil && (s.OldestPending == nil || c.Oldest.Before(*s.OldestPending)) {
				s.OldestPending = c.Oldest
			}
		case outbox.StatusParked:
			s.Parked += c.Rows
		}
	}
	if s.OldestPending != nil {
		s.OldestPendingAgeSeconds = max(at.Sub(*s.OldestPending).Seconds(), 0)
	}
	return s, nil
}

func printOutboxStats(w io.Writer, s *outboxStats) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\noutbox %s\n\n", s.Table)
	if len(s.Counts) == 0 {
		fmt.Fprintln(w, "no rows")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "destination\tstatus\trows\toldest\t")
	for _, c := range s.Counts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", outbox.DestinationLabel(c.Destination), c.Status, c.Rows, fmtTime(c.Oldest))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if s.OldestPending == nil {
		fmt.Fprintln(w, "oldest pending outbox row: none (nothing waits to be sent)")
	} else {
		fmt.Fprintf(w, "oldest pending outbox row: %s, %s old\n", s.OldestPending.UTC().Format(time.RFC3339), (time.Duration(s.OldestPendingAgeSeconds) * time.Second).String())
	}
	if s.Parked > 0 {
		fmt.Fprintf(w, "parked outbox rows: %d (inboxctl outbox list --parked; then outbox retry or outbox drop)\n", s.Parked)
	}
}

// attachOutbox adds to each audit row the outbox messages its event's
// handling wrote, where the outbox table exists.
func attachOutbox(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags, rows []auditRow) error {
	if len(rows) == 0 {
		return nil
	}
	st, err := f.existing(ctx, db, t)
	if err != nil || st == nil {
		return err
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.EventID)
	}
	caused, err := st.List(ctx, outbox.ListOptions{CauseEventIDs: ids, Limit: 10000,
		Statuses: []outbox.Status{outbox.StatusPending, outbox.StatusParked, outbox.StatusSent, outbox.StatusDropped}})
	if err != nil {
		return err
	}
	for i := range rows {
		for _, m := range caused {
			if m.CauseEventID == rows[i].EventID {
				rows[i].Outbox = append(rows[i].Outbox, m)
			}
		}
	}
	return nil
}

func printAuditOutbox(w io.Writer, rows []auditRow) {
	var caused []outbox.Row
	for _, r := range rows {
		caused = append(caused, r.Outbox...)
	}
	if len(caused) == 0 {
		return
	}
	fmt.Fprintf(w, "outbox messages the events' handling wrote: %d\n", len(caused))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CAUSED BY\tMESSAGE\tDESTINATION\tKEY\tSTATUS\tATTEMPTS\tCREATED\tSENT\tLAST ERROR")
	for _, m := range caused {
		created := m.CreatedAt
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.CauseEventID, m.ID, outbox.DestinationLabel(m.Destination), orDash(m.Key), m.Status, m.Attempts,
			fmtTime(&created), fmtTime(m.SentAt), orDash(shorten(m.LastError, 60)))
	}
	tw.Flush()
}

// outboxChecks are check's findings on the outbox, where its table exists:
// messages PENDING for longer than stuckAfter, PARKED messages, and (when
// the consumer's config declares it) business rows without the outbox
// message their handling must have written.
func outboxChecks(ctx context.Context, db *sql.DB, t target.DB, f outboxFlags, rowExists businessCheck, stuckAfter time.Duration) ([]finding, error) {
	if stuckAfter <= 0 {
		return nil, usageErr("--outbox-stuck-after must be positive (got %s)", stuckAfter)
	}
	st, err := f.existing(ctx, db, t)
	if err != nil || st == nil {
		if err == nil && rowExists.SQL != "" {
			return []finding{{Check: orDefault(rowExists.Name, "business-row-without-outbox"), Meaning: rowExists.Meaning, Samples: []string{},
				Skipped: "no outbox table " + f.table + ": run inboxctl migrate"}}, nil
		}
		return nil, err
	}
	rowsOf := func(opt outbox.ListOptions) ([]string, error) {
		opt.Limit = 1000
		rows, err := st.List(ctx, opt)
		var out []string
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%s to %s (key %s, caused by %s): %d attempts, %s", r.ID, outbox.DestinationLabel(r.Destination), orDash(r.Key), orDash(r.CauseEventID), r.Attempts, orDash(shorten(r.LastError, 80))))
		}
		return out, err
	}
	stuck, err := rowsOf(outbox.ListOptions{Statuses: []outbox.Status{outbox.StatusPending}, OlderThan: time.Now().Add(-stuckAfter)})
	if err != nil {
		return nil, fmt.Errorf("check outbox-stuck-pending: %w", err)
	}
	parked, err := rowsOf(outbox.ListOptions{Statuses: []outbox.Status{outbox.StatusParked}})
	if err != nil {
		return nil, fmt.Errorf("check outbox-parked: %w", err)
	}
	out := []finding{
		{Check: "outbox-stuck-pending", Meaning: fmt.Sprintf("outbox messages PENDING for more than %s: no relay runs, or their destination fails", stuckAfter), Count: len(stuck), Samples: sample(stuck)},
		{Check: "outbox-parked", Meaning: "outbox messages PARKED: inboxctl outbox retry or drop", Count: len(parked), Samples: sample(parked)},
	}
	if rowExists.SQL != "" {
		x := finding{Check: orDefault(rowExists.Name, "business-row-without-outbox"), Meaning: orDefault(rowExists.Meaning, "business rows whose handling wrote no outbox message")}
		ids, err := queryStrings(ctx, db, `SELECT b.event_id FROM (`+rowExists.SQL+`) b WHERE NOT EXISTS (SELECT 1 FROM `+st.Table()+` o WHERE o.CAUSE_EVENT_ID = b.event_id) ORDER BY b.event_id`)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w\n\tSQL: %s (it must return the column event_id)", x.Check, err, rowExists.SQL)
		}
		x.Count, x.Samples = len(ids), sample(ids)
		out = append(out, x)
	}
	return out, nil
}
