package consumertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Broker describes one broker (and adapter) for the suite.
type Broker struct {
	// Name names the broker in messages. Required.
	Name string
	// Features says what the broker tells; bodies that depend on a feature
	// read it.
	Features Features
	// NewSource returns a Source consuming queue, connected. The suite
	// closes it (sometimes early, to simulate a crash: Close must be
	// idempotent, and deliveries received before Close must fail to settle
	// and come again); NewSource should also register a t.Cleanup closing
	// it. Required.
	NewSource func(t testing.TB, queue string) consumer.Source
	// NewPublisher returns a connected Publisher that can send to any
	// queue. When it is an io.Closer the suite closes it at test end.
	// Required.
	NewPublisher func(t testing.TB) dlq.Publisher
	// Declare, if set, is called with every queue of a test before anything
	// is published, for brokers that store a published message only on a
	// declared destination (JetStream streams). Default: nothing.
	Declare func(t testing.TB, queues ...string)
	// BreakPublisher makes p fail every later Publish, as a closed
	// connection does. Defaults to closing p (it must be an io.Closer).
	BreakPublisher func(t testing.TB, p dlq.Publisher)
	// Events is the number of distinct events of the duplicates body.
	// Defaults to 1000.
	Events int
	// Databases are the dbtest backends every body runs on. Defaults to
	// PostgreSQL and SQLite.
	Databases []string
	// IdleTimeout is how long the suite waits for one more message before
	// it calls a queue empty. Defaults to 1s.
	IdleTimeout time.Duration
	// Timeout bounds each wait for the consumer to reach a state. A wait
	// ends as soon as the state is reached: the bound only catches a
	// consumer that never gets there, so it is generous. Defaults to 3m.
	Timeout time.Duration
	// BatchSizes are the consumer.Config.BatchSize values every body runs
	// with (in the store-then-process body: the workers' batch). Every size must pass the same bodies: batching changes no
	// outcome. Sizes other than 1 run as subtests named batchN, and again
	// with the handler declared consumer.Config.EffectsInTx (batches
	// without savepoints, run again with them where one fails) as
	// batchN-effects-in-tx; size 1 runs so too, on the first of
	// Databases, except under -short (Store.ProcessInTx). Defaults to 1
	// only.
	BatchSizes []int
}

// Features says what a broker tells through its adapter, so the bodies know
// what to expect of the messages. The runtime reads neither: attempts are
// counted in the inbox (ARCHITECTURE.md, rule 5).
type Features struct {
	// DeliveryCount: Message.DeliveryCount is set on every redelivery,
	// including after a consumer crash.
	DeliveryCount bool
	// RedeliveredFlag: Message.Redelivered is set on redeliveries.
	RedeliveredFlag bool
	// FirstDelivery: Message.FirstDelivery is set on a message's first
	// delivery (it must never be set on a redelivery, whatever this says).
	FirstDelivery bool
	// HandBackInOrder: deliveries a consumer held for their order key when
	// it stopped come again before the queue's later messages, in order
	// (the OrderShutdownHandsBack body checks the sequence; without it,
	// the body logs the sequence it saw).
	HandBackInOrder bool
}

func (b *Broker) setDefaults() {
	if b.Events == 0 {
		b.Events = 1000
	}
	if len(b.Databases) == 0 {
		b.Databases = []string{dbtest.Postgres, dbtest.SQLite}
	}
	if b.IdleTimeout == 0 {
		b.IdleTimeout = time.Second
	}
	if b.Timeout == 0 {
		b.Timeout = 3 * time.Minute
	}
	if len(b.BatchSizes) == 0 {
		b.BatchSizes = []int{1}
	}
	if b.BreakPublisher == nil {
		b.BreakPublisher = func(t testing.TB, p dlq.Publisher) {
			c, ok := p.(io.Closer)
			if !ok {
				t.Fatalf("consumertest: publisher %T is no io.Closer: set Broker.BreakPublisher", p)
			}
			if err := c.Close(); err != nil {
				t.Logf("consumertest: close publisher: %v", err)
			}
		}
	}
}

