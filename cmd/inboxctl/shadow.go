package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

// The shadow run (docs/shadow.md): the broker copies every message of the
// production queue to a shadow queue, and `inboxctl run --shadow` consumes
// the copy into a shadow database. Nothing the shadow consumer does reaches
// production: it reads and acknowledges only the copy (a name check), writes
// only a database that is not the production one (an identity check against
// --production-db), and records every message it would send (letter
// requests of its outbox, dead letters, rejections) in the shadow database's
// INBOXKIT_SHADOW_CALLS instead of sending it.

// shadowSuffix ends the name of every shadow copy: `shadow setup` refuses
// another name, and `run --shadow` refuses to consume a queue (on JetStream:
// a durable) without it, so a shadow run never takes messages from the
// production queue.
const shadowSuffix = ".shadow"

// envProductionDB is --production-db's environment variable.
const envProductionDB = "INBOXKIT_PRODUCTION_DB"

// shadowCallsTable is the shadow database's record of what the shadow
// consumer would have sent: one row per send (the relay's letter requests:
// at least once, as the relay sends; dead letters and rejections: once per
// event).
const shadowCallsTable = "INBOXKIT_SHADOW_CALLS"

// Kinds of INBOXKIT_SHADOW_CALLS rows.
const (
	shadowKindOutbox     = "outbox"      // an outbox message the relay would have sent
	shadowKindDeadLetter = "dead-letter" // an envelope for the dead-letter queue
	shadowKindReject     = "reject"      // an envelope for the reject queue
	shadowKindMessage    = "message"     // any other publish of the consumer
)

