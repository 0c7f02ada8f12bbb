package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

// outboxSection: the outbox's two costs on PostgreSQL + RabbitMQ.
//
//  1. Store.Process with one outbox.Add in the handler beside Store.Process
//     alone (a broker's first delivery, one letter row), at -c goroutines,
//     interleaved; with Add's NOTIFY and without (Config.NoNotify); and
//     with a statement that writes nothing in place of the Add (the round
//     trip every Add costs, its floor).
//  2. A relay (outbox.Relay, RabbitMQ publisher confirms, LISTEN wake-up):
//     its send rate draining a backlog of -outbox-n messages (keyless, and
//     over 100 keys), on an empty table and beside -outbox-sent SENT rows;
//     the write-to-confirm lag p50/p95 with a writer adding -outbox-rate
//     messages a second for -d, and with -big-c writers adding as fast as
//     they can (saturation).
func outboxSection(ctx context.Context, admin *sql.DB, o options) error {
	if err := outboxWriteCost(ctx, admin, o); err != nil {
		return err
	}
	return outboxRelay(ctx, admin, o)
}

// outboxStores opens a fresh schema with a migrated inbox, the letters and
// the outbox tables.
func outboxStores(ctx context.Context, admin *sql.DB, o options, conns int, cfg outbox.Config) (*schema, *inbox.Store, *outbox.Store, error) {
	sc, s, err := storeSchema(ctx, admin, o.dsn, "inboxbench_outbox_"+suffix(), conns)
	if err != nil {
		return nil, nil, nil, err
	}
	ob, err := outbox.New(sc.Store, inbox.Postgres, cfg)
	if err == nil {
		_, err = ob.Migrate(ctx)
	}
	if err != nil {
		sc.drop(admin)
		return nil, nil, nil, err
	}
	return sc, s, ob, nil
}

// processWithAdd is processFirst whose handler also adds one outbox
// message (a 200-byte body): keyless, or with ownKey a key of its own, which
// writes a key row beside the message as every keyless message did before
// outbox schema step 2.
func processWithAdd(s *inbox.Store, ob *outbox.Store, ownKey bool) op {
	body := make([]byte, 200)
	return processWithExtra(s, func(ctx context.Context, tx *sql.Tx, id string) error {
		m := outbox.Message{Destination: "letters", Body: body, CauseEventID: id, CorrelationID: "corr"}
		if ownKey {
			m.Key = id
		}
		_, err := ob.Add(ctx, tx, m)
		return err
	})
}

// processWithRoundTrip is processFirst whose handler also sends one
// statement that writes nothing (SELECT $1, with an argument as Add's
// INSERT has): the round trip an Add cannot avoid, as a floor for its cost.
func processWithRoundTrip(s *inbox.Store) op {
	return processWithExtra(s, func(ctx context.Context, tx *sql.Tx, _ string) error {
		_, err := tx.ExecContext(ctx, `SELECT CAST($1 AS INTEGER)`, 1)
		return err
	})
}

// processWithExtra is processFirst whose handler runs extra after the
// letter, with the event's id.
func processWithExtra(s *inbox.Store, extra func(ctx context.Context, tx *sql.Tx, id string) error) op {
	return func(ctx context.Context, _ int) error {
		id := newID()
		res, err := s.Process(ctx, inbox.Entry{EventID: id, ConsumerName: "bench", CorrelationID: "corr", PayloadHash: id, FirstDelivery: true}, func(ctx context.Context, tx *sql.Tx) error {
			if err := letterHandler(id)(ctx, tx); err != nil {
				return err
			}
			return extra(ctx, tx, id)
		})
		if err != nil {
			return err
		}
		if res.Outcome != inboxkit.OutcomeProcessed {
			return fmt.Errorf("process %s: outcome %s, want processed", id, res.Outcome)
		}
		return nil
	}
}

