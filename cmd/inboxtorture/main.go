// Command inboxtorture is the torture rig of inboxkit: it proves with a
// ledger that the invoice consumer does every event's business effect
// exactly once, loses nothing and leaves nothing stuck while its processes
// are killed (kill -9 at random times, and at named failpoints), restarted,
// and the database and the broker restart under them.
//
// It publishes --messages invoice events (valid ones, business rejects and
// poison messages in known numbers) with --resend-pct producer resends, some
// while the first copy is in flight, some after it was finished; runs
// --consumers `inboxctl run` processes built with -tags failpoints
// competing on one queue; kills and restarts them; waits until the inbox is
// quiet; then checks every event against the database and the dead-letter
// queue and prints one table. Exit 0 when the ledger balances, 1 when any
// event is lost, doubled or stuck, 2 on a usage or setup error.
//
//	scripts/torture-services start
//	go run ./cmd/inboxtorture --private --broker stomp --messages 10000 --kills 10 --restart-db --restart-broker
//
// --scenario outbox runs the claims story end to end instead: the rig sends
// commands (key and per-key sequence, with producer retries) to sender
// processes that write a business row and an outbox row in one
// transaction; inboxctl relay processes publish them; receivers consume
// with the inbox and write their own row; senders, relays and receivers
// are killed every few seconds. Its ledger: every command exactly once at
// the receiver, each key's sequence strictly rising there, no outbox row
// left unsent (docs/torture.md).
//
// --private points the rig at the private PostgreSQL and broker that
// scripts/torture-services runs on their own ports, and restarts those
// (with the same script), so that a run disturbs no one else using the
// machine's services. The database is a fresh PostgreSQL database created for the run (dropped
// afterwards unless --keep or the ledger fails). Run it from the repository
// root: it builds cmd/inboxctl with the failpoints tag and the default
// ActiveMQ restart uses scripts/activemq.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// config is the rig's configuration (the flags).
type config struct {
	broker      string // stomp, rabbitmq, nats or a URL
	brokerURL   string
	adminDB     string
	inboxctl    string
	messages    int
	resendPct   int
	rejects     int
	poison      int
	consumers   int
	concurrency int
	batch       int
	mode        string
	maxAttempts int
	kills       int
	failpoints  string
	restartDB   bool
	restartBrk  bool
	dbRestart   string
	brkRestart  string
	timeout     time.Duration
	quiet       time.Duration
	seed        uint64
	logDir      string
	keep        bool
	verbose     bool
	private     bool

	// The outbox scenario (--scenario outbox).
	scenario   string
	agent      string
	keys       int
	senders    int
	relays     int
	receivers  int
	producers  int
	killEvery  time.Duration
	relayLease time.Duration
	jsAckWait  time.Duration

	// The soak (issue 29, item 4; soak.go).
	soak         bool
	cluster      string
	dbOutage     time.Duration
	brokerOutage time.Duration
	stops        int
	stopFor      time.Duration
	garbleAfter  int

	// The order scenario (--scenario order).
	failPct      int
	orderKey     string
	onPoison     string
	singleActive bool
	exclusive    bool
}

const defaultFailpoints = "after-commit-before-ack:0.01,mid-handler:0.01,after-dlq-publish-before-mark:0.05"

// outboxFailpoints are the default failpoints of the outbox scenario: the
// receivers' (after-commit-before-ack, mid-handler) and the relays'
// (after-send-before-mark).
const outboxFailpoints = "after-commit-before-ack:0.005,mid-handler:0.005,after-send-before-mark:0.002"

// orderFailpoints are the default failpoints of the order scenario.
const orderFailpoints = "after-commit-before-ack:0.002,mid-handler:0.002"

// Default restart commands: the machine's own start commands.
const (
	pgRestart   = `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart`
	amqRestart  = `scripts/activemq restart`
	rmqRestart  = `rabbitmqctl stop_app && rabbitmqctl start_app`
	natsRestart = `start-stop-daemon --stop --oknodo --retry 10 --exec /usr/sbin/nats-server && ` +
		`start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log`
)