// newShadowCmd is the command group `inboxctl shadow`: setup, and the
// subcommands more adds (built by their constructors, as newRoot builds
// the tree: main.go passes them, e.g. newShadowCmd(newShadowDiffCmd())).
func newShadowCmd(more ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   "shadow",
		Short: "Run the new consumer beside the legacy one on a copy of its messages (docs/shadow.md)",
		Long: `shadow prepares a shadow run: the broker copies every message of the production queue to a
shadow queue (producers untouched), and 'inboxctl run --shadow' consumes the copy into a shadow
database, recording what it would send instead of sending it. See docs/shadow.md.`,
		Example: `  inboxctl shadow setup --broker stomp://127.0.0.1:61613 --queue invoices
  inboxctl shadow setup --broker amqp://guest:guest@127.0.0.1:5672/ --queue invoices --exchange billing --routing-key invoice.created --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var names []string
			for _, sub := range cmd.Commands() {
				names = append(names, sub.Name())
			}
			return usageErr("shadow needs a subcommand: %s (see 'inboxctl shadow --help')", strings.Join(names, ", "))
		},
	}
	c.AddCommand(newShadowSetupCmd())
	c.AddCommand(more...)
	return c
}

type shadowSetupFlags struct {
	brokerURL   string
	queue       string
	shadowQueue string
	exchange    string
	keys        []string
	apply       bool
	verify      bool
	watch       time.Duration
}

func newShadowSetupCmd() *cobra.Command {
	var f shadowSetupFlags
	c := &cobra.Command{
		Use:   "setup --broker URL --queue NAME [--shadow-queue NAME.shadow] [--apply | --verify]",
		Short: "Print or apply the broker configuration that copies a queue's messages to a shadow queue",
		Long: `setup says what gives the shadow consumer a copy of every message of --queue, without
touching the producers, and, with --apply, configures it where the broker allows it:

  ActiveMQ (stomp://)  prints the composite queue to put in activemq.xml (STOMP cannot
                       configure the broker); the legacy consumer keeps reading --queue.
  RabbitMQ (amqp://)   declares --shadow-queue and binds it to --exchange with each
                       --routing-key: the bindings of the production queue, which AMQP 0-9-1
                       cannot list (rabbitmqctl list_bindings shows them).
  JetStream (nats://)  creates the durable --shadow-queue on the stream of the subject --queue;
                       the stream must keep acknowledged messages (limits or interest retention).
  IBM MQ (amqp10://...?profile=ibmmq)  prints the MQSC of a streaming queue (untested here).

Without --apply it prints what it would do and changes nothing. --apply (and --verify alone)
then watch the shadow copy for --watch: copies must arrive while producers send. The check
only reads queue depths: a probe message would reach the production queue too, and the legacy
consumer would process it. The shadow copy's name must end in ` + shadowSuffix + ` ('run --shadow'
refuses any other).`,
		Example: `  inboxctl shadow setup --broker stomp://127.0.0.1:61613 --queue invoices
  inboxctl shadow setup --broker stomp://127.0.0.1:61613 --queue invoices --verify --watch 30s
  inboxctl shadow setup --broker amqp://guest:guest@127.0.0.1:5672/ --queue invoices \
    --exchange billing --routing-key invoice.created --apply
  inboxctl shadow setup --broker nats://127.0.0.1:4222 --queue invoices --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return shadowSetup(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	c.Flags().StringVar(&f.brokerURL, "broker", "", "broker URL: stomp://, amqp://, nats://, amqp10://...?profile=ibmmq (default $"+envBroker+")")
	c.Flags().StringVar(&f.queue, "queue", "", "the production queue (JetStream: subject) the legacy consumer reads (required)")
	c.Flags().StringVar(&f.shadowQueue, "shadow-queue", "", "the shadow copy; must end in "+shadowSuffix+" (default <queue>"+shadowSuffix+"; JetStream: the shadow run's consumer name, whose durable reads the copy, default "+defaultConsumer+shadowSuffix+")")
	c.Flags().StringVar(&f.exchange, "exchange", "", "RabbitMQ: the exchange the producers publish to (required on amqp://)")
	c.Flags().StringSliceVar(&f.keys, "routing-key", nil, "RabbitMQ: a routing key the production queue is bound with (repeat or comma-separate; none: one binding with the empty key, as fanout)")
	c.Flags().BoolVar(&f.apply, "apply", false, "configure the copy (RabbitMQ, JetStream), then verify it")
	c.Flags().BoolVar(&f.verify, "verify", false, "only verify that copies arrive on the shadow queue (e.g. after putting the ActiveMQ snippet in place)")
	c.Flags().DurationVar(&f.watch, "watch", 10*time.Second, "how long to watch the shadow copy's depth when verifying (copies must arrive meanwhile; 0: do not verify)")
	return c
}

func shadowSetup(ctx context.Context, w io.Writer, f shadowSetupFlags) error {
	if f.queue == "" {
		return usageErr("shadow setup needs --queue NAME, the production queue the legacy consumer reads (e.g. invoices)")
	}
	t, err := target.ParseBroker(orEnv(f.brokerURL, envBroker))
	if err != nil {
		return err
	}
	jetStream := t.Kind == target.NATS || t.Kind == target.Embedded
	if f.shadowQueue == "" {
		f.shadowQueue = f.queue + shadowSuffix
		if jetStream { // the copy is a durable: the shadow run's consumer name
			f.shadowQueue = defaultConsumer + shadowSuffix
		}
	}
	if !strings.HasSuffix(f.shadowQueue, shadowSuffix) || f.shadowQueue == f.queue {
		return usageErr("--shadow-queue %q must end in %s and differ from --queue: 'inboxctl run --shadow' consumes only such a name, so that it never takes messages from a production queue", f.shadowQueue, shadowSuffix)
	}
	if f.watch < 0 {
		return usageErr("--watch must be 0 (no verification) or positive (got %s)", f.watch)
	}
	ibmmq := t.Kind == target.AMQP10 && strings.Contains(strings.ToLower(t.URL), "profile=ibmmq")
	switch {
	case t.Kind == target.AMQP10 && !ibmmq:
		return usageErr("shadow setup over AMQP 1.0 knows IBM MQ only (amqp10://...?profile=ibmmq): on Artemis a divert (<divert><exclusive>false</exclusive>) copies a queue's address, on Azure Service Bus a topic with two subscriptions; configure it with the broker's own tools")
	case t.Kind == target.AMQP && f.exchange == "":
		return usageErr("shadow setup on RabbitMQ needs --exchange NAME (and --routing-key KEY for each binding of %s): AMQP 0-9-1 cannot list a queue's bindings, 'rabbitmqctl list_bindings' shows them.\n\tProducers that publish to the default exchange (routing key = queue name) cannot be copied by a binding: have them publish to an exchange first", f.queue)
	case t.Kind != target.AMQP && (f.exchange != "" || len(f.keys) > 0):
		return usageErr("--exchange and --routing-key are for RabbitMQ (amqp://) only")
	case f.apply && f.verify:
		return usageErr("--apply verifies after applying: give --apply or --verify, not both")
	}
	if f.apply && (t.Kind == target.STOMP || ibmmq) {
		what := "ActiveMQ cannot be configured over STOMP: put the snippet below into activemq.xml (inside <broker>), restart the broker, then run 'inboxctl shadow setup ... --verify'"
		if ibmmq {
			what = "IBM MQ is configured with MQSC (runmqsc), not over AMQP: run the commands below, then 'inboxctl shadow setup ... --verify'"
		}
		return usageErr("--apply: %s\n\n%s", what, shadowPlan(t, f))
	}
	if !f.verify {
		if f.apply {
			fmt.Fprintln(w, "applying:")
		}
		fmt.Fprint(w, shadowPlan(t, f))
	}
	if !f.apply && !f.verify {
		switch {
		case t.Kind == target.AMQP || jetStream:
			fmt.Fprintln(w, "(nothing changed: run again with --apply to do it; it then verifies that copies arrive)")
		case ibmmq:
			fmt.Fprintf(w, "(then check that copies arrive while producers send: DISPLAY QSTATUS(%s) CURDEPTH)\n", mqscName(f.shadowQueue))
		default:
			fmt.Fprintln(w, "(then run again with --verify while producers send: it checks that copies arrive)")
		}
		return nil
	}
	if ibmmq {
		return usageErr("--verify: inboxctl cannot read a queue's depth over AMQP 1.0; check %s with DISPLAY QSTATUS(%s) CURDEPTH", f.shadowQueue, mqscName(f.shadowQueue))
	}
	b, err := openBroker(f.brokerURL, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	if f.apply {
		switch t.Kind {
		case target.AMQP:
			if err := b.requireQueue(ctx, f.queue); err != nil { // a mistyped --queue: no copy of nothing
				return err
			}
			if err := b.BindCopy(ctx, f.shadowQueue, f.exchange, f.keys); err != nil {
				if errors.Is(err, brokerurl.ErrNotFound) {
					return &exitError{code: exitUsage, err: fmt.Errorf("%v (nothing was created): give the exchange the producers publish to ('rabbitmqctl list_bindings' shows the production queue's)", err)}
				}
				return b.fail("declare and bind "+f.shadowQueue, err)
			}
			fmt.Fprintf(w, "declared %s and bound it to exchange %s\n", f.shadowQueue, f.exchange)
		default: // JetStream
			if err := b.AddDurable(ctx, f.queue, f.shadowQueue); err != nil {
				if errors.Is(err, brokerurl.ErrNotFound) {
					return &exitError{code: exitUsage, err: fmt.Errorf("%v (nothing was created)", err)}
				}
				if errors.Is(err, brokerurl.ErrWorkQueueStream) {
					return &exitError{code: exitUsage, err: fmt.Errorf("%v\n\ta work-queue stream (inboxkit creates its streams so) gives each message to one consumer: a second durable gets no copy.\n\tMove the subject to a stream with limits retention (nats stream add --retention limits, or inboxkit's jetstream.Config.KeepAcked for a new stream), or publish to a second subject", err)}
				}
				return b.fail("create durable "+f.shadowQueue, err)
			}
			fmt.Fprintf(w, "created durable %s on the stream of %s\n", durableOf(f.shadowQueue), f.queue)
		}
	}
	if f.watch == 0 {
		return nil
	}
	return verifyShadowCopy(ctx, w, b, t, f)
}

// shadowPlan is what setup configures, as text an operator pastes.
func shadowPlan(t target.Broker, f shadowSetupFlags) string {
	var b strings.Builder
	switch t.Kind {
	case target.STOMP:
		fmt.Fprintf(&b, `ActiveMQ: make %[1]s a composite queue that keeps its messages and forwards a copy to %[2]s.
Put this into activemq.xml inside <broker> (merge it into an existing <destinationInterceptors>), then restart the broker:

  <destinationInterceptors>
    <virtualDestinationInterceptor>
      <virtualDestinations>
        <compositeQueue name="%[1]s" forwardOnly="false">
          <forwardTo>
            <queue physicalName="%[2]s"/>
          </forwardTo>
        </compositeQueue>
      </virtualDestinations>
    </virtualDestinationInterceptor>
  </destinationInterceptors>

The legacy consumer keeps reading %[1]s; 'inboxctl run --shadow --queue %[2]s' reads the copy.
Copies start with the restart: messages already on %[1]s are not copied.
`, xmlAttr(f.queue), xmlAttr(f.shadowQueue))
	case target.AMQP:
		keys := f.keys
		if len(keys) == 0 {
			keys = []string{""}
		}
		fmt.Fprintf(&b, "RabbitMQ on %s:\n  declare queue %s (durable) unless it exists\n", t.Display, f.shadowQueue)
		for _, k := range keys {
			fmt.Fprintf(&b, "  bind %s to exchange %s with routing key %q\n", f.shadowQueue, f.exchange, k)
		}
		fmt.Fprintf(&b, "Give every binding %s has (rabbitmqctl list_bindings): a message routed by a missing one reaches the legacy consumer only.\n", f.queue)
	case target.NATS, target.Embedded:
		fmt.Fprintf(&b, "JetStream on %s:\n  create durable %s on the stream that captures %s (filter subject %s, explicit ack)\n", t.Display, durableOf(f.shadowQueue), f.queue, f.queue)
		fmt.Fprintf(&b, "The shadow run reads it as its consumer: inboxctl run --shadow --queue %s --consumer %s\n", f.queue, f.shadowQueue)
		fmt.Fprintf(&b, "The stream must keep acknowledged messages (limits or interest retention): a work-queue stream gives each message to one consumer.\n")
		fmt.Fprintf(&b, "On a limits stream the new durable starts at the first message the stream still holds.\n")
	default: // IBM MQ
		fmt.Fprintf(&b, `IBM MQ (MQSC, untested here: there is no IBM MQ on this project's machines; needs IBM MQ 9.3 or later):
  DEFINE QLOCAL(%[2]s) DEFPSIST(YES) MAXDEPTH(5000000) REPLACE
  ALTER QLOCAL(%[1]s) STREAMQ(%[2]s) STRMQOS(BESTEF)
STRMQOS(BESTEF) never holds up the production message when the copy cannot be put (MUSTDUP would make
the put to %[1]s fail instead). The legacy consumer keeps reading %[1]s.
`, mqscName(f.queue), mqscName(f.shadowQueue))
	}
	return b.String()
}

// xmlAttr escapes s for an XML attribute.
func xmlAttr(s string) string {
	return strings.NewReplacer("&", "&amp;", `"`, "&quot;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// mqscName is an MQSC object name, quoted when it has characters MQSC folds
// or refuses unquoted.
func mqscName(s string) string {
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_') {
			return "'" + strings.ReplaceAll(s, "'", "''") + "'"
		}
	}
	return s
}

// durableOf is the JetStream durable name brokerurl makes of a consumer name.
func durableOf(name string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(".*> \t", r) {
			return '_'
		}
		return r
	}, name)
}

// verifyShadowCopy reads the shadow copy's depth (without consuming), waits
// --watch and reads it again: copies arrived when it grew. It cannot tell
// "no traffic" from "no copy", and says so.
func verifyShadowCopy(ctx context.Context, w io.Writer, b *broker, t target.Broker, f shadowSetupFlags) error {
	depth := func() (int, error) {
		if t.Kind == target.NATS || t.Kind == target.Embedded {
			n, ok, err := b.DurablePending(ctx, f.queue, f.shadowQueue)
			if err == nil && !ok {
				return 0, &exitError{code: exitFindings, err: fmt.Errorf("durable %s does not exist on the stream of %s: run 'inboxctl shadow setup --apply' first", durableOf(f.shadowQueue), f.queue)}
			}
			return n, err
		}
		n, _, err := b.Depth(ctx, f.shadowQueue)
		return n, err
	}
	before, err := depth()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		if errors.Is(err, brokerurl.ErrNoSuchQueue) || errors.Is(err, brokerurl.ErrNotFound) {
			return &exitError{code: exitFindings, err: fmt.Errorf("%s: %v: run 'inboxctl shadow setup' with --apply (or configure the copy by hand) first", f.shadowQueue, err)}
		}
		return b.fail("read the depth of "+f.shadowQueue, err)
	}
	fmt.Fprintf(w, "watching %s for %s (%d message(s) on it now) ...\n", f.shadowQueue, f.watch, before)
	select {
	case <-time.After(f.watch):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := depth()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return b.fail("read the depth of "+f.shadowQueue, err)
	}
	if after > before {
		fmt.Fprintf(w, "verified: %d copy(ies) arrived on %s in %s\n", after-before, f.shadowQueue, f.watch)
		return nil
	}
	fix := map[string]string{
		target.STOMP:    "the composite queue is in activemq.xml and the broker was restarted since",
		target.AMQP:     "every binding of " + f.queue + " is given with --routing-key",
		target.NATS:     "the durable was created (--apply)",
		target.Embedded: "the durable was created (--apply)",
	}[t.Kind]
	return &exitError{code: exitFindings, err: fmt.Errorf("no copy arrived on %s within %s (%d message(s) before, %d after): either nothing was published to %s meanwhile (run again with a longer --watch while producers send), or the copy is not in place: check that %s. Do not start 'inboxctl run --shadow' on %s before this passes (it consumes the copies, so the depth would not grow)",
		f.shadowQueue, f.watch, before, after, f.queue, fix, f.shadowQueue)}
}

