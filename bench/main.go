// Command bench measures inboxkit side by side with what else a Go user
// would write for the same job, in one invocation, and prints tables with
// ratios. It is a module of its own, so the inboxkit module never depends
// on Watermill.
//
//	cd bench && go run . -n 20000 -handlers 1,4 -batch 16
//
// Sections (-sections, default all):
//
//	e2e      RabbitMQ classic durable queue -> PostgreSQL, the same n messages
//	         (round(n*dup) producer resends) loaded for each consumer in turn,
//	         one shipping_letters row per distinct event: a raw database/sql
//	         twin (amqp091 + BEGIN, inbox INSERT, letter INSERT, COMMIT),
//	         inboxkit single-message (and "single in tx": Config.EffectsInTx,
//	         the first INSERT with the letter), inboxkit store-then-process (done
//	         when every event is processed; "in tx": its workers' batches
//	         without savepoints; "prefetch=handlers": at the prefetch the
//	         side-by-side instrument sets, below its receivers), inboxkit batch
//	         (consumer.Config.BatchSize = -batch; 0 leaves the rows out) with
//	         savepoints and "in tx" (Config.EffectsInTx: none), and a
//	         Watermill router (AMQP subscriber, Retry + PoisonQueue
//	         middleware, pgx). Every run checks exactly one letter per
//	         distinct event. -e2e-consumers runs only the rows named.
//	library  inbox.Store.Process beside the same SQL by raw database/sql, for
//	         a new message, a marked one (the marker committed on its own,
//	         then the claim) and a duplicate, at -c goroutines.
//	pgbench  the database's own limit: /usr/bin/pgbench (C client) with
//	         custom scripts on the library section's tables, one message
//	         per transaction, -batch per transaction as plain statements,
//	         and with a SAVEPOINT per message, beside Store.Process of a
//	         first delivery and Store.ProcessBatch of -batch with
//	         savepoints and with BatchItem.EffectsInTx, at -c clients; and
//	         the paths' own cost: pgbench with inboxkit's statements for a
//	         marked delivery and for store-then-process, beside
//	         Store.Process of a marked delivery.
//	big      Store.Process at -big-cs goroutines (default -big-c) on an empty
//	         inbox and on one with -big rows (generate_series; kept in
//	         schema inboxbench_big for the next run, -keep-big=false drops
//	         it), beside the raw database/sql twin on the same tables, with
//	         random and with time-ordered event ids.
//	purge    Store.Purge of -purge rows (PurgeOptions.MaxRowsPerSecond =
//	         -purge-rate) while Store.Process ingests at -big-c goroutines,
//	         beside the ingest rate just before, for -rounds rounds.
//	outbox   Store.Process with one outbox.Add beside Store.Process alone
//	         (-c goroutines); a relay to RabbitMQ draining -outbox-n
//	         messages (keyless, 100 keys, beside -outbox-sent SENT rows), and
//	         its write-to-confirm lag at -outbox-rate msg/s and at
//	         saturation (-big-c writers) for -d; -outbox-backlog n: the
//	         relay's first -outbox-n sends of n pending messages, without
//	         and beside -outbox-sent SENT rows (generate_series).
//	         outbox-write and outbox-relay are its two halves.
//	outbox-peer  inboxkit's relay beside Watermill's SQL publisher +
//	         Forwarder (one letter row + one message per transaction, to
//	         RabbitMQ with confirms): a drain of -outbox-n, -outbox-rate
//	         msg/s and -big-c writers for -d; throughput and lag.
//	scaleout -procs (1,2,4) `inboxctl run` processes (--concurrency
//	         -procs-c each) on a quorum queue of a 3-node RabbitMQ
//	         cluster and on a 3-replica stream of a 3-node JetStream
//	         cluster (-rabbit-cluster, -nats-cluster: scripts/rabbit-cluster
//	         and scripts/nats-cluster, started beforehand), the n messages
//	         preloaded; beside them the same transactions by a loop with
//	         no broker at the same total concurrency. Run only when named.
//
// e2e runs on -broker rabbitmq (the default) or stomp (ActiveMQ at -stomp),
// and e2e and library on -db postgres (the default) or mysql (MariaDB at
// -mysql, a database per measurement). Watermill's row is there on
// RabbitMQ with PostgreSQL; elsewhere the raw twin is the comparison.
//
// Needs PostgreSQL (-dsn, INBOXKIT_TEST_POSTGRES) and RabbitMQ (-amqp),
// or the broker and database named.
// Figures are ratios within one run: the machine's load moves the rest.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inboxkit/inboxkit/consumer"
)

