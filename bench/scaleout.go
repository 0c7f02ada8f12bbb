package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	invoicepkg "github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/outbox"
)

// scaleConsumer is the consumer name every `inboxctl run` process and the
// database loop use (inboxctl's default): the processes share one durable
// consumer on JetStream and compete for one queue on RabbitMQ.
const scaleConsumer = "invoice-consumer"

// rabbitClusterURL is the URL of scripts/rabbit-cluster's nodes with the
// first AMQP port from INBOXKIT_RABBITC_PORT (the script's default 5691),
// queues declared quorum.
func rabbitClusterURL() string {
	p := envInt("INBOXKIT_RABBITC_PORT", 5691)
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/?queue-type=quorum", p, p+1, p+2)
}

// natsClusterURL is the URL of scripts/nats-cluster's nodes (client ports
// INBOXKIT_NATSC_PORT+1..3, the script's default base 14222), streams of 3
// replicas.
func natsClusterURL() string {
	p := envInt("INBOXKIT_NATSC_PORT", 14222)
	return fmt.Sprintf("nats://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?replicas=3", p+1, p+2, p+3)
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// clusterHosts are the host:port pairs of a broker URL's host list.
func clusterHosts(raw string) []string {
	rest := raw[strings.Index(raw, "://")+3:]
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Split(rest, ",")
}

// needCluster dials every node of url and names the start command when
// one does not answer.
func needCluster(url, start string) error {
	for _, h := range clusterHosts(url) {
		c, err := net.DialTimeout("tcp", h, 3*time.Second)
		if err != nil {
			return fmt.Errorf("cluster node %s (of %s) does not answer: %w; start the cluster: %s", h, url, err, start)
		}
		c.Close()
	}
	return nil
}

// scaleBroker is one cluster of the section: how to preload its queue and
// remove it afterwards.
type scaleBroker struct {
	name  string
	url   string
	load  func(ctx context.Context, url, queue string, p plan) error
	clean func(url, queue string)
}

// scaleCell is the median of one row of the table.
type scaleCell struct {
	rates                 []float64
	processed, duplicates int64
	ok                    bool
	err                   error
}

func scaleoutSection(ctx context.Context, admin *sql.DB, o options) error {
	brokers := []scaleBroker{
		{name: "RabbitMQ 3 nodes, quorum queue", url: o.rabbitCluster, load: loadRabbitCluster, clean: cleanRabbitCluster},
		{name: "JetStream 3 nodes, 3 replicas", url: o.natsCluster, load: loadNATSCluster, clean: cleanNATSCluster},
	}
	if err := needCluster(o.rabbitCluster, "scripts/rabbit-cluster start (INBOXKIT_RABBITC_PORT/NAME/DIR for other ports; -rabbit-cluster URL)"); err != nil {
		return err
	}
	if err := needCluster(o.natsCluster, "scripts/nats-cluster start (INBOXKIT_NATSC_PORT for other ports; -nats-cluster URL)"); err != nil {
		return err
	}
	bin := o.inboxctl
	if bin == "" {
		dir, err := os.MkdirTemp("", "inboxbench-scale-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "inboxctl")
		fmt.Fprintf(o.log, "scaleout: go build -o %s ./cmd/inboxctl\n", bin)
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/inboxctl")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build inboxctl (go build ./cmd/inboxctl in the repository; or pass -inboxctl PATH): %w\n%s", err, out)
		}
	}
	p := invoicePlan(newPlan(o.n, o.dup, o.seed))
	logLoad(o.log, "scaleout: start")
	defer logLoad(o.log, "scaleout: end")
	key := func(b string, procs int) string { return b + "/" + strconv.Itoa(procs) }
	cells := map[string]*scaleCell{}
	dbRates := map[int][]float64{}
	dbErr := map[int]error{}
	for round := 1; round <= o.rounds; round++ {
		for _, procs := range o.procs {
			conc := procs * o.scaleConc
			if dbErr[conc] == nil {
				r, err := scaleDBOnce(ctx, admin, o, bin, p, conc)
				fmt.Fprintf(o.log, "scaleout round %d database loop at %d goroutines: %.0f msgs/s %v\n", round, conc, r, errOrOK(err))
				if err != nil {
					dbErr[conc] = err
				} else {
					dbRates[conc] = append(dbRates[conc], r)
				}
			}
			for _, b := range brokers {
				c := cells[key(b.name, procs)]
				if c == nil {
					c = &scaleCell{ok: true}
					cells[key(b.name, procs)] = c
				}
				if c.err != nil {
					continue
				}
				res, err := scaleOnce(ctx, admin, o, bin, b, p, procs)
				fmt.Fprintf(o.log, "scaleout round %d %s, %d process(es): %.0f msgs/s processed %d duplicates %d ok %v %v\n",
					round, b.name, procs, res.rate, res.processed, res.duplicates, res.ok, errOrOK(err))
				if err != nil {
					c.err = err
					continue
				}
				c.rates = append(c.rates, res.rate)
				c.processed, c.duplicates = res.processed, res.duplicates
				c.ok = c.ok && res.ok
			}
		}
	}
	fmt.Fprintf(o.out, "\nScale out: %d messages (%d distinct invoices + %d producer resends) preloaded, then 1 to %d `inboxctl run` processes (--concurrency %d each, --no-relay) against one PostgreSQL; beside it the same transactions by a loop in one process with no broker (Store.Process of a first delivery with the invoice handler) at the same total concurrency; median of %d round(s)\n\n",
		o.n, p.Distinct, p.Resends, o.procs[len(o.procs)-1], o.scaleConc, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "broker\tprocesses\thandlers in all\tmsgs/s\tvs 1 process\tdatabase loop msgs/s\tof the loop\tprocessed\tduplicates\tone row per event\t\n")
	failed := false
	for _, b := range brokers {
		var base float64
		for i, procs := range o.procs {
			c := cells[key(b.name, procs)]
			conc := procs * o.scaleConc
			loop := "-"
			if dbErr[conc] != nil {
				loop = "error: " + dbErr[conc].Error()
				failed = true
			} else if len(dbRates[conc]) > 0 {
				loop = fmt.Sprintf("%.0f", median(dbRates[conc]))
			}
			if c.err != nil {
				fmt.Fprintf(tw, "%s\t%d\t%d\t-\t-\t%s\t-\t-\t-\terror: %v\t\n", b.name, procs, conc, loop, c.err)
				failed = true
				continue
			}
			m := median(c.rates)
			if i == 0 {
				base = m
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%d\t%d\t%v\t\n", b.name, procs, conc, m, ratio(m, base), loop, ratio(m, median(dbRates[conc])), c.processed, c.duplicates, c.ok)
			failed = failed || !c.ok
		}
	}
	tw.Flush()
	if failed {
		return errors.New("a run failed or did not process every invoice exactly once (see the table)")
	}
	return nil
}

// logLoad logs the machine's load average (/proc/loadavg), which the
// figures depend on.
func logLoad(w io.Writer, what string) {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(w, "%s, %s, load average %s\n", what, time.Now().UTC().Format(time.TimeOnly), strings.Join(strings.Fields(string(b))[:3], " "))
	}
}