// shadowRunFlags are run's --shadow flags.
type shadowRunFlags struct {
	on           bool
	productionDB string
}

func (f *shadowRunFlags) register(c *cobra.Command) {
	c.Flags().BoolVar(&f.on, "shadow", false, "shadow run (docs/shadow.md): consume the copy --queue (its name ends in "+shadowSuffix+"; JetStream: --consumer does) into --db, which must not be --production-db; record every send in "+shadowCallsTable+" instead of sending")
	c.Flags().StringVar(&f.productionDB, "production-db", "", "with --shadow: the production database (read only, to make sure --db is another one; default $"+envProductionDB+")")
}

// checkShadowSource refuses a shadow run whose source is not a shadow copy:
// the queue (on JetStream, where the copy is a second durable on the same
// subject, the consumer name) must end in shadowSuffix.
func checkShadowSource(brokerRaw, queue, consumerName string) error {
	t, err := target.ParseBroker(orEnv(brokerRaw, envBroker))
	if err != nil {
		return err
	}
	if t.Kind == target.NATS || t.Kind == target.Embedded {
		if !strings.HasSuffix(consumerName, shadowSuffix) {
			return usageErr("run --shadow on JetStream reads the copy through its own durable: --consumer %q must end in %s (the durable 'inboxctl shadow setup --apply' created, e.g. --consumer %s%s), so that it never takes the production consumer's messages", consumerName, shadowSuffix, defaultConsumer, shadowSuffix)
		}
		return nil
	}
	if !strings.HasSuffix(queue, shadowSuffix) {
		return usageErr("run --shadow consumes only a shadow copy: --queue %q does not end in %s (e.g. --queue %s%s, set up with 'inboxctl shadow setup'); consuming the production queue would take its messages from the legacy consumer", queue, shadowSuffix, queue, shadowSuffix)
	}
	return nil
}