// Run runs every conformance body against b, as parallel subtests per
// database.
//
// Under go test -short (the fast tier) it runs every body on the first of
// Broker.Databases only, at the first of Broker.BatchSizes only, with at
// most shortEvents events in the duplicates body; the other databases and
// batch sizes are skipped subtests that name ./scripts/test, which runs
// them all.
func Run(t *testing.T, b Broker) {
	t.Helper()
	if b.Name == "" || b.NewSource == nil || b.NewPublisher == nil {
		t.Fatal("consumertest: Broker needs Name, NewSource and NewPublisher")
	}
	b.setDefaults()
	bodies := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Duplicates", testDuplicates},
		{"CrashAfterCommit", testCrashAfterCommit},
		{"CrashBeforeCommit", testCrashBeforeCommit},
		{"Backout", testBackout},
		{"BackoutAfterCrashes", testBackoutAfterCrashes},
		{"PoisonAndReject", testPoisonAndReject},
		{"DeadLetterPublishFails", testDeadLetterPublishFails},
		{"Replay", testReplay},
		{"GracefulShutdown", testGracefulShutdown},
		{"StoreThenProcess", testStoreThenProcess},
		{"DatabaseOutage", testDatabaseOutage},
		{"ReplayRejection", testReplayRejection},
		{"ReplayPoison", testReplayPoison},
		{"PoisonResend", testPoisonResend},
		{"Order", testOrder},
		{"OrderStoreThenProcess", testOrderStoreThenProcess},
		{"OrderWithoutKey", testOrderWithoutKey},
		{"OrderPoisonHoldsItsKey", testOrderPoisonHoldsItsKey},
		{"OrderParkKey", testOrderParkKey},
		{"OrderShutdownHandsBack", testOrderShutdownHandsBack},
		{"OrderDatabaseOutage", testOrderDatabaseOutage},
	}
	// The bodies whose handler keeps a record of its runs outside the
	// transaction (a log it checks, a failure once by that log): they
	// may not declare consumer.Config.EffectsInTx.
	outside := map[string]bool{"Order": true, "OrderPoisonHoldsItsKey": true, "OrderParkKey": true}
	short := testing.Short()
	if short && b.Events > shortEvents {
		b.Events = shortEvents
	}
	for i, backend := range b.Databases {
		t.Run(backend, func(t *testing.T) {
			if short && i > 0 {
				t.Skipf("-short runs the bodies on %s only; ./scripts/test runs them on %s too", b.Databases[0], backend)
			}
			for j, size := range b.BatchSizes {
				if short && j > 0 {
					t.Run(fmt.Sprintf("batch%d", size), func(t *testing.T) {
						t.Skipf("-short runs the bodies at batch size %d only; ./scripts/test runs them at %d too", b.BatchSizes[0], size)
					})
					continue
				}
				run := func(effectsInTx bool) func(t *testing.T) {
					return func(t *testing.T) {
						for _, body := range bodies {
							t.Run(body.name, func(t *testing.T) {
								if effectsInTx && outside[body.name] {
									t.Skip("its handler logs every run in memory and checks the log, an effect outside the transaction: it may not declare EffectsInTx")
								}
								t.Parallel()
								e := newEnv(t, b, backend)
								e.batch, e.effectsInTx = size, effectsInTx
								body.fn(t, e)
							})
						}
					}
				}
				if size == 1 {
					run(false)(t) // the names the suite always had
					if i == 0 && !short {
						// A single delivery declared EffectsInTx goes
						// through Store.ProcessInTx (on PostgreSQL its
						// first INSERT goes with the handler's first
						// statement): on the first database only.
						t.Run("batch1-effects-in-tx", run(true))
					}
					continue
				}
				t.Run(fmt.Sprintf("batch%d", size), run(false))
				t.Run(fmt.Sprintf("batch%d-effects-in-tx", size), run(true))
			}
		})
	}
}

// shortEvents bounds Broker.Events under go test -short.
const shortEvents = 200

// Prefetch is the prefetch a Broker.NewSource should give the source of
// test t: base, times N in the bodies of a batchN subtest (see
// Broker.BatchSizes), so that a batch can fill.
func Prefetch(t testing.TB, base int) int {
	for _, part := range strings.Split(t.Name(), "/") {
		size, _, _ := strings.Cut(strings.TrimPrefix(part, "batch"), "-")
		if n, err := strconv.Atoi(size); err == nil && strings.HasPrefix(part, "batch") && n > 1 {
			return base * n
		}
	}
	return base
}

// maxAttempts is the backout threshold of every body.
const maxAttempts = 3

// retry is the stores' policy: the backout threshold, and a redelivery
// delay short enough for tests.
var retry = inboxkit.RetryPolicy{MaxAttempts: maxAttempts, Redelivery: inboxkit.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}}