type options struct {
	amqp, dsn         string
	broker, stompAddr string
	db                dbKind
	mysqlDSN          string
	n                 int
	dup               float64
	seed              uint64
	handlers          []int
	batch             int
	prefetch          int
	watermillPrefetch int
	rounds            int
	concs             []int
	dur               time.Duration
	big, bigConc      int
	bigConcs          []int
	keepBig           bool
	purge             int
	purgeBatch        int
	purgeRate         int
	bigSchema         string
	outboxN           int
	outboxSent        int
	outboxBacklog     int
	outboxRate        int
	rabbitCluster     string
	natsCluster       string
	procs             []int
	scaleConc         int
	inboxctl          string
	sections          map[string]bool
	consumers         string
	out, log          io.Writer // tables; progress lines
}

func main() {
	var o options
	var handlers, concs, procs, sections, bigConcs string
	flag.StringVar(&o.amqp, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	var dbName string
	flag.StringVar(&o.broker, "broker", "rabbitmq", "e2e: broker (rabbitmq, or stomp: ActiveMQ at -stomp)")
	flag.StringVar(&o.stompAddr, "stomp", envOr("INBOXKIT_STOMP_ADDR", "127.0.0.1:61613"), "e2e -broker stomp: ActiveMQ's STOMP address (scripts/activemq start)")
	flag.StringVar(&storeDriver, "store-driver", storeDriver, "PostgreSQL: the database/sql driver of inboxkit's stores (inboxkit-pgx, as inboxctl; or pgx, pgx's plain driver); the raw twins use pgx")
	flag.StringVar(&dbName, "db", "postgres", "e2e, library: database (postgres, or mysql: MariaDB at -mysql)")
	flag.StringVar(&o.mysqlDSN, "mysql", envOr("INBOXKIT_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/"), "-db mysql: MariaDB DSN of go-sql-driver/mysql (a database per measurement is created and dropped)")
	flag.StringVar(&o.dsn, "dsn", envOr("INBOXKIT_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN (a schema per measurement is created and dropped)")
	flag.IntVar(&o.n, "n", 20000, "e2e: messages per consumer run, resends included")
	flag.Float64Var(&o.dup, "dup", 0.2, "e2e: share of producer resends")
	flag.Uint64Var(&o.seed, "seed", 1, "e2e: seed of the send plan")
	flag.StringVar(&handlers, "handlers", "1,4", "e2e: handler counts (inboxkit Concurrency, Watermill router handlers, raw goroutines)")
	flag.IntVar(&o.batch, "batch", 16, "e2e: inboxkit batch size for the batch row (0: no batch row); pgbench: messages per batch transaction")
	flag.IntVar(&o.prefetch, "prefetch", 0, "e2e: prefetch of the raw twin and inboxkit (0: 2 x handlers x batch size; store-then-process 2 x its receivers)")
	flag.IntVar(&o.watermillPrefetch, "watermill-prefetch", 0, "e2e: Watermill subscriber prefetch (0: its durable-queue default, 1 per handler)")
	flag.StringVar(&o.consumers, "e2e-consumers", "", "e2e: the rows to run, comma-separated (watermill, raw database/sql, single, store-then-process, batch N; empty: all)")
	flag.IntVar(&o.rounds, "rounds", 1, "interleaved rounds (medians are printed)")
	flag.StringVar(&concs, "c", "1,4,16", "library, pgbench: goroutines (pgbench: clients)")
	flag.DurationVar(&o.dur, "d", 5*time.Second, "library, pgbench, big, purge: duration of one cell")
	flag.IntVar(&o.big, "big", 10_000_000, "big: rows already in the inbox")
	flag.IntVar(&o.bigConc, "big-c", 4, "big, purge: ingest goroutines")
	flag.StringVar(&bigConcs, "big-cs", "", "big: goroutine counts, comma-separated (empty: -big-c)")
	flag.BoolVar(&o.keepBig, "keep-big", true, "big: keep the generated table (schema inboxbench_big) for the next run")
	flag.IntVar(&o.purge, "purge", 1_000_000, "purge: rows to purge")
	flag.IntVar(&o.purgeBatch, "purge-batch", 0, "purge: rows per purge transaction (0: PurgeOptions' default, 1000)")
	flag.IntVar(&o.purgeRate, "purge-rate", 0, "purge: PurgeOptions.MaxRowsPerSecond (0: its default; -1: no cap)")
	flag.StringVar(&o.bigSchema, "big-schema", "inboxbench_big", "big: schema of the generated table")
	flag.IntVar(&o.outboxN, "outbox-n", 20000, "outbox: messages of each relay drain")
	flag.IntVar(&o.outboxSent, "outbox-sent", 1_000_000, "outbox: SENT rows beside the backlog of the third drain")
	flag.IntVar(&o.outboxBacklog, "outbox-backlog", 0, "outbox: with n > 0, the third and fourth drains time the next -outbox-n of n pending messages (generate_series, made once and drained a round at a time), without and beside -outbox-sent SENT rows")
	flag.IntVar(&o.outboxRate, "outbox-rate", 500, "outbox: messages a second the paced writer adds")
	flag.StringVar(&o.rabbitCluster, "rabbit-cluster", rabbitClusterURL(), "scaleout: URL of the 3-node RabbitMQ cluster (scripts/rabbit-cluster; default from $INBOXKIT_RABBITC_PORT)")
	flag.StringVar(&o.natsCluster, "nats-cluster", natsClusterURL(), "scaleout: URL of the 3-node JetStream cluster (scripts/nats-cluster; default from $INBOXKIT_NATSC_PORT)")
	flag.StringVar(&procs, "procs", "1,2,4", "scaleout: numbers of inboxctl run processes")
	flag.IntVar(&o.scaleConc, "procs-c", 2, "scaleout: --concurrency of each inboxctl run process")
	flag.StringVar(&o.inboxctl, "inboxctl", "", "scaleout: inboxctl binary (default: built from ../cmd/inboxctl)")
	flag.StringVar(&sections, "sections", "e2e,library,pgbench,big,purge,outbox,outbox-peer", "comma-separated sections to run (scaleout, which needs the clusters, only when named)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	flag.Parse()
	var err error
	if o.handlers, err = ints(handlers); err != nil {
		fail(fmt.Errorf("-handlers: %w", err))
	}
	if o.concs, err = ints(concs); err != nil {
		fail(fmt.Errorf("-c: %w", err))
	}
	if bigConcs != "" {
		if o.bigConcs, err = ints(bigConcs); err != nil {
			fail(fmt.Errorf("-big-cs: %w", err))
		}
	}
	if o.procs, err = ints(procs); err != nil {
		fail(fmt.Errorf("-procs: %w", err))
	}
	if o.sections, err = parseSections(sections); err != nil {
		fail(err)
	}
	if o.db, err = kindOf(dbName); err != nil {
		fail(err)
	}
	o.out, o.log = os.Stdout, os.Stderr
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(context.Background(), o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseSections(list string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		switch s = strings.TrimSpace(s); s {
		case "e2e", "library", "pgbench", "big", "purge", "outbox", "outbox-write", "outbox-relay", "outbox-peer", "scaleout":
			m[s] = true
		default:
			return nil, fmt.Errorf("-sections: unknown section %q (e2e, library, pgbench, big, purge, outbox, outbox-write, outbox-relay, outbox-peer, scaleout)", s)
		}
	}
	return m, nil
}

// run runs the selected sections and prints their tables to o.out.
func run(ctx context.Context, o options) error {
	if o.n < 2 || o.dup < 0 || o.dup >= 1 || o.rounds < 1 || o.batch < 0 || (o.sections["scaleout"] && o.scaleConc < 1) {
		return fmt.Errorf("need -n >= 2, 0 <= -dup < 1, -rounds >= 1, -batch >= 0, -procs-c >= 1")
	}
	admin, err := sql.Open("pgx", o.dsn)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return fmt.Errorf("PostgreSQL at -dsn %s does not answer: %w (start it: pg_ctlcluster <version> main start)", o.dsn, err)
	}
	var errs []error
	for _, s := range []struct {
		name string
		run  func(context.Context, *sql.DB, options) error
	}{{"e2e", e2eSection}, {"library", librarySection}, {"pgbench", pgbenchSection}, {"big", bigSection}, {"purge", purgeSection}, {"outbox", outboxSection}, {"outbox-write", outboxWriteCost}, {"outbox-relay", outboxRelay}, {"outbox-peer", outboxPeerSection}, {"scaleout", scaleoutSection}} {
		if !o.sections[s.name] {
			continue
		}
		if err := s.run(ctx, admin, o); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(2)
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// e2eContender is one consumer of the end-to-end section.
type e2eContender struct {
	name        string
	batch       int
	effectsInTx bool
	mode        consumer.Mode
	// perHandler sets the prefetch to the handlers, as the side-by-side
	// instrument outside the repository does, unless -prefetch is set.
	perHandler bool
	run        func(context.Context, e2eRun) (*tally, time.Duration, error)
}

type e2eResult struct {
	rates                 []float64
	seconds               []float64
	processed, duplicates int64
	prefetch              int
	ok                    bool
	err                   error
}

func e2eSection(ctx context.Context, admin *sql.DB, o options) error {
	b, err := newBroker(o)
	if err != nil {
		return err
	}
	defer b.close()
	p := newPlan(o.n, o.dup, o.seed)
	var contenders []e2eContender
	if o.broker == "rabbitmq" && o.db.name == "postgres" {
		// Watermill's peer of this path; on STOMP or MariaDB the raw twin
		// is the comparison.
		contenders = append(contenders, e2eContender{name: "watermill", run: runWatermill})
	}
	contenders = append(contenders,
		e2eContender{name: "raw database/sql", run: runRaw},
		e2eContender{name: "inboxkit single", run: runInboxkit},
		e2eContender{name: "inboxkit single in tx", effectsInTx: true, run: runInboxkit},
		e2eContender{name: "inboxkit store-then-process", mode: consumer.ModeStoreThenProcess, run: runInboxkit},
		e2eContender{name: "inboxkit store-then-process in tx", mode: consumer.ModeStoreThenProcess, effectsInTx: true, run: runInboxkit},
		e2eContender{name: "inboxkit store-then-process prefetch=handlers", mode: consumer.ModeStoreThenProcess, perHandler: true, run: runInboxkit},
	)
	if o.batch > 1 {
		contenders = append(contenders, e2eContender{name: fmt.Sprintf("inboxkit batch %d", o.batch), batch: o.batch, run: runInboxkit},
			e2eContender{name: fmt.Sprintf("inboxkit batch %d in tx", o.batch), batch: o.batch, effectsInTx: true, run: runInboxkit})
	}
	if o.consumers != "" {
		keep := strings.Split(o.consumers, ",")
		contenders = slices.DeleteFunc(contenders, func(c e2eContender) bool {
			return !slices.Contains(keep, strings.TrimPrefix(c.name, "inboxkit "))
		})
	}
	results := map[string]*e2eResult{}
	key := func(h int, c string) string { return strconv.Itoa(h) + "/" + c }
	for round := 1; round <= o.rounds; round++ {
		for _, h := range o.handlers {
			for _, c := range contenders {
				r := results[key(h, c.name)]
				if r == nil {
					r = &e2eResult{ok: true}
					results[key(h, c.name)] = r
				}
				if r.err != nil {
					continue
				}
				res, err := e2eOnce(ctx, admin, b, o, p, h, c)
				fmt.Fprintf(o.log, "e2e round %d handlers %d %-18s %s\n", round, h, c.name, res.line(err))
				if err != nil {
					r.err = err
					continue
				}
				r.rates = append(r.rates, res.rate)
				r.seconds = append(r.seconds, res.seconds)
				r.processed, r.duplicates, r.prefetch = res.processed, res.duplicates, res.prefetch
				r.ok = r.ok && res.ok
			}
		}
	}
	fmt.Fprintf(o.out, "\nEnd to end: %s -> %s, %d messages (%d distinct + %d producer resends), one shipping_letters row per event; median of %d round(s)\n\n",
		b.label(), o.db.label, o.n, p.Distinct, p.Resends, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "handlers\tconsumer\tprefetch\tseconds\tmsgs/s\tvs watermill\tvs raw\tvs single\tprocessed\tduplicates\tone letter per event\t\n")
	failed := false
	for _, h := range o.handlers {
		rate := func(name string) float64 { // 0 for a row left out (ratio prints "-")
			if r := results[key(h, name)]; r != nil {
				return median(r.rates)
			}
			return 0
		}
		wm, raw, single := rate("watermill"), rate("raw database/sql"), rate("inboxkit single")
		for _, c := range contenders {
			r := results[key(h, c.name)]
			if r.err != nil {
				fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t-\t-\t-\t-\t-\terror: %v\t\n", h, c.name, r.err)
				failed = true
				continue
			}
			m := median(r.rates)
			vsSingle := "-"
			if strings.HasPrefix(c.name, "inboxkit") {
				vsSingle = ratio(m, single)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%d\t%d\t%v\t\n", h, c.name, r.prefetch, median(r.seconds), m, ratio(m, wm), ratio(m, raw), vsSingle, r.processed, r.duplicates, r.ok)
			failed = failed || !r.ok
		}
	}
	tw.Flush()
	if failed {
		return fmt.Errorf("a consumer failed or wrote other than one letter per event (see the table)")
	}
	return nil
}

type e2eOnceResult struct {
	reclaimed             int // store-then-process entries claimed more than once
	rate, seconds         float64
	processed, duplicates int64
	letters, events       int
	prefetch              int
	ok                    bool
}

func (r e2eOnceResult) line(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%6.0f msgs/s  %6.2f s  processed %d duplicates %d letters %d events %d reclaimed %d ok %v", r.rate, r.seconds, r.processed, r.duplicates, r.letters, r.events, r.reclaimed, r.ok)
}

// e2eOnce gives one consumer a fresh schema and a fresh queue loaded with
// the plan, runs it until every message settled, and checks the letters.
func e2eOnce(ctx context.Context, admin *sql.DB, b e2eBroker, o options, p plan, handlers int, c e2eContender) (e2eOnceResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	sc, err := newDB(ctx, admin, o, "inboxbench_e2e_"+suffix(), 2*handlers+4)
	if err != nil {
		return e2eOnceResult{}, err
	}
	defer sc.drop(admin)
	if _, err := sc.DB.ExecContext(ctx, o.db.lettersDDL); err != nil {
		return e2eOnceResult{}, err
	}
	queue := "inboxbench.e2e." + suffix()
	defer b.cleanup(queue)
	if err := b.load(ctx, queue, p); err != nil {
		return e2eOnceResult{}, err
	}
	r := e2eRun{AMQP: o.amqp, Broker: b, DB: o.db, Queue: queue, Schema: sc, Handlers: handlers, Batch: c.batch, EffectsInTx: c.effectsInTx, Mode: c.mode, Expect: len(p.Messages), Distinct: p.Distinct}
	if c.name == "watermill" {
		r.Prefetch = o.watermillPrefetch
	} else {
		r.Prefetch = o.prefetch
		switch {
		case r.Prefetch != 0:
		case c.perHandler:
			r.Prefetch = handlers
		case c.mode == consumer.ModeStoreThenProcess: // a delivery in hand and one on its way per receiver
			r.Prefetch = 2 * consumer.DefaultReceivers(handlers)
		default:
			r.Prefetch = 2 * handlers * max(c.batch, 1)
		}
	}
	t, elapsed, err := c.run(ctx, r)
	if err != nil {
		return e2eOnceResult{}, err
	}
	res := e2eOnceResult{processed: t.processed.Load(), duplicates: t.duplicates.Load(), prefetch: r.Prefetch, seconds: elapsed.Seconds()}
	if r.Prefetch == 0 {
		res.prefetch = 1 // Watermill's durable-queue default
	}
	res.rate = float64(len(p.Messages)) / elapsed.Seconds()
	res.letters, res.events, err = letterCheck(ctx, sc.DB)
	if err != nil {
		return res, err
	}
	if c.mode == consumer.ModeStoreThenProcess {
		// An entry claimed more than once waited for a lease to expire.
		if err := sc.DB.QueryRowContext(ctx, `SELECT count(*) FROM INBOX_EVENT_PROCESSING WHERE ATTEMPTS > 1`).Scan(&res.reclaimed); err != nil {
			return res, err
		}
	}
	received, want := res.duplicates, int64(p.Resends)
	if c.mode == consumer.ModeStoreThenProcess {
		// Every event is stored once; a resend that found its entry still
		// open is stored too, one that found it processed a duplicate.
		received, want = received+t.stored.Load(), want+int64(p.Distinct)
	}
	res.ok = res.letters == p.Distinct && res.events == p.Distinct && res.processed == int64(p.Distinct) && received == want
	return res, nil
}