// shadowTables are the tables a shadow run writes or reads: none of them
// may be a production table.
func shadowTables(inboxTable, outboxTable string) []string {
	return []string{inboxTable, outboxTable, outboxTable + "_KEY", "shipping_letters", "archived_documents", "invoice_customers",
		"INBOXKIT_SCHEMA_VERSION", "INBOXKIT_HISTORY", "INBOXKIT_OPERATOR_ACTION"}
}

// checkShadowDB opens the shadow database shadowRaw (--db, or its
// environment variables) and refuses it when it is the production
// database prodRaw (checkNotProduction).
func checkShadowDB(ctx context.Context, shadowRaw, prodRaw string, tables []string) error {
	if prodRaw == "" {
		return usageErr("run --shadow needs --production-db URL (or $%s): the production database, read only, to make sure --db is not it", envProductionDB)
	}
	db, t, err := openDB(ctx, orEnv(orEnv(shadowRaw, envDB), envDatabaseURL))
	if err != nil {
		return err
	}
	switch t.Dialect.Name() {
	case "sqlite":
		db.Close()
		// One writer: the recorder's INSERT would wait for the inbox
		// transaction that waits for it (a dead letter is recorded while
		// its row's update is uncommitted).
		return usageErr("run --shadow runs on PostgreSQL and MySQL/MariaDB, not SQLite: SQLite has one writer, and a dead letter is recorded while the inbox transaction holds it")
	case "oracle":
		db.Close()
		return usageErr("run --shadow runs on PostgreSQL and MySQL/MariaDB, not Oracle (the outbox does not run on Oracle)")
	}
	defer db.Close()
	return checkNotProduction(ctx, db, t, prodRaw, tables)
}