// env is one body's world: a fresh database with the inbox and the business
// table, fresh queue names, and a publisher for test messages.
type env struct {
	b       Broker
	backend string
	db      *dbtest.DB
	store   *inbox.Store
	name    string // consumer name
	queue   string
	dlq     string
	rejects string
	pub     dlq.Publisher
	ctx     context.Context
	batch   int // consumer.Config.BatchSize of the runs
	// effectsInTx: consumer.Config.EffectsInTx of the runs.
	effectsInTx bool
}

func newEnv(t *testing.T, b Broker, backend string) *env {
	t.Helper()
	db := dbtest.New(t, backend)
	d, err := inbox.DialectByName(backend)
	if err != nil {
		t.Fatal(err)
	}
	store, err := inbox.New(db.DB, d, inbox.Config{Retry: retry, ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("migrate inbox: %v", err)
	}
	if err := CreateBusinessTable(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	q := QueueName(t.Name())
	e := &env{
		b: b, backend: backend, db: db, store: store, name: "conformance-" + b.Name,
		queue: q, dlq: q + ".dlq", rejects: q + ".rejects", ctx: ctx,
	}
	if b.Declare != nil {
		b.Declare(t, e.queue, e.dlq, e.rejects)
	}
	e.pub = e.newPublisher(t)
	return e
}

func (e *env) newPublisher(t testing.TB) dlq.Publisher {
	p := e.b.NewPublisher(t)
	if c, ok := p.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return p
}

// QueueName returns a fresh queue name for a test: "ct." + the sanitized
// last parts of name + "." + 8 random hex digits. It contains only letters,
// digits, '.', '_' and '-'.
func QueueName(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) > 3 {
		parts = parts[len(parts)-3:]
	}
	for i, p := range parts {
		parts[i] = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
				return r
			}
			return '_'
		}, p)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "ct." + strings.Join(parts, ".") + "." + hex.EncodeToString(b)
}

// CreateBusinessTable creates the business table of the test handler:
// one row per processed event.
func CreateBusinessTable(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE business (event_id VARCHAR(120) NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("consumertest: create business table: %w", err)
	}
	return nil
}

// Event is the JSON body the test handler understands.
type Event struct {
	Amount int `json:"amount"`
	// Reject makes the handler reject the event (CUSTOMER_UNKNOWN).
	Reject bool `json:"reject,omitempty"`
	// Fail makes the handler fail technically, every time.
	Fail bool `json:"fail,omitempty"`
	// SleepMS makes the handler slow.
	SleepMS int `json:"sleepMs,omitempty"`
}

// Body returns the JSON encoding of ev.
func (ev Event) Body() []byte {
	b, _ := json.Marshal(ev)
	return b
}

// ErrAlwaysFails is the technical error of an event with Fail set.
var ErrAlwaysFails = errors.New("consumertest: downstream system unavailable (the test handler always fails for this event)")

// Handler is the suite's business handler: it decodes the body as an Event
// (malformed: classify.Poison MALFORMED_PAYLOAD), inserts one row into the
// business table in the inbox transaction, runs hook (when not nil; its
// error is returned), sleeps SleepMS, then rejects (Reject: classify.Reject
// CUSTOMER_UNKNOWN, so the business row is rolled back) or fails
// technically (Fail) as the event asks.
func Handler(d inbox.Dialect, hook func(ctx context.Context, m inboxkit.Message) error) consumer.Handler {
	insert := d.Rebind(`INSERT INTO business (event_id, amount) VALUES (?, ?)`)
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		var ev Event
		if err := json.Unmarshal(m.Body, &ev); err != nil {
			return classify.Poison("MALFORMED_PAYLOAD", err)
		}
		if _, err := tx.ExecContext(ctx, insert, m.ID, ev.Amount); err != nil {
			return fmt.Errorf("insert business row: %w", err)
		}
		if hook != nil {
			if err := hook(ctx, m); err != nil {
				return err
			}
		}
		if ev.SleepMS > 0 {
			time.Sleep(time.Duration(ev.SleepMS) * time.Millisecond)
		}
		if ev.Reject {
			return classify.Reject("CUSTOMER_UNKNOWN", fmt.Errorf("customer of event %s is unknown", m.ID))
		}
		if ev.Fail {
			return ErrAlwaysFails
		}
		return nil
	}
}