// Private instances: the ones scripts/torture-services starts on their own
// ports and data directories (the same environment variables choose the
// ports), restarted with the same script, so that a run with restarts
// disturbs no other user of the machine's services.
func privateServices() (db string, brokers map[string]struct{ url, restart string }) {
	port := func(env, def string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return def
	}
	const svc = "scripts/torture-services restart "
	stomp := struct{ url, restart string }{"stomp://127.0.0.1:" + port("INBOXKIT_TORTURE_STOMP_PORT", "61633"), svc + "activemq"}
	rmq := struct{ url, restart string }{"amqp://guest:guest@127.0.0.1:" + port("INBOXKIT_TORTURE_AMQP_PORT", "5673") + "/", svc + "rabbitmq"}
	nats := struct{ url, restart string }{"nats://127.0.0.1:" + port("INBOXKIT_TORTURE_NATS_PORT", "4223"), svc + "nats"}
	return "postgres://postgres@127.0.0.1:" + port("INBOXKIT_TORTURE_PG_PORT", "5433") + "/postgres?sslmode=disable",
		map[string]struct{ url, restart string }{"stomp": stomp, "activemq": stomp, "rabbitmq": rmq, "nats": nats, "jetstream": nats}
}

const privateDBRestart = "scripts/torture-services restart pg"