// checkNotProduction refuses a shadow database that is the production
// database: the same URL, or, opened, the same database (MySQL: server
// and database; PostgreSQL: server, database and current
// schema, or any of tables resolving to the same table). It only reads the
// production database. A production database that cannot be reached is a
// refusal too: the check could not be made.
func checkNotProduction(ctx context.Context, shadow *sql.DB, st target.DB, prodRaw string, tables []string) error {
	pt, err := target.ParseDB(prodRaw)
	if err != nil {
		return usageErr("--production-db: %v", err)
	}
	if pt.DSN == st.DSN {
		return usageErr("run --shadow: --db is the production database (%s): give the shadow database or schema (docs/shadow.md)", st.Display)
	}
	if pt.Dialect.Name() != st.Dialect.Name() {
		return nil // another kind of server: another database
	}
	prod, _, err := openDB(ctx, prodRaw)
	if err != nil {
		return fmt.Errorf("run --shadow: cannot check that --db is not the production database: %w", err)
	}
	defer prod.Close()
	sid, err := dbIdentity(ctx, shadow, st, tables)
	if err != nil {
		return fmt.Errorf("run --shadow: identify the shadow database %s: %w", st.Display, err)
	}
	pid, err := dbIdentity(ctx, prod, pt, tables)
	if err != nil {
		return fmt.Errorf("run --shadow: identify the production database %s: %w", pt.Display, err)
	}
	if sid.where == pid.where {
		return usageErr("run --shadow: --db %s is the production database %s (both are %s): give the shadow database or schema (docs/shadow.md)", st.Display, pt.Display, sid.where)
	}
	for _, tb := range tables {
		if id := pid.tables[tb]; id != "" && id == sid.tables[tb] {
			return usageErr("run --shadow: table %s of --db %s is the production table (%s): the shadow database's search path reaches the production schema; give a search_path with the shadow schema only", tb, st.Display, id)
		}
	}
	return nil
}