// send publishes one test message with the eventId and correlationId
// headers (empty ones are left out) plus extra headers.
func (e *env) send(t testing.TB, id, corr string, body []byte, extra ...string) {
	t.Helper()
	h := map[string]string{}
	if id != "" {
		h["eventId"] = id
	}
	if corr != "" {
		h["correlationId"] = corr
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	if err := e.pub.Publish(ctx, e.queue, h, body); err != nil {
		t.Fatalf("publish test message %q to %s: %v", id, e.queue, err)
	}
}

// recorder keeps every settlement of a consumer run.
type recorder struct {
	mu  sync.Mutex
	all []consumer.Settled
}

func (r *recorder) add(s consumer.Settled) {
	r.mu.Lock()
	r.all = append(r.all, s)
	r.mu.Unlock()
}

func (r *recorder) list() []consumer.Settled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]consumer.Settled(nil), r.all...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// runOpts configures one consumer run.
type runOpts struct {
	concurrency int
	// source replaces a fresh source on the queue (for wrappers).
	source consumer.Source
	// hook runs inside the handler; src is the run's source.
	hook        func(ctx context.Context, src consumer.Source, m inboxkit.Message) error
	deadLetter  dlq.Publisher
	rejectQueue string
	// mode is the inbox variant (default transactional).
	mode consumer.Mode
	// store replaces the env's store (e.g. one on a proxied pool).
	store *inbox.Store
	// orderKey is consumer.Config.OrderKeyFunc.
	orderKey consumer.OrderKeyFunc
	// onPoison is consumer.Config.OnPoison.
	onPoison consumer.OnPoison
}

// run is one running consumer.
type run struct {
	src    consumer.Source
	rec    *recorder
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

func (e *env) start(t *testing.T, o runOpts) *run {
	t.Helper()
	src := o.source
	if src == nil {
		src = e.b.NewSource(t, e.queue)
	}
	if o.concurrency == 0 {
		o.concurrency = 1
	}
	if o.deadLetter == nil {
		o.deadLetter = e.pub
	}
	if o.store == nil {
		o.store = e.store
	}
	r := &run{src: src, rec: &recorder{}, done: make(chan error, 1)}
	var hook func(ctx context.Context, m inboxkit.Message) error
	if o.hook != nil {
		hook = func(ctx context.Context, m inboxkit.Message) error { return o.hook(ctx, src, m) }
	}
	cfg := consumer.Config{
		Name: e.name, Source: src, Store: o.store, Handler: Handler(o.store.Dialect(), hook),
		DeadLetter: o.deadLetter, DeadLetterQueue: e.dlq, RejectQueue: o.rejectQueue,
		Concurrency:  o.concurrency,
		BatchSize:    e.batch, // in store-then-process mode: the workers' batch
		EffectsInTx:  e.effectsInTx,
		Mode:         o.mode,
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer:     consumer.ObserveSettled(r.rec.add),
		OrderKeyFunc: o.orderKey,
		OnPoison:     o.onPoison,
	}
	if o.mode == consumer.ModeStoreThenProcess {
		cfg.WorkerPollInterval = 20 * time.Millisecond // refused in the transactional mode
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r.cancel = cancel
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) }) // a test that checks Run's error calls stop itself
	return r
}

// stop cancels the run and waits for Run to return (graceful drain).
func (r *run) stop(t testing.TB) error {
	t.Helper()
	if r.ended {
		return r.err
	}
	r.cancel()
	select {
	case r.err = <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("consumer did not return from Run within 60s after cancel")
	}
	r.ended = true
	return r.err
}

// wait waits until the run has ended by itself (its source was closed).
func (r *run) waitEnded(t testing.TB, timeout time.Duration) {
	t.Helper()
	if r.ended {
		return
	}
	select {
	case r.err = <-r.done:
		r.ended = true
	case <-time.After(timeout):
		t.Fatalf("consumer still running %s after its source was closed", timeout)
	}
}