func outboxWriteCost(ctx context.Context, admin *sql.DB, o options) error {
	if err := needPgbench(); err != nil {
		return err
	}
	maxC := 0
	for _, c := range o.concs {
		maxC = max(maxC, c)
	}
	// The stores on the schema's Store pool (-store-driver: inboxkit's
	// driver, which holds an Add's INSERT for the commit, as inboxctl
	// runs) and on its DB pool, pgx's plain "pgx".
	sc, s, ob, err := outboxStores(ctx, admin, o, maxC+4, outbox.Config{})
	if err != nil {
		return err
	}
	defer sc.drop(admin)
	quiet, err := outbox.New(sc.Store, inbox.Postgres, outbox.Config{NoNotify: true})
	if err != nil {
		return err
	}
	plain, err := inbox.New(sc.DB, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		return err
	}
	plainOB, err := outbox.New(sc.DB, inbox.Postgres, outbox.Config{})
	if err != nil {
		return err
	}
	pg := func(extra string) func(ctx context.Context, c int) (float64, error) {
		script := pgbenchOutbox(sc.Name, extra)
		return func(ctx context.Context, c int) (float64, error) {
			return pgbenchRate(ctx, o.dsn, sc, script, 1, c, o.dur)
		}
	}
	m, err := interleaved(ctx, o, "outbox write", []namedOp{
		{name: "alone", op: processFirst(s)},
		{name: "add", op: processWithAdd(s, ob, false)},
		{name: "add, no notify", op: processWithAdd(s, quiet, false)},
		{name: "add, key row", op: processWithAdd(s, ob, true)},
		{name: "round trip", op: processWithRoundTrip(s)},
		{name: "plain alone", op: processFirst(plain)},
		{name: "plain add", op: processWithAdd(plain, plainOB, false)},
		{name: "pgbench alone", rate: pg("")},
		{name: "pgbench add", rate: pg("add")},
		{name: "pgbench pipelined", rate: pg("pipelined")},
		{name: "pgbench round trip", rate: pg("round trip")},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "\nOutbox write cost: inbox.Store.Process (first delivery, one letter row) alone and with one outbox.Add in the handler, PostgreSQL through %s (-store-driver; inboxkit-pgx sends the Add's INSERT with the COMMIT), %s per cell, median of %d round(s)\n\n", storeDriver, o.dur, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "goroutines\tProcess alone\tProcess + Add (keyless)\tratio\tsame, no NOTIFY\tratio\tProcess + Add, a key of its own (key row + message row)\tratio\tProcess + SELECT $1 (a round trip, no write)\tratio\tpgx's plain driver: alone\t+ Add (its own round trip)\tratio\t\n")
	for _, c := range o.concs {
		a, w, q, k, r := m("alone", c), m("add", c), m("add, no notify", c), m("add, key row", c), m("round trip", c)
		pa, pw := m("plain alone", c), m("plain add", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t%.0f\t%s\t%.0f\t%s\t%.0f\t%.0f\t%s\t\n", c, a, w, ratio(w, a), q, ratio(q, a), k, ratio(k, a), r, ratio(r, a), pa, pw, ratio(pw, pa))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "\nThe same statements from PostgreSQL's own C client (pgbench -M prepared, a client per goroutine, same tables, same rounds): the inbox row and the letter in a transaction, alone and with the row a keyless Add writes (no NOTIFY), that row sent in one pipeline with the COMMIT, or a SELECT of one argument\n\n")
	tw = table(o.out)
	fmt.Fprintf(tw, "clients\tpgbench alone\t+ outbox row\tratio\t+ outbox row pipelined with COMMIT\tratio\t+ SELECT $1\tratio\t\n")
	for _, c := range o.concs {
		a, w, p, r := m("pgbench alone", c), m("pgbench add", c), m("pgbench pipelined", c), m("pgbench round trip", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t%.0f\t%s\t\n", c, a, w, ratio(w, a), p, ratio(p, a), r, ratio(r, a))
	}
	return tw.Flush()
}

// lagObserver records the relay's write-to-confirm lags.
type lagObserver struct {
	mu   sync.Mutex
	lags []time.Duration
	sent atomic.Int64
}

func (l *lagObserver) Sent(_ string, lag time.Duration) {
	l.sent.Add(1)
	l.mu.Lock()
	l.lags = append(l.lags, lag)
	l.mu.Unlock()
}
func (l *lagObserver) Failed(string, error) {}
func (l *lagObserver) Parked(string, error) {}

func (l *lagObserver) percentiles() (p50, p95 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := append([]time.Duration(nil), l.lags...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[len(s)*95/100]
}

// relayRun is one relay measurement: the rate of its confirms and the lags.
type relayRun struct {
	sent         int64
	seconds      float64
	p50, p95     time.Duration
	extra, table string
}

func (r relayRun) rate() float64 { return float64(r.sent) / r.seconds }

// startBenchRelay starts a relay of ob publishing to RabbitMQ, woken by
// LISTEN; stop ends it.
func startBenchRelay(ctx context.Context, sc *schema, ob *outbox.Store, pub *rabbitmq.Adapter, lags *lagObserver) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	relay, err := outbox.NewRelay(ob, outbox.RelayConfig{Broker: pub, Observer: lags,
		Wake: postgres.Listen(rctx, sc.DSN, ob.NotifyChannel(), nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err) // the configuration is fixed
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(rctx) }()
	return func() { cancel(); <-done }
}

// addBacklog adds n messages, 500 per transaction, keyless or over keys.
func addBacklog(ctx context.Context, db *sql.DB, ob *outbox.Store, queue string, n, keys int) error {
	body := make([]byte, 200)
	for lo := 0; lo < n; lo += 500 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i := lo; i < min(lo+500, n); i++ {
			m := outbox.Message{Destination: queue, Body: body}
			if keys > 0 {
				m.Key = fmt.Sprintf("key-%03d", i%keys)
			}
			if _, err := ob.Add(ctx, tx, m); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// generateOutboxRows inserts sent SENT rows and pending PENDING rows (due
// now) of keyless messages for queue, as Add writes them (SEQ 0, no key
// row, the key the message's id): one INSERT ... SELECT FROM
// generate_series per million rows. The ids are ordered as they were
// written, SENT rows first, as Add's default ids (UUID version 7) are: a
// relay claims the pending rows in their order on the primary key.
func generateOutboxRows(ctx context.Context, db *sql.DB, log io.Writer, queue string, sent, pending int) error {
	const chunk = 1_000_000
	began := time.Now()
	for _, g := range []struct {
		status, settled string
		first, n        int
	}{
		{"SENT", "1, now() - interval '1 day', now(), now(), NULL", 1, sent},
		{"PENDING", "0, now(), NULL, NULL, now()", sent + 1, pending},
	} {
		for lo := g.first; lo < g.first+g.n; lo += chunk {
			hi := min(lo+chunk-1, g.first+g.n-1)
			if _, err := db.ExecContext(ctx, `INSERT INTO INBOXKIT_OUTBOX (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, BODY, STATUS, ATTEMPTS, CREATED_AT, UPDATED_AT, SENT_AT, NEXT_AT)
SELECT 'm-' || lpad(i::text, 12, '0'), 'm-' || lpad(i::text, 12, '0'), 0, $3, decode(repeat('00', 200), 'hex'), '`+g.status+`', `+g.settled+` FROM generate_series($1::bigint, $2::bigint) AS i`, lo, hi, queue); err != nil {
				return fmt.Errorf("generate %s rows: %w", g.status, err)
			}
			fmt.Fprintf(log, "outbox: %d of %d %s rows generated, %s\n", hi-g.first+1, g.n, g.status, time.Since(began).Round(time.Second))
		}
	}
	// The measurement starts after the bulk insert's autovacuum and
	// checkpoint, not beside them.
	for _, q := range []string{`VACUUM ANALYZE INBOXKIT_OUTBOX`, `CHECKPOINT`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	fmt.Fprintf(log, "outbox: %d SENT and %d PENDING rows ready, %s\n", sent, pending, time.Since(began).Round(time.Second))
	return nil
}

// outboxQueue is a fresh schema with the outbox, and a fresh RabbitMQ
// queue; done drops both.
func outboxQueue(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, conns int) (*schema, *outbox.Store, string, func(), error) {
	sc, _, ob, err := outboxStores(ctx, admin, o, conns, outbox.Config{})
	if err != nil {
		return nil, nil, "", nil, err
	}
	queue := "inboxbench.outbox." + suffix()
	if err := declareQueue(conn, queue); err != nil {
		sc.drop(admin)
		return nil, nil, "", nil, err
	}
	return sc, ob, queue, func() { deleteQueues(conn, queue); sc.drop(admin) }, nil
}

// drain measures how fast a relay sends a backlog of -outbox-n messages
// added by outbox.Add (keyless, or over keys), sent SENT rows beside them
// (generateOutboxRows), in a schema of its own.
func drain(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, pub *rabbitmq.Adapter, keys, sent int) (relayRun, error) {
	sc, ob, queue, done, err := outboxQueue(ctx, admin, o, conn, 24)
	if err != nil {
		return relayRun{}, err
	}
	defer done()
	if sent > 0 {
		err = generateOutboxRows(ctx, sc.DB, o.log, queue, sent, 0)
	}
	if err == nil {
		err = addBacklog(ctx, sc.DB, ob, queue, o.outboxN, keys)
	}
	if err != nil {
		return relayRun{}, err
	}
	return timedDrain(ctx, o, sc, ob, pub)
}

// backlog is a schema holding pending keyless messages made by
// generateOutboxRows, beside SENT rows, made once and drained -outbox-n at
// a time, one drain a round: the rounds' drains of the tables interleave.
type backlog struct {
	sc   *schema
	ob   *outbox.Store
	done func()
}

func newBacklog(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, sent, pending int) (*backlog, error) {
	sc, ob, queue, done, err := outboxQueue(ctx, admin, o, conn, 24)
	if err != nil {
		return nil, err
	}
	if err := generateOutboxRows(ctx, sc.DB, o.log, queue, sent, pending); err != nil {
		done()
		return nil, err
	}
	return &backlog{sc: sc, ob: ob, done: done}, nil
}

// timedDrain starts a relay and times its first -outbox-n confirms.
func timedDrain(ctx context.Context, o options, sc *schema, ob *outbox.Store, pub *rabbitmq.Adapter) (relayRun, error) {
	lags := &lagObserver{}
	began := time.Now()
	stop := startBenchRelay(ctx, sc, ob, pub, lags)
	for lags.sent.Load() < int64(o.outboxN) {
		if ctx.Err() != nil {
			stop()
			return relayRun{}, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(began)
	stop()
	return relayRun{sent: lags.sent.Load(), seconds: elapsed.Seconds()}, nil
}

// flow measures the lag with writers adding one message per transaction
// (no business row) at perSecond messages a second (0: as fast as they
// can) for -d.
func flow(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, pub *rabbitmq.Adapter, perSecond, writers int) (relayRun, error) {
	p, err := inboxkitPeer(ctx, admin, o, conn, pub, writers+24)
	if err != nil {
		return relayRun{}, err
	}
	defer p.done()
	p.noLetter = true
	return peerFlow(ctx, p, o.dur, perSecond, writers)
}

// openRabbit connects to RabbitMQ at -amqp: a connection for queues and
// inboxkit's adapter for the relay.
func openRabbit(ctx context.Context, o options) (*amqp.Connection, *rabbitmq.Adapter, func(), error) {
	conn, err := amqp.Dial(o.amqp)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("RabbitMQ at -amqp does not answer: %w (start it: rabbitmq-server -detached)", err)
	}
	pub, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: o.amqp})
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	return conn, pub, func() { pub.Close(); conn.Close() }, nil
}

func outboxRelay(ctx context.Context, admin *sql.DB, o options) error {
	conn, pub, closeRabbit, err := openRabbit(ctx, o)
	if err != nil {
		return err
	}
	defer closeRabbit()
	type cell struct {
		name string
		run  func() (relayRun, error)
	}
	cells := []cell{
		{"drain, keyless, empty table", func() (relayRun, error) { return drain(ctx, admin, o, conn, pub, 0, 0) }},
		{"drain, 100 keys, empty table", func() (relayRun, error) { return drain(ctx, admin, o, conn, pub, 100, 0) }},
	}
	if o.outboxBacklog > 0 {
		// Made once (minutes at 10 million rows), drained a round at a
		// time; a round's relay finds the rows the last one left leased
		// and sends the others first.
		for _, b := range []struct {
			name string
			sent int
		}{{fmt.Sprintf("next %d of %d pending, no SENT rows", o.outboxN, o.outboxBacklog), 0}, {fmt.Sprintf("next %d of %d pending, beside %d SENT rows", o.outboxN, o.outboxBacklog, o.outboxSent), o.outboxSent}} {
			bl, err := newBacklog(ctx, admin, o, conn, b.sent, o.outboxBacklog)
			if err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			defer bl.done()
			cells = append(cells, cell{b.name, func() (relayRun, error) { return timedDrain(ctx, o, bl.sc, bl.ob, pub) }})
		}
	} else {
		cells = append(cells, cell{fmt.Sprintf("drain, keyless, beside %d SENT rows", o.outboxSent), func() (relayRun, error) { return drain(ctx, admin, o, conn, pub, 0, o.outboxSent) }})
	}
	cells = append(cells, []cell{
		{fmt.Sprintf("%d msg/s, 1 writer", o.outboxRate), func() (relayRun, error) { return flow(ctx, admin, o, conn, pub, o.outboxRate, 1) }},
		{fmt.Sprintf("saturation, %d writers", o.bigConc), func() (relayRun, error) { return flow(ctx, admin, o, conn, pub, 0, o.bigConc) }},
	}...)
	results := map[string][]relayRun{}
	for round := 1; round <= o.rounds; round++ {
		for _, c := range cells {
			r, err := c.run()
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			results[c.name] = append(results[c.name], r)
			fmt.Fprintf(o.log, "outbox relay round %d %-40s %8.0f msgs/s p50 %s p95 %s %s\n", round, c.name, r.rate(), r.p50, r.p95, r.extra)
		}
	}
	fmt.Fprintf(o.out, "\nOutbox relay: PostgreSQL -> RabbitMQ (publisher confirms), one relay (RelayConfig defaults: 32 keys, or 4 x 32 keyless messages, at once; LISTEN wake-up), 200-byte bodies; drains of %d messages; median of %d round(s)\n\n", o.outboxN, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "cell\tmsgs/s\tvs empty keyless drain\tlag p50\tlag p95\t\n")
	base := 0.0
	for i, c := range cells {
		m := medianRun(results[c.name])
		if i == 0 {
			base = m.rate()
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t\n", c.name, m.rate(), ratio(m.rate(), base), lagString(m.p50), lagString(m.p95))
	}
	return tw.Flush()
}

// medianRun is the run of median rate.
func medianRun(rs []relayRun) relayRun {
	rs = append([]relayRun(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].rate() < rs[j].rate() })
	return rs[len(rs)/2]
}

func lagString(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(100 * time.Microsecond).String()
}