// identity names where a connection writes (where) and, on PostgreSQL,
// which table each name resolves to ("" for none).
type identity struct {
	where  string
	tables map[string]string
}

func dbIdentity(ctx context.Context, db *sql.DB, t target.DB, tables []string) (identity, error) {
	id := identity{tables: map[string]string{}}
	switch t.Dialect.Name() {
	case "postgres":
		// The server's start time tells two servers apart (the address
		// does not, through a proxy); the database and schema where the
		// tables are created, and each table's oid where names resolve.
		if err := db.QueryRowContext(ctx, `SELECT pg_postmaster_start_time()::text || ' database ' || current_database() || ' schema ' || COALESCE(current_schema(), '(none)')`).Scan(&id.where); err != nil {
			return id, err
		}
		for _, tb := range tables {
			var oid sql.NullString
			if err := db.QueryRowContext(ctx, `SELECT to_regclass($1)::oid::text`, strings.ToLower(tb)).Scan(&oid); err != nil {
				return id, err
			}
			if oid.Valid {
				id.tables[tb] = "oid " + oid.String
			}
		}
	case "mysql":
		var host, port string
		var dbName sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT @@hostname, CAST(@@port AS CHAR), DATABASE()`).Scan(&host, &port, &dbName); err != nil {
			return id, err
		}
		id.where = fmt.Sprintf("server %s:%s database %s", host, port, dbName.String)
	default:
		return id, usageErr("run --shadow runs on PostgreSQL and MySQL/MariaDB, not %s", t.Dialect.Name())
	}
	return id, nil
}

// refuseShadowDB refuses to run command (run without --shadow, relay) on a
// shadow database, recognised by its INBOXKIT_SHADOW_CALLS: it would send
// for real what the shadow run only records (outbox rows not recorded yet,
// dead letters).
func refuseShadowDB(ctx context.Context, db *sql.DB, t target.DB, command string) error {
	var one int
	if err := db.QueryRowContext(ctx, `SELECT 1 FROM `+shadowCallsTable+` WHERE 1 = 0`).Scan(&one); !errors.Is(err, sql.ErrNoRows) {
		return nil // no such table (or no answer, which the command meets next): not a shadow database
	}
	return usageErr("%s: database %s is a shadow database (it has %s): what it holds is sent only by 'inboxctl run --shadow', which records instead of sending; give the production database, or run with --shadow", command, t.Display, shadowCallsTable)
}

// shadowRecorder stands in for every destination of a shadow run: the
// relay's sends (its SendFunc) and the consumer's dead-letter and reject
// publishes (a dlq.Publisher). Each is one INSERT into the shadow
// database's INBOXKIT_SHADOW_CALLS, confirmed once it committed (the
// consumer acknowledges a dead-lettered delivery after it, as after a
// broker's confirm). It sends nothing anywhere.
type shadowRecorder struct {
	db               *sql.DB
	d                inbox.Dialect
	dlq, rejectQueue string
	insertSQ         string
}

var _ dlq.Publisher = (*shadowRecorder)(nil)

// newShadowRecorder creates INBOXKIT_SHADOW_CALLS when it is missing.
func newShadowRecorder(ctx context.Context, db *sql.DB, d inbox.Dialect, dlqName, rejectQueue string) (*shadowRecorder, error) {
	blob, text, ts := "BYTEA", "TEXT", "TIMESTAMP" // PostgreSQL; checkShadowDB refused the others
	if d.Name() == "mysql" {
		blob, text, ts = "LONGBLOB", "LONGTEXT", "DATETIME(6)"
	}
	ddl := `CREATE TABLE IF NOT EXISTS ` + shadowCallsTable + ` (
    KIND           VARCHAR(20)  NOT NULL,
    DESTINATION    VARCHAR(400) NOT NULL,
    MESSAGE_ID     VARCHAR(200),
    CAUSE_EVENT_ID VARCHAR(200),
    CORRELATION_ID VARCHAR(200),
    ATTEMPT        INTEGER      NOT NULL,
    HEADERS        ` + text + `,
    BODY           ` + blob + `,
    RECORDED_AT    ` + ts + `    NOT NULL
)`
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return nil, fmt.Errorf("run --shadow: create %s in the shadow database: %w", shadowCallsTable, err)
	}
	return &shadowRecorder{db: db, d: d, dlq: dlqName, rejectQueue: rejectQueue,
		insertSQ: d.Rebind(`INSERT INTO ` + shadowCallsTable + ` (KIND, DESTINATION, MESSAGE_ID, CAUSE_EVENT_ID, CORRELATION_ID, ATTEMPT, HEADERS, BODY, RECORDED_AT) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)}, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (r *shadowRecorder) record(ctx context.Context, kind, dest, msgID, cause, corr string, attempt int, headers map[string]string, body []byte) error {
	h, err := json.Marshal(headers)
	if err != nil {
		return err
	}
	_, err = r.db.ExecContext(ctx, r.insertSQ, kind, dest, nullable(msgID), nullable(cause), nullable(corr), attempt, string(h), body, r.d.TimeArg(time.Now()))
	if err != nil {
		return fmt.Errorf("shadow: record %s to %s: %w", kind, dest, err)
	}
	return nil
}