// waitFor polls cond until it is true or the broker's Timeout passes.
func (e *env) waitFor(t testing.TB, what string, cond func() bool, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(e.b.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			extra := ""
			if dump != nil {
				extra = "\n" + dump()
			}
			t.Fatalf("timeout after %s waiting for %s%s", e.b.Timeout, what, extra)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSettled waits until r has settled at least n deliveries.
func (e *env) waitSettled(t testing.TB, r *run, n int) []consumer.Settled {
	t.Helper()
	e.waitFor(t, fmt.Sprintf("%d settled deliveries", n), func() bool { return r.rec.len() >= n }, func() string { return summary(r.rec.list()) })
	return r.rec.list()
}

// waitAction waits until r settled a delivery with action a and returns it.
func (e *env) waitAction(t testing.TB, r *run, a inboxkit.Action) consumer.Settled {
	t.Helper()
	var found consumer.Settled
	e.waitFor(t, "a delivery settled with action "+string(a), func() bool {
		for _, s := range r.rec.list() {
			if s.Action == a {
				found = s
				return true
			}
		}
		return false
	}, func() string { return summary(r.rec.list()) })
	return found
}

func summary(ss []consumer.Settled) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d settlements:", len(ss))
	for i, s := range ss {
		if i == 30 {
			fmt.Fprintf(&b, "\n\t... %d more", len(ss)-i)
			break
		}
		fmt.Fprintf(&b, "\n\tevent=%q outcome=%s status=%s action=%s attempts=%d redelivered=%v count=%d reason=%s",
			s.Message.ID, s.Result.Outcome, s.Result.Status, s.Action, s.Result.Attempts, s.Message.Redelivered, s.Message.DeliveryCount, s.Result.Reason)
		if s.Result.Err != nil {
			fmt.Fprintf(&b, " handler-err=%q", s.Result.Err)
		}
		if s.Err != nil {
			fmt.Fprintf(&b, " runtime-err=%q", s.Err)
		}
	}
	return b.String()
}

// drain receives and acknowledges everything on queue until it stays idle
// for the broker's IdleTimeout, and returns the messages.
func (e *env) drain(t testing.TB, queue string) []inboxkit.Message {
	t.Helper()
	src := e.b.NewSource(t, queue)
	defer src.Close()
	var out []inboxkit.Message
	for {
		ctx, cancel := context.WithTimeout(e.ctx, e.b.IdleTimeout)
		d, err := src.Receive(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return out
			}
			t.Fatalf("drain %s: receive: %v", queue, err)
		}
		actx, acancel := context.WithTimeout(e.ctx, 10*time.Second)
		err = d.Ack(actx)
		acancel()
		if err != nil {
			t.Fatalf("drain %s: ack: %v", queue, err)
		}
		out = append(out, d.Message())
	}
}

// expectEmpty fails unless queue is empty.
func (e *env) expectEmpty(t testing.TB, queue string) {
	t.Helper()
	if left := e.drain(t, queue); len(left) > 0 {
		ids := make([]string, 0, len(left))
		for _, m := range left {
			ids = append(ids, m.Header("eventId"))
		}
		t.Fatalf("queue %s should be empty, it held %d messages (event ids %v)", queue, len(left), ids)
	}
}

// businessRows returns the number of business rows and of distinct event ids.
func (e *env) businessRows(t testing.TB) (rows, distinct int) {
	t.Helper()
	err := e.db.QueryRowContext(e.ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id) FROM business`).Scan(&rows, &distinct)
	if err != nil {
		t.Fatalf("count business rows: %v", err)
	}
	return rows, distinct
}

func (e *env) businessRowsOf(t testing.TB, id string) int {
	t.Helper()
	var n int
	err := e.db.QueryRowContext(e.ctx, e.store.Dialect().Rebind(`SELECT COUNT(*) FROM business WHERE event_id = ?`), id).Scan(&n)
	if err != nil {
		t.Fatalf("count business rows of %s: %v", id, err)
	}
	return n
}

func (e *env) row(t testing.TB, id string) inbox.Record {
	t.Helper()
	r, err := e.store.Get(e.ctx, id, e.name)
	if err != nil {
		t.Fatalf("inbox row of %s: %v", id, err)
	}
	return r
}

func (e *env) counts(t testing.TB) map[inboxkit.Status]int {
	t.Helper()
	c, err := e.store.CountByStatus(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crashSource wraps a Source: its deliveries close the source (the
// process dies) when they are acknowledged, i.e. after the inbox commit and
// before the ACK reaches the broker.
type crashSource struct {
	consumer.Source
	crashed atomic.Bool
}

func (s *crashSource) Receive(ctx context.Context) (consumer.Delivery, error) {
	d, err := s.Source.Receive(ctx)
	if err != nil {
		return nil, err
	}
	return &crashDelivery{Delivery: d, s: s}, nil
}

type crashDelivery struct {
	consumer.Delivery
	s *crashSource
}

func (d *crashDelivery) Ack(ctx context.Context) error {
	d.s.crashed.Store(true)
	_ = d.s.Source.Close()
	return d.Delivery.Ack(ctx)
}

// swapPublisher is a dlq.Publisher whose underlying publisher can be
// replaced (a repaired connection).
type swapPublisher struct {
	mu sync.Mutex
	p  dlq.Publisher
}

func (s *swapPublisher) get() dlq.Publisher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

func (s *swapPublisher) set(p dlq.Publisher) {
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
}

func (s *swapPublisher) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	return s.get().Publish(ctx, destination, headers, body)
}

func id(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }
