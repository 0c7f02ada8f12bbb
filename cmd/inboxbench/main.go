// Command inboxbench measures end-to-end consumer throughput of inboxkit on
// every broker it can reach, with the inbox on PostgreSQL, and prints a
// table broker × concurrency × messages per second.
//
// Run it from the repository root:
//
//	go run ./cmd/inboxbench                 # 2,000 messages, concurrency 1 and 4, all brokers
//	go run ./cmd/inboxbench -n 5000 -c 1,4,8 -brokers stomp,embedded
//	go run ./cmd/inboxbench -brokers stomp,stomp-stock   # also a stock-configured ActiveMQ
//
// For each broker and concurrency it creates a fresh PostgreSQL schema and
// fresh queue, publishes n events (8 publishers, each publish confirmed by
// the broker), then starts a consumer with the inbox and a business handler
// writing one row per event (consumertest.Throughput) and times it from its
// start until every event is PROCESSED: receive, inbox transaction with the
// business row, commit, acknowledge. Brokers:
//
//	stomp      ActiveMQ Classic over STOMP at 127.0.0.1:61613 (scripts/activemq start)
//	stomp-stock  ActiveMQ with the shipped STOMP connector settings (no
//	           transport.tcpNoDelay) at -stomp-stock-addr, started with
//	           INBOXKIT_ACTIVEMQ_STOCK=1 INBOXKIT_ACTIVEMQ_DIR=/tmp/inboxkit-activemq-stock
//	           INBOXKIT_ACTIVEMQ_OPENWIRE_PORT=61626 INBOXKIT_ACTIVEMQ_STOMP_PORT=61623 scripts/activemq start
//	rabbitmq   RabbitMQ at amqp://guest:guest@127.0.0.1:5672/, quorum queues
//	amqp10     the same RabbitMQ over AMQP 1.0 (plugin rabbitmq_amqp1_0), quorum queues
//	jetstream  NATS JetStream at nats://127.0.0.1:4222
//	embedded   JetStream embedded in this process (file store in a temp dir)
//
// A broker that cannot be reached is reported in the table, not fatal.
// PostgreSQL comes from INBOXKIT_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// broker opens sources and a publisher for one broker.
type broker struct {
	newSource func(ctx context.Context, queue string, prefetch int) (consumer.Source, error)
	publisher func(ctx context.Context) (dlq.Publisher, func(), error)
	prepare   func(ctx context.Context, queue string) (cleanup func(), err error)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var stockAddr string

func main() {
	n := flag.Int("n", 2000, "messages per measurement")
	conc := flag.String("c", "1,4", "comma-separated consumer concurrencies")
	names := flag.String("brokers", "stomp,rabbitmq,amqp10,jetstream,embedded", "comma-separated brokers (stomp, rabbitmq, amqp10, jetstream, embedded; also stomp-stock)")
	flag.StringVar(&stockAddr, "stomp-stock-addr", "127.0.0.1:61623", "STOMP address of the stock-configured ActiveMQ (broker stomp-stock)")
	flag.Parse()
	var concs []int
	for _, s := range strings.Split(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "inboxbench: bad concurrency %q\n", s)
			os.Exit(2)
		}
		concs = append(concs, c)
	}
	pg := os.Getenv("INBOXKIT_TEST_POSTGRES")
	if pg == "" {
		pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "broker\tconcurrency\tmessages\tpublish s\tconsume s\tmsgs/s\t\n")
	failed := false
	for _, name := range strings.Split(*names, ",") {
		name = strings.TrimSpace(name)
		b, stop, err := open(name)
		if err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tunavailable: %v\t\n", name, err)
			failed = true
			continue
		}
		for _, c := range concs {
			r, err := measure(b, pg, *n, c)
			if err != nil {
				fmt.Fprintf(tw, "%s\t%d\t%d\t-\t-\terror: %v\t\n", name, c, *n, err)
				failed = true
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.0f\t\n", name, c, r.Messages, r.Published.Seconds(), r.Consumed.Seconds(), r.PerSecond)
		}
		stop()
	}
	tw.Flush()
	if failed {
		os.Exit(1)
	}
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func measure(b broker, pgDSN string, n, conc int) (consumertest.ThroughputResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db, drop, err := freshSchema(ctx, pgDSN)
	if err != nil {
		return consumertest.ThroughputResult{}, err
	}
	defer drop()
	queue := "inboxbench." + suffix()
	if b.prepare != nil {
		cleanup, err := b.prepare(ctx, queue)
		if err != nil {
			return consumertest.ThroughputResult{}, err
		}
		defer cleanup()
	}
	pub, closePub, err := b.publisher(ctx)
	if err != nil {
		return consumertest.ThroughputResult{}, err
	}
	defer closePub()
	var src consumer.Source
	defer func() {
		if src != nil {
			src.Close()
		}
	}()
	return consumertest.Throughput(ctx, consumertest.ThroughputConfig{
		Messages: n, Concurrency: conc, Queue: queue, Publisher: pub, DB: db, Dialect: inbox.Postgres,
		NewSource: func(ctx context.Context, q string) (consumer.Source, error) {
			s, err := b.newSource(ctx, q, 2*conc)
			src = s
			return s, err
		},
	})
}