// Publish records a dead-letter or reject envelope (or any other publish of
// the consumer) instead of sending it.
func (r *shadowRecorder) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	kind := shadowKindMessage
	switch destination {
	case r.dlq:
		kind = shadowKindDeadLetter
	case r.rejectQueue:
		kind = shadowKindReject
	}
	ev := headers[dlq.HeaderEventID]
	return r.record(ctx, kind, destination, ev, ev, headers[dlq.HeaderCorrelationID], 1, headers, body)
}

// Send is the shadow relay's outbox.RelayConfig.SendFunc: it records the
// message the relay would have sent (the row is then marked SENT in the
// shadow outbox: recorded, never sent).
func (r *shadowRecorder) Send(ctx context.Context, m outbox.Outgoing) error {
	h := m.Headers
	if strings.HasPrefix(m.Destination, "http://") || strings.HasPrefix(m.Destination, "https://") {
		h = make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			h[k] = v
		}
		h["Idempotency-Key"] = m.ID
	} else if m.Destination != logLetters {
		h = m.BrokerHeaders()
	}
	return r.record(ctx, shadowKindOutbox, m.Destination, m.ID, m.CauseEventID, m.CorrelationID, m.Attempt, h, m.Body)
}

// productionDBURL is --production-db or its environment variable.
func (f *shadowRunFlags) productionDBURL() string { return orEnv(f.productionDB, envProductionDB) }