func errOrOK(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// invoicePlan gives every event of p an invoice body the invoice handler
// accepts (customer K-100 or K-200, which `inboxctl migrate
// --seed-customers` inserts); a resend keeps its original's body.
func invoicePlan(p plan) plan {
	bodies := map[string][]byte{}
	out := p
	out.Messages = make([]event, len(p.Messages))
	for i, m := range p.Messages {
		b, ok := bodies[m.ID]
		if !ok {
			k := len(bodies) + 1
			b = fmt.Appendf(nil, `{"invoiceNo":"I-%d","customerNo":"K-%d00","amount":"%d.%02d","currency":"EUR","issuedAt":"2026-01-05"}`,
				k, 1+k%2, 1+k%1000, k%100)
			bodies[m.ID] = b
		}
		out.Messages[i] = event{ID: m.ID, Correlation: m.Correlation, Body: b}
	}
	return out
}

// scaleSchema makes a schema for one measurement and runs `inboxctl
// migrate --seed-customers` on it: the inbox, the outbox and the invoice
// tables as `inboxctl run` needs them.
func scaleSchema(ctx context.Context, admin *sql.DB, o options, bin string, conns int) (*schema, error) {
	sc, err := newSchema(ctx, admin, o.dsn, "inboxbench_scale_"+suffix(), conns)
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate", "--db", sc.DSN, "--seed-customers").CombinedOutput(); err != nil {
		sc.drop(admin)
		return nil, fmt.Errorf("inboxctl migrate: %w\n%s", err, out)
	}
	return sc, nil
}

// scaleDBOnce runs the plan through Store.Process with the invoice handler
// at conc goroutines, in this process, with no broker: the same
// transaction per message as `inboxctl run` (the inbox row, the customer
// lookup, the letter, the archived document, the outbox row; a resend
// finds its row and does nothing), so its rate is the database's for that
// work at that concurrency.
func scaleDBOnce(ctx context.Context, admin *sql.DB, o options, bin string, p plan, conc int) (float64, error) {
	sc, err := scaleSchema(ctx, admin, o, bin, conc+2)
	if err != nil {
		return 0, err
	}
	defer sc.drop(admin)
	store, err := inbox.New(sc.Store, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		return 0, err
	}
	ob, err := outbox.New(sc.Store, inbox.Postgres, outbox.Config{})
	if err != nil {
		return 0, err
	}
	h, err := invoicepkg.NewHandler(invoicepkg.Config{Dialect: inbox.Postgres, Outbox: ob, LetterDestination: "log:letters"})
	if err != nil {
		return 0, err
	}
	var next atomic.Int64
	var processed, duplicates atomic.Int64
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	began := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(p.Messages) {
					return
				}
				e := p.Messages[i]
				m := inboxkit.Message{ID: e.ID, CorrelationID: e.Correlation, Body: e.Body, FirstDelivery: true,
					Headers: map[string]string{"eventId": e.ID, "correlationId": e.Correlation}}
				res, err := store.Process(ctx, inbox.Entry{EventID: e.ID, ConsumerName: scaleConsumer, CorrelationID: e.Correlation,
					PayloadHash: consumer.PayloadHash(e.Body), FirstDelivery: true, Message: m},
					func(ctx context.Context, tx *sql.Tx) error { return h(ctx, tx, m) })
				if err != nil {
					errs <- err
					return
				}
				switch res.Outcome {
				case inboxkit.OutcomeProcessed:
					processed.Add(1)
				case inboxkit.OutcomeDuplicate:
					duplicates.Add(1)
				default:
					errs <- fmt.Errorf("event %s: outcome %v, want processed or duplicate", e.ID, res.Outcome)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	if processed.Load() != int64(p.Distinct) || duplicates.Load() != int64(p.Resends) {
		return 0, fmt.Errorf("processed %d and duplicates %d, want %d and %d", processed.Load(), duplicates.Load(), p.Distinct, p.Resends)
	}
	return float64(len(p.Messages)) / elapsed.Seconds(), nil
}

// scaleResult is one run of procs processes on one broker.
type scaleResult struct {
	rate                  float64
	processed, duplicates int64
	ok                    bool
}

// scaleProc is one `inboxctl run` process.
type scaleProc struct {
	cmd     *exec.Cmd
	metrics string // base URL of its /metrics and /readyz
	out     *lockedBuffer
	exited  chan error
}

// lockedBuffer is a bytes.Buffer written by a child's stderr copier and
// read on failure.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	return s[max(0, len(s)-2000):]
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// scaleOnce preloads the plan onto a new queue of b, starts procs
// `inboxctl run` processes on it, and measures the rate from the moment
// the last of them is ready (/readyz) to the moment their settled
// deliveries (the sum of their inboxkit_deliveries_total) reach the plan's
// size: the deliveries settled before that moment are left out of the
// rate, so a process's start-up does not count. Then every process is
// stopped (SIGTERM) and the tables are checked: one PROCESSED row and one
// letter per distinct invoice.
func scaleOnce(ctx context.Context, admin *sql.DB, o options, bin string, b scaleBroker, p plan, procs int) (scaleResult, error) {
	var res scaleResult
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	sc, err := scaleSchema(ctx, admin, o, bin, 2)
	if err != nil {
		return res, err
	}
	defer sc.drop(admin)
	queue := "inboxbench.scale." + suffix()
	defer b.clean(b.url, queue)
	if err := b.load(ctx, b.url, queue, p); err != nil {
		return res, fmt.Errorf("preload %s: %w", queue, err)
	}
	var ps []*scaleProc
	defer func() {
		for _, sp := range ps {
			_ = stopProc(sp) // a run that failed already returns its own error
		}
	}()
	for range procs {
		port, err := freePort()
		if err != nil {
			return res, err
		}
		sp := &scaleProc{metrics: fmt.Sprintf("http://127.0.0.1:%d", port), out: &lockedBuffer{}, exited: make(chan error, 1)}
		sp.cmd = exec.Command(bin, "run", "--db", sc.DSN, "--broker", b.url, "--queue", queue, "--no-relay",
			"--concurrency", strconv.Itoa(o.scaleConc), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "warn")
		sp.cmd.Stdout, sp.cmd.Stderr = sp.out, sp.out
		if err := sp.cmd.Start(); err != nil {
			return res, fmt.Errorf("start inboxctl run: %w", err)
		}
		go func() { sp.exited <- sp.cmd.Wait() }()
		ps = append(ps, sp)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var t0 time.Time
	var settled0 int64
	ready := make([]bool, procs)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	seen, since := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		for i, sp := range ps {
			select {
			case err := <-sp.exited:
				sp.exited <- err
				return res, fmt.Errorf("inboxctl run (process %d) exited: %v\n%s", i+1, err, sp.out.tail())
			default:
			}
		}
		if t0.IsZero() {
			all := true
			for i, sp := range ps {
				if !ready[i] {
					r, err := client.Get(sp.metrics + "/readyz")
					if err == nil {
						ready[i] = r.StatusCode == http.StatusOK
						r.Body.Close()
					}
				}
				all = all && ready[i]
			}
			if !all {
				continue
			}
		}
		var settled, dups int64
		for _, sp := range ps {
			s, d, err := settledOf(client, sp.metrics)
			if err != nil {
				return res, err
			}
			settled, dups = settled+s, dups+d
		}
		now := time.Now()
		if t0.IsZero() {
			t0, settled0 = now, settled
		}
		if settled >= int64(len(p.Messages)) {
			if settled == settled0 {
				return res, fmt.Errorf("every message was settled before the last of %d processes was ready: use a larger -n", procs)
			}
			res.rate = float64(settled-settled0) / now.Sub(t0).Seconds()
			res.processed, res.duplicates = settled-dups, dups
			break
		}
		if settled != seen {
			seen, since = settled, now
		} else if now.Sub(since) > time.Minute {
			return res, fmt.Errorf("stalled at %d of %d deliveries settled for a minute; process 1's log:\n%s", settled, len(p.Messages), ps[0].out.tail())
		}
	}
	for _, sp := range ps {
		if err := stopProc(sp); err != nil {
			return res, err
		}
	}
	ps = nil
	var rows, processedRows, letters, letterEvents int
	if err := sc.DB.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE STATUS = 'PROCESSED') FROM INBOX_EVENT_PROCESSING`).Scan(&rows, &processedRows); err != nil {
		return res, err
	}
	if err := sc.DB.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT event_id) FROM shipping_letters`).Scan(&letters, &letterEvents); err != nil {
		return res, err
	}
	res.ok = rows == p.Distinct && processedRows == p.Distinct && letters == p.Distinct && letterEvents == p.Distinct &&
		res.processed == int64(p.Distinct) && res.duplicates == int64(p.Resends)
	if !res.ok {
		fmt.Fprintf(o.log, "scaleout: %s, %d process(es): inbox rows %d (PROCESSED %d), letters %d for %d events; settled processed %d duplicates %d; want %d distinct, %d resends\n",
			b.name, procs, rows, processedRows, letters, letterEvents, res.processed, res.duplicates, p.Distinct, p.Resends)
	}
	return res, nil
}