// freshSchema creates a PostgreSQL schema and returns a pool using it.
func freshSchema(ctx context.Context, base string) (*sql.DB, func(), error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return nil, nil, err
	}
	schema := "bench_" + suffix()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		admin.Close()
		return nil, nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		admin.Close()
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		_, _ = admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	}, nil
}

// brokerURLs are the URLs of the brokers by name; stomp-stock's is set from
// -stomp-stock-addr.
var brokerURLs = map[string]string{
	"stomp":     "stomp://127.0.0.1:61613",
	"rabbitmq":  "amqp://guest:guest@127.0.0.1:5672/",
	"amqp10":    "amqp10://guest:guest@127.0.0.1:5672",
	"jetstream": "nats://127.0.0.1:4222",
	"embedded":  "embedded",
}

// open opens the broker called name with brokerurl (which chooses the
// adapter), plus what the measurement needs around it: queues declared
// before publishing and removed afterwards.
func open(name string) (broker, func(), error) {
	raw := brokerURLs[name]
	if name == "stomp-stock" {
		raw = "stomp://" + stockAddr
	}
	if raw == "" {
		return broker{}, nil, fmt.Errorf("unknown broker (use stomp, stomp-stock, rabbitmq, amqp10, jetstream, embedded)")
	}
	// rabbitmq and amqp10 measure quorum queues.
	b, err := brokerurl.Open(raw, brokerurl.Options{Logger: quiet, QueueType: "quorum"})
	if err != nil {
		return broker{}, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	probe, err := b.Publisher(ctx)
	if err != nil {
		b.Close()
		if b.URL.Kind == brokerurl.STOMP {
			err = fmt.Errorf("%v (start it with scripts/activemq start)", err)
		}
		return broker{}, nil, err
	}
	probe.Close()
	br := broker{
		newSource: func(ctx context.Context, queue string, prefetch int) (consumer.Source, error) {
			return b.Source(ctx, queue, "inboxbench", prefetch)
		},
		publisher: func(ctx context.Context) (dlq.Publisher, func(), error) {
			p, err := b.Publisher(ctx)
			if err != nil {
				return nil, nil, err
			}
			return p, func() { p.Close() }, nil
		},
	}
	stop := func() { b.Close() }
	switch b.URL.Kind {
	case brokerurl.AMQP, brokerurl.AMQP10:
		// The queues are declared (and deleted) over AMQP 0-9-1, as quorum
		// queues: AMQP 1.0 has no queue management.
		conn, err := amqp.Dial(brokerURLs["rabbitmq"])
		if err != nil {
			b.Close()
			return broker{}, nil, err
		}
		br.prepare = func(ctx context.Context, queue string) (func(), error) {
			ch, err := conn.Channel()
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			for _, q := range []string{queue, queue + ".dlq"} {
				if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
					return nil, err
				}
			}
			return func() {
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(queue, false, false, false)
					_, _ = ch.QueueDelete(queue+".dlq", false, false, false)
					ch.Close()
				}
			}, nil
		}
		stop = func() { conn.Close(); b.Close() }
	case brokerurl.NATS, brokerurl.Embedded:
		nc, err := nats.Connect(b.NATSURL(), nats.Timeout(3*time.Second))
		if err != nil {
			b.Close()
			return broker{}, nil, err
		}
		js, err := natsjs.New(nc)
		if err != nil {
			nc.Close()
			b.Close()
			return broker{}, nil, err
		}
		br.prepare = func(ctx context.Context, queue string) (func(), error) {
			// The source creates the queue's work-queue stream; the DLQ's
			// stream is made by the first dead letter.
			src, err := b.Source(ctx, queue, "inboxbench", 1)
			if err != nil {
				return nil, err
			}
			src.Close()
			return func() {
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = js.DeleteStream(dctx, jetstream.StreamName(queue))
				_ = js.DeleteStream(dctx, jetstream.StreamName(queue+".dlq"))
			}, nil
		}
		stop = func() { nc.Close(); b.Close() }
	}
	return br, stop, nil
}