var brokers = map[string]struct{ url, restart string }{
	"stomp":     {"stomp://127.0.0.1:61613", amqRestart},
	"activemq":  {"stomp://127.0.0.1:61613", amqRestart},
	"rabbitmq":  {"amqp://guest:guest@127.0.0.1:5672/", rmqRestart},
	"nats":      {"nats://127.0.0.1:4222", natsRestart},
	"jetstream": {"nats://127.0.0.1:4222", natsRestart},
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("inboxtorture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.broker, "broker", "stomp", "stomp (ActiveMQ), rabbitmq, nats (JetStream), or a URL stomp://, amqp://, nats://")
	fs.StringVar(&c.adminDB, "db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL of a database the rig may connect to; the run gets its own fresh database on that server")
	fs.StringVar(&c.inboxctl, "inboxctl", "", "inboxctl binary built with -tags failpoints (default: build it from ./cmd/inboxctl)")
	fs.IntVar(&c.messages, "messages", 10000, "distinct events published")
	fs.IntVar(&c.resendPct, "resend-pct", 20, "producer resends in percent of --messages (half while in flight, half after processing)")
	fs.IntVar(&c.rejects, "rejects", -1, "events the business rejects (unknown customer); default 2% of --messages")
	fs.IntVar(&c.poison, "poison", -1, "poison events (malformed JSON); default 1% of --messages")
	fs.IntVar(&c.consumers, "consumers", 4, "competing inboxctl run processes")
	fs.IntVar(&c.concurrency, "concurrency", 2, "inboxctl run --concurrency of each process")
	fs.IntVar(&c.batch, "batch", 1, "inboxctl run --batch: messages per database transaction (store-then-process: the workers' batch)")
	fs.StringVar(&c.mode, "mode", "transactional", "inboxctl run --mode: transactional or store-then-process")
	fs.IntVar(&c.maxAttempts, "max-attempts", 5, "inboxctl run --max-attempts")
	fs.IntVar(&c.kills, "kills", 10, "kill -9 of random consumers at random points of the run")
	fs.StringVar(&c.failpoints, "failpoints", defaultFailpoints, "INBOXKIT_FAILPOINTS of the consumers ('' for none)")
	fs.BoolVar(&c.restartDB, "restart-db", false, "restart PostgreSQL once mid-run (--db-restart-cmd)")
	fs.BoolVar(&c.restartBrk, "restart-broker", false, "restart the broker once mid-run (--broker-restart-cmd)")
	fs.StringVar(&c.dbRestart, "db-restart-cmd", pgRestart, "shell command that restarts the database")
	fs.StringVar(&c.brkRestart, "broker-restart-cmd", "", "shell command that restarts the broker (default: the machine's command for --broker)")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up waiting for quiet after this long (what is left counts as stuck)")
	fs.DurationVar(&c.quiet, "quiet", 5*time.Second, "the inbox must not change for this long after every event is final")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock); printed, so a run can be repeated")
	fs.StringVar(&c.logDir, "logs", "", "directory for the consumers' logs (default: none kept)")
	fs.BoolVar(&c.keep, "keep", false, "keep the run's database")
	fs.BoolVar(&c.verbose, "v", false, "log progress")
	fs.StringVar(&c.scenario, "scenario", "invoice", "invoice: events through competing inboxctl run consumers; outbox: commands through senders (business row + outbox row), inboxctl relay processes and inbox receivers; order: per-key sequences through inboxctl run --order-key processes (docs/torture.md)")
	fs.StringVar(&c.agent, "agent", "", "outbox scenario: this command built with -tags failpoints, run as sender and receiver (default: build it from ./cmd/inboxtorture)")
	fs.IntVar(&c.keys, "keys", 100, "outbox scenario: keys the commands are spread over (each key's commands carry a sequence)")
	fs.IntVar(&c.senders, "senders", 2, "outbox scenario: sender processes")
	fs.IntVar(&c.relays, "relays", 2, "outbox scenario: inboxctl relay processes")
	fs.IntVar(&c.receivers, "receivers", 2, "outbox scenario: receiver processes, one per partition queue, each with concurrency 1")
	fs.IntVar(&c.producers, "producers", 8, "outbox scenario: keys the producer sends commands of at once")
	fs.DurationVar(&c.killEvery, "kill-every", 3*time.Second, "outbox scenario: kill -9 a random sender, relay or receiver this often (0: only failpoints)")
	fs.DurationVar(&c.relayLease, "relay-lease", 5*time.Second, "outbox scenario: inboxctl relay --lease (a killed relay's keys wait this long)")
	fs.DurationVar(&c.jsAckWait, "jetstream-ack-wait", 0, "outbox scenario on JetStream: the receivers' durables get MaxAckPending 1 and this AckWait, which keeps a key's order through a receiver's kill (0: brokerurl's durable, MaxAckPending 1000, AckWait 30s)")
	fs.IntVar(&c.failPct, "fail-pct", 1, "order scenario: events (in percent) whose handler fails technically on the first attempt and succeeds on the next")
	fs.StringVar(&c.orderKey, "order-key", "header:JMSXGroupID", "order scenario: inboxctl run --order-key of the consumers ('' for none: the unordered control run)")
	fs.StringVar(&c.onPoison, "on-poison", "dead-letter", "order scenario: inboxctl run --on-poison: dead-letter (the poison key's later events wait for its dead letter, then run) or park-key (they follow it to the DLQ, KEY_PARKED)")
	fs.BoolVar(&c.singleActive, "single-active", true, "order scenario on RabbitMQ: declare the queue single-active-consumer (?single-active-consumer=true); false: competing consumers")
	fs.BoolVar(&c.exclusive, "exclusive", false, "order scenario on ActiveMQ: the consumers subscribe as exclusive consumers (?exclusive=true: one consumes, the others stand by); false: message groups share the keys out")
	fs.BoolVar(&c.soak, "soak", false, "the long run: --messages 100000 --kills 50 --db-outage 60s --broker-outage 60s --stops 2 --timeout 3h (flags given win), with --cluster activemq also --garble-after 50 (docs/torture.md, Soak)")
	fs.StringVar(&c.cluster, "cluster", "", "rabbitmq, nats or activemq: run on the private cluster of scripts/rabbit-cluster (quorum queue), scripts/nats-cluster (3 replicas) or scripts/activemq-pair, with its node kills, and on the private PostgreSQL of scripts/torture-services")
	fs.DurationVar(&c.dbOutage, "db-outage", 0, "instead of a restart, stop the private PostgreSQL at 40 % of the run for this long (implies --restart-db)")
	fs.DurationVar(&c.brokerOutage, "broker-outage", 0, "instead of a restart, stop the broker (the whole --cluster) at 60 % of the run for this long (implies --restart-broker)")
	fs.IntVar(&c.stops, "stops", 0, "SIGSTOP of a random consumer this many times at random points, each for --stop-for, then SIGCONT")
	fs.DurationVar(&c.stopFor, "stop-for", 45*time.Second, "how long a --stops consumer stays stopped: past the store-then-process lease and JetStream's AckWait (30s) and the heartbeats")
	fs.IntVar(&c.garbleAfter, "garble-after", 0, "STOMP only: consumer 0 talks to the broker through a proxy that, from 30 % to 45 % of the run (longer, up to 30 s, until it has garbled a byte), turns each of its connections to garbage after this many frames (0: none)")
	fs.BoolVar(&c.private, "private", false, "use the private PostgreSQL and broker of scripts/torture-services (ports 5433, 61633, 5673, 4223) and restart them with that script: restarts then disturb no one else")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: inboxtorture [flags]\n\n%s\n\nexample:\n  scripts/torture-services start\n  go run ./cmd/inboxtorture --private --broker stomp --messages 10000 --kills 10 --restart-db --restart-broker\n\nflags:\n", strings.TrimSpace(summary))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	known := brokers
	if c.cluster != "" && !set["db"] {
		c.private = true // the cluster's runs use the private PostgreSQL
	}
	if c.private {
		var db string
		db, known = privateServices()
		if !set["db"] {
			c.adminDB = db
		}
		if !set["db-restart-cmd"] {
			c.dbRestart = privateDBRestart
		}
	}
	if b, ok := known[c.broker]; ok {
		c.brokerURL = b.url
		if c.brkRestart == "" {
			c.brkRestart = b.restart
		}
	} else if strings.Contains(c.broker, "://") {
		c.brokerURL = c.broker
		if c.restartBrk && c.brkRestart == "" {
			return c, errors.New("--restart-broker with a broker URL needs --broker-restart-cmd")
		}
	} else {
		return c, fmt.Errorf("--broker %q: use stomp, rabbitmq, nats or a URL", c.broker)
	}
	if (c.soak || c.cluster != "" || c.stops > 0 || c.garbleAfter > 0) && c.scenario != "invoice" {
		return c, errors.New("--soak, --cluster, --stops and --garble-after are for the invoice scenario")
	}
	if err := applySoak(&c, set); err != nil {
		return c, err
	}
	if c.scenario == "order" {
		// The order scenario's defaults: issue 28's run.
		for name, apply := range map[string]func(){
			"consumers": func() { c.consumers = 2 }, "concurrency": func() { c.concurrency = 8 }, "poison": func() { c.poison = 1 },
			"failpoints": func() { c.failpoints = orderFailpoints }, "kill-every": func() { c.killEvery = 15 * time.Second },
			"keys": func() { c.keys = 200 },
		} {
			if !set[name] {
				apply()
			}
		}
		c.rejects = 0
	}
	if c.rejects < 0 {
		c.rejects = c.messages / 50
	}
	if c.poison < 0 {
		c.poison = c.messages / 100
	}
	switch {
	case c.messages < 1:
		return c, errors.New("--messages must be at least 1")
	case c.resendPct < 0 || c.resendPct > 100:
		return c, errors.New("--resend-pct must be 0 to 100")
	case c.consumers < 1:
		return c, errors.New("--consumers must be at least 1")
	case c.mode != "transactional" && c.mode != "store-then-process":
		return c, fmt.Errorf("--mode %q: use transactional or store-then-process", c.mode)
	case c.batch < 1:
		return c, errors.New("--batch must be at least 1")
	case c.kills < 0:
		return c, errors.New("--kills must not be negative")
	case c.scenario != "invoice" && c.scenario != "outbox" && c.scenario != "order":
		return c, fmt.Errorf("--scenario %q: use invoice, outbox or order", c.scenario)
	case c.scenario == "order" && c.onPoison != "dead-letter" && c.onPoison != "park-key":
		return c, fmt.Errorf("--on-poison %q: use dead-letter or park-key", c.onPoison)
	case c.scenario == "order" && c.onPoison == "park-key" && c.orderKey == "":
		return c, errors.New("--on-poison park-key needs an --order-key: only a key can be parked")
	case c.scenario == "order" && (c.keys < 1 || c.failPct < 0 || c.failPct > 100 || c.poison > c.keys):
		return c, errors.New("--scenario order: --keys must be at least 1, --fail-pct 0 to 100, --poison at most --keys (one poison event per key)")
	case c.scenario == "outbox" && (c.keys < 1 || c.senders < 1 || c.relays < 1 || c.receivers < 1 || c.producers < 1):
		return c, errors.New("--keys, --senders, --relays, --receivers and --producers must be at least 1")
	}
	if c.scenario == "outbox" && !set["failpoints"] {
		c.failpoints = outboxFailpoints
	}
	if _, err := failpoint.Parse(c.failpoints); err != nil {
		return c, fmt.Errorf("--failpoints: %v", err)
	}
	return c, nil
}

const summary = `inboxtorture publishes invoice events with producer resends, rejects and poison
messages, runs competing inboxctl consumers built with -tags failpoints, kills
them (kill -9 and failpoints) and restarts them, optionally restarts the
database and the broker, then checks a ledger: every valid event exactly one
business row, every reject REJECTED without one, every poison message in the
DLQ and DEAD_LETTERED, nothing left RECEIVED, IN_PROGRESS or
TECHNICAL_FAILURE, inboxctl check clean. Exit 1 on any lost, doubled or stuck event.`

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(agentMain(role, os.Args[2:], os.Stderr))
	}
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "inboxtorture: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Each scenario's ledger prints itself and says whether it holds.
	var res interface {
		print(io.Writer)
		ok() bool
	}
	switch cfg.scenario {
	case "order":
		res, err = runOrder(ctx, cfg, stderr)
	case "outbox":
		res, err = runOutbox(ctx, cfg, stderr)
	default:
		res, err = run(ctx, cfg, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "inboxtorture: %v\n", err)
		return 2
	}
	res.print(stdout)
	if !res.ok() {
		return 1
	}
	return 0
}