// stopProc sends SIGTERM (inboxctl run drains and exits 0) and waits; a
// process still running after 30s is killed.
func stopProc(sp *scaleProc) error {
	select {
	case err := <-sp.exited:
		sp.exited <- err
		return nil
	default:
	}
	_ = sp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-sp.exited:
		sp.exited <- err
		if err != nil {
			return fmt.Errorf("inboxctl run did not exit cleanly on SIGTERM: %w\n%s", err, sp.out.tail())
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = sp.cmd.Process.Kill()
		err := <-sp.exited
		sp.exited <- err
		return fmt.Errorf("inboxctl run still running 30s after SIGTERM: killed\n%s", sp.out.tail())
	}
}

// settledOf reads a process's /metrics: the settled deliveries (every
// inboxkit_deliveries_total series) and the duplicates among them.
func settledOf(client *http.Client, base string) (settled, dups int64, err error) {
	r, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("read %s/metrics: %w", base, err)
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(r.Body, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var into *int64
		switch {
		case strings.HasPrefix(line, "inboxkit_deliveries_total{"), strings.HasPrefix(line, "inboxkit_deliveries_total "):
			into = &settled
		case strings.HasPrefix(line, "inboxkit_duplicates_total"):
			into = &dups
		default:
			continue
		}
		f := strings.Fields(line)
		v, perr := strconv.ParseFloat(f[len(f)-1], 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("%s/metrics: %q: %w", base, line, perr)
		}
		*into += int64(v)
	}
	return settled, dups, sc.Err()
}

// loadRabbitCluster declares queue as a quorum queue on the cluster and
// publishes the plan to it with publisher confirms.
func loadRabbitCluster(ctx context.Context, url, queue string, p plan) error {
	conn, err := rabbitmq.DialNodes(url, amqp.Config{})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	ch.Close()
	if err != nil {
		return err
	}
	return load(ctx, conn, queue, p)
}

func cleanRabbitCluster(url, queue string) {
	conn, err := rabbitmq.DialNodes(url, amqp.Config{})
	if err != nil {
		return
	}
	defer conn.Close()
	deleteQueues(conn, queue, "DLQ."+queue)
}

// natsServers is a nats:// URL list without inboxkit's query (?replicas=).
func natsServers(url string) string {
	if i := strings.Index(url, "?"); i >= 0 {
		return url[:i]
	}
	return url
}

// loadNATSCluster creates queue's stream (work-queue retention, 3
// replicas, as `inboxctl run` would) and publishes the plan to it, 256
// publishes in flight, each acknowledged by the stream.
func loadNATSCluster(ctx context.Context, url, queue string, p plan) error {
	a, err := jetstream.Open(ctx, jetstream.Config{URL: natsServers(url), Replicas: 3, Logger: quiet, ConnectionName: "inboxbench-load"})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.EnsureStream(ctx, jetstream.StreamName(queue), queue); err != nil {
		return err
	}
	nc, err := nats.Connect(natsServers(url), nats.Name("inboxbench-load"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	const window = 256
	var acks []natsjs.PubAckFuture
	flush := func() error {
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	for _, m := range p.Messages {
		msg := &nats.Msg{Subject: queue, Data: m.Body, Header: nats.Header{"eventId": {m.ID}, "correlationId": {m.Correlation}}}
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		if acks = append(acks, f); len(acks) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func cleanNATSCluster(url, queue string) {
	nc, err := nats.Connect(natsServers(url))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{jetstream.StreamName(queue), jetstream.StreamName("DLQ." + queue)} {
		_ = js.DeleteStream(ctx, s)
	}
}
