package golden

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// BrokerDeadLetterQueue is the name the transcript gives the broker's own
// dead-letter queue (ActiveMQ's default).
const BrokerDeadLetterQueue = "ActiveMQ.DLQ"

// maxDeliveries bounds one scenario run.
const maxDeliveries = 10000

// Database is where a scenario runs.
type Database struct {
	// DB is the pool of instance 1.
	DB *sql.DB
	// Dialect of DB.
	Dialect inbox.Dialect
	// Open, if set, opens another pool on the same database for instances
	// 2 and up; without it every instance shares DB.
	Open func() (*sql.DB, error)
}

// Delivery is one delivery in a Transcript.
type Delivery struct {
	// Message is the scenario's message name; EventID its eventId header.
	Message, EventID string
	// N is the broker's delivery count of this copy (1 for the first).
	N int
	// Action: ack, redelivery, reject, dead-letter, crash, broker-dead-letter.
	Action string
	// AckLost is true when the acknowledgement never reached the broker.
	AckLost bool
	// Outcome, Class and Reason come from the inbox (empty for legacy).
	Outcome, Class, Reason string
	// Error is the error text, if any.
	Error string
}

// Published is one message published to a dead-letter or reject queue.
type Published struct {
	Destination string
	Headers     map[string]string
	Body        string
}

// Transcript is what one scenario run did. Text is the approval text;
// the other fields hold the same facts for programs (comparisons).
type Transcript struct {
	// Text is the normalized transcript, as written to approved files.
	Text string
	// Consumer is the subject's name; Legacy is true for a Legacy subject.
	Consumer string
	Legacy   bool
	// Deliveries in order (within a parallel send, sorted).
	Deliveries []Delivery
	// Calls to external services, in order.
	Calls []Call
	// Rows of each business table and of the inbox ("inbox"), as printed
	// (before placeholders).
	Rows map[string][][]string
	// Published dead letters and rejections.
	Published []Published
	// BrokerDeadLetters are the message names the broker dead-lettered.
	BrokerDeadLetters []string
	// Elapsed is the wall time of a black-box recording (start of the
	// processes to the snapshot); 0 for Play.
	Elapsed time.Duration
}

type instance struct {
	env     *Env
	subject Subject
	cons    *consumer.Consumer
}

type pending struct {
	msg        *Message
	deliveries int
	// atOnce: sent together with the message before it (send A B): its
	// first delivery happens at the same scenario time.
	atOnce bool
}

// tick moves the scenario clock for the next delivery of p (not for the
// first delivery of a message sent at once with the one before it).
func (r *runner) tick(p *pending) {
	if !(p.atOnce && p.deliveries == 0) {
		r.w.tick()
	}
}

type runner struct {
	sc      *Scenario
	db      Database
	w       *world
	insts   []*instance
	store   *inbox.Store
	queue   []*pending
	out     *writer
	tr      *Transcript // out's
	total   int
	legacy  bool
	closers []func()
	batch   int // consumer.Config.BatchSize (see BatchSize)
}

// Play runs scenario sc through the consumer that f builds, on db, and
// returns the transcript. db must be empty: Play creates the inbox table
// (for Handler subjects) and Subject.Setup creates the business tables.
func Play(ctx context.Context, db Database, sc *Scenario, f Factory) (*Transcript, error) {
	r := &runner{sc: sc, db: db, w: newWorld(), out: newWriter(""), batch: sc.BatchSize}
	r.tr = r.out.tr
	defer func() {
		for _, c := range r.closers {
			c()
		}
	}()
	if err := r.setup(ctx, f); err != nil {
		return nil, err
	}
	kind := "legacy, no inbox"
	if r.store != nil {
		kind = "refactored, inbox " + r.store.Config().Table
	}
	r.out.header(fmt.Sprintf("golden transcript: consumer %s (%s)", r.tr.Consumer, kind), sc)
	r.out.section("deliveries")
	for i, st := range sc.Steps {
		if err := r.step(ctx, i+1, st); err != nil {
			return nil, err
		}
	}
	if err := r.final(ctx); err != nil {
		return nil, err
	}
	return r.out.done(Scrub), nil
}

func (r *runner) setup(ctx context.Context, f Factory) error {
	for i := 1; i <= r.sc.Instances; i++ {
		pool := r.db.DB
		if i > 1 && r.db.Open != nil {
			p, err := r.db.Open()
			if err != nil {
				return fmt.Errorf("golden: open pool for instance %d: %w", i, err)
			}
			r.closers = append(r.closers, func() { p.Close() })
			pool = p
		}
		env := &Env{DB: pool, Dialect: r.db.Dialect, Instance: i, Clock: r.w, IDFunc: r.w.newID, MaxAttempts: r.sc.MaxAttempts, w: r.w}
		sub, err := f(env)
		if err != nil {
			return fmt.Errorf("golden: factory (instance %d): %w", i, err)
		}
		if (sub.Handler == nil) == (sub.Legacy == nil) {
			return errors.New("golden: the factory's Subject needs exactly one of Handler and Legacy")
		}
		if sub.Relay != nil && sub.RelayLease <= 0 {
			return errors.New("golden: the factory's Subject has a Relay without RelayLease (how long a relay that died holds its claims)")
		}
		inst := &instance{env: env, subject: sub}
		if i == 1 {
			r.legacy = sub.Legacy != nil
			r.tr.Consumer, r.tr.Legacy = sub.Name, r.legacy
			if r.tr.Consumer == "" {
				r.tr.Consumer = "legacy"
			}
			if sub.Setup != nil {
				if err := sub.Setup(ctx); err != nil {
					return fmt.Errorf("golden: setup: %w", err)
				}
			}
		}
		if sub.Handler != nil {
			store, err := inbox.New(pool, r.db.Dialect, inbox.Config{Clock: r.w, Retry: inboxkit.RetryPolicy{MaxAttempts: r.sc.MaxAttempts}, ClassifyFunc: classify.Of})
			if err != nil {
				return err
			}
			if i == 1 {
				if err := store.Migrate(ctx); err != nil {
					return err
				}
				r.store = store
			}
			h := sub.Handler
			cfg := consumer.Config{
				Name: sub.Name, Source: noSource{}, Store: store,
				Handler: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
					if err := h(ctx, tx, m); err != nil {
						return err
					}
					return env.BeforeCommit(ctx)
				},
				DeadLetter: r.w, DeadLetterQueue: "DLQ." + r.sc.Queue, RejectQueue: r.sc.Queue + ".REJECTED",
				Clock: r.w, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			if r.batch > 1 {
				cfg.BatchSize = r.batch
			}
			if sub.Configure != nil {
				sub.Configure(&cfg)
			}
			if inst.cons, err = consumer.New(cfg); err != nil {
				return err
			}
		}
		r.insts = append(r.insts, inst)
	}
	return nil
}

func (r *runner) step(ctx context.Context, n int, st Step) error {
	switch st.Kind {
	case StepDatabase:
		return fmt.Errorf("golden: scenario line %d: database %s needs a black-box recording (goldentest.RunBlackBox cuts the database off through a proxy); in process, use fail commit N", st.Line, st.Point)
	case StepNote:
		r.out.step(n, "note: %s", st.Text)
	case StepFail:
		r.w.mu.Lock()
		r.w.svc.fails[st.Service] += st.Count
		r.w.mu.Unlock()
		what := "call(s) of " + st.Service
		if st.Service == ServiceCommit {
			what = "commit(s)"
		}
		r.out.step(n, "fault: the next %d %s fail", st.Count, what)
	case StepCrash:
		r.w.mu.Lock()
		if st.Point == CrashDuring {
			r.w.svc.during[st.Service]++
		} else {
			r.w.crash[st.Point]++
		}
		r.w.mu.Unlock()
		if st.Point == CrashDuring {
			r.out.step(n, "fault: the process dies during the next call of %s", st.Service)
			break
		}
		r.out.step(n, "fault: the next delivery crashes %s", strings.ReplaceAll(st.Point, "-", " "))
	case StepSend:
		m := r.sc.Message(st.Message)
		if st.Parallel > 1 {
			r.out.step(n, "send %s parallel %d (one copy to each of %d instances at once)", m.Name, st.Parallel, st.Parallel)
			if err := r.parallel(ctx, m, st.Parallel); err != nil {
				return err
			}
		} else if len(st.With) > 0 {
			r.out.step(n, "send %s %s (at once)", m.Name, strings.Join(st.With, " "))
			r.queue = append(r.queue, &pending{msg: m})
			for _, name := range st.With {
				r.queue = append(r.queue, &pending{msg: r.sc.Message(name), atOnce: true})
			}
		} else {
			r.out.step(n, "send %s", m.Name)
			r.queue = append(r.queue, &pending{msg: m})
		}
		if err := r.drain(ctx); err != nil {
			return err
		}
		return r.relay(ctx)
	}
	return nil
}

func (r *runner) parallel(ctx context.Context, m *Message, n int) error {
	r.w.tick()
	copies := make([]*pending, n)
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		copies[i] = &pending{msg: m, deliveries: 1}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.deliver(ctx, r.insts[i], copies[i])
		}()
	}
	wg.Wait()
	lines := make([]string, n)
	for i, res := range results {
		lines[i] = res.line
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lines[order[a]] < lines[order[b]] })
	for _, i := range order {
		r.record(results[i])
		if results[i].again {
			r.queue = append(r.queue, copies[i])
		}
	}
	return nil
}

func (r *runner) drain(ctx context.Context) error {
	for len(r.queue) > 0 {
		p := r.queue[0]
		r.queue = r.queue[1:]
		if p.deliveries >= r.sc.BrokerMaxDeliveries {
			r.tr.BrokerDeadLetters = append(r.tr.BrokerDeadLetters, p.msg.Name)
			d := Delivery{Message: p.msg.Name, EventID: header(p.msg, "eventId"), N: p.deliveries, Action: "broker-dead-letter"}
			r.tr.Deliveries = append(r.tr.Deliveries, d)
			r.out.item("broker: %s moved to %s after %d deliveries", p.msg.Name, BrokerDeadLetterQueue, p.deliveries)
			continue
		}
		r.total++
		if r.total > maxDeliveries {
			return fmt.Errorf("golden: more than %d deliveries: the scenario never settles", maxDeliveries)
		}
		r.tick(p)
		p.deliveries++
		if r.batch > 1 && r.insts[0].cons != nil {
			if err := r.batchFrom(ctx, p); err != nil {
				return err
			}
			continue
		}
		res := r.deliver(ctx, r.insts[0], p)
		r.record(res)
		if res.again {
			r.queue = append(r.queue, p)
		}
	}
	return nil
}

// maxRelayRounds bounds the relay calls after one send.
const maxRelayRounds = 1000

// relay runs the instances' outbox relays (Subject.Relay) once a send's
// deliveries settled (so that batching changes no transcript), in instance
// order, moving the clock to the next due message
// until nothing is due, and writes a line for each call that did
// something.
func (r *runner) relay(ctx context.Context) error {
	for round := 0; ; round++ {
		if round > maxRelayRounds {
			return fmt.Errorf("golden: the relay never settles: more than %d rounds after one send", maxRelayRounds)
		}
		var next time.Time
		for _, inst := range r.insts {
			if inst.subject.Relay == nil {
				continue
			}
			due, err := r.relayOnce(ctx, inst)
			if err != nil {
				return err
			}
			if !due.IsZero() && (next.IsZero() || due.Before(next)) {
				next = due
			}
		}
		if next.IsZero() {
			return nil
		}
		r.w.advance(next)
	}
}

// relayOnce calls one instance's relay; it returns when it is due again.
func (r *runner) relayOnce(ctx context.Context, inst *instance) (next time.Time, err error) {
	r.w.relaying(true)
	defer r.w.relaying(false)
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		sig, ok := v.(crashSignal)
		if !ok {
			panic(v)
		}
		lease := inst.subject.RelayLease
		r.out.item("relay after the commit: crash during the call of %s, before the answer; its claims end after %s and the relay starts again", sig.during, lease)
		next, err = r.w.Now().Add(lease), nil
	}()
	res, err := inst.subject.Relay(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("golden: relay of instance %d: %w", inst.env.Instance, err)
	}
	var did []string
	for _, c := range []struct {
		n    int
		what string
	}{{res.Sent, "sent"}, {res.Failed, "failed"}, {res.Parked, "parked"}} {
		if c.n > 0 {
			did = append(did, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(did) > 0 {
		line := "relay after the commit: " + strings.Join(did, ", ")
		if res.Failed > 0 && !res.NextDue.IsZero() {
			line += fmt.Sprintf(" (tried again in %s)", res.NextDue.Sub(r.w.Now()))
		}
		r.out.item("%s", line)
	}
	return res.NextDue, nil
}

// batchFrom delivers first and what else is queued, up to the scenario's
// batch size, to instance 1 as one batch, and queues what comes again.
func (r *runner) batchFrom(ctx context.Context, first *pending) error {
	batch := []*pending{first}
	for len(batch) < r.batch && len(r.queue) > 0 {
		p := r.queue[0]
		if p.deliveries >= r.sc.BrokerMaxDeliveries {
			break // the broker dead-letters it in drain
		}
		r.queue = r.queue[1:]
		r.total++
		if r.total > maxDeliveries {
			return fmt.Errorf("golden: more than %d deliveries: the scenario never settles", maxDeliveries)
		}
		r.tick(p)
		p.deliveries++
		batch = append(batch, p)
	}
	for i, res := range r.deliverBatch(ctx, r.insts[0], batch) {
		r.record(res)
		if res.again {
			r.queue = append(r.queue, batch[i])
		}
	}
	return nil
}

type result struct {
	d     Delivery
	line  string
	again bool
}

func (r *runner) record(res result) {
	r.tr.Deliveries = append(r.tr.Deliveries, res.d)
	r.out.raw(res.line)
}

func header(m *Message, name string) string {
	for _, h := range m.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// deliver hands one copy to one instance and reports what happened.
func (r *runner) deliver(ctx context.Context, inst *instance, p *pending) (res result) {
	del, d := r.newDelivery(p)
	defer func() {
		if v := recover(); v != nil {
			res = crashed(v, p, d)
		}
	}()
	if inst.cons != nil {
		return settledResult(p, d, del, inst.cons.Handle(ctx, del))
	}
	var detail []string
	msg := del.m
	err := inst.subject.Legacy(ctx, msg)
	if err == nil {
		d.Action = "ack"
		if aerr := del.Ack(ctx); aerr != nil && !del.lost {
			detail = append(detail, "runtime-error="+strconv.Quote(aerr.Error()))
		}
	} else {
		d.Action, d.Error = "redelivery", err.Error()
		_ = del.Requeue(ctx, 0)
		detail = append(detail, "error="+strconv.Quote(d.Error))
	}
	return resultLine(p, d, del, detail)
}

// deliverBatch hands copies to one instance as one batch
// (consumer.HandleBatch) and reports what happened to each, in order. A
// crash inside the batch kills all of it: nothing is acknowledged.
func (r *runner) deliverBatch(ctx context.Context, inst *instance, ps []*pending) (res []result) {
	dels := make([]consumer.Delivery, len(ps))
	ds := make([]Delivery, len(ps))
	for i, p := range ps {
		var del *delivery
		del, ds[i] = r.newDelivery(p)
		dels[i] = del
	}
	defer func() {
		if v := recover(); v != nil {
			res = make([]result, len(ps))
			for i, p := range ps {
				res[i] = crashed(v, p, ds[i])
			}
		}
	}()
	ss := inst.cons.HandleBatch(ctx, dels)
	res = make([]result, len(ps))
	for i, p := range ps {
		res[i] = settledResult(p, ds[i], dels[i].(*delivery), ss[i])
	}
	return res
}

// newDelivery is the broker's copy of p, and its transcript entry.
func (r *runner) newDelivery(p *pending) (*delivery, Delivery) {
	hdr := make(map[string]string, len(p.msg.Headers))
	for _, h := range p.msg.Headers {
		hdr[h.Name] = h.Value
	}
	msg := inboxkit.Message{
		Headers: hdr, Body: []byte(p.msg.Body), Destination: r.sc.Queue,
		BrokerMessageID: fmt.Sprintf("ID:golden-%s", p.msg.Name), Redelivered: p.deliveries > 1, DeliveryCount: p.deliveries,
		FirstDelivery: p.deliveries == 1,
	}
	return &delivery{m: msg, w: r.w}, Delivery{Message: p.msg.Name, EventID: hdr["eventId"], N: p.deliveries}
}

// crashed is the result of a delivery whose process died (v is the
// recovered panic; any other panic goes on).
func crashed(v any, p *pending, d Delivery) result {
	sig, ok := v.(crashSignal)
	if !ok {
		panic(v)
	}
	d.Action, d.Error = "crash", "process died before the commit (injected crash)"
	where := "before commit"
	if sig.during != "" {
		d.Error = "process died during the call of " + sig.during + " (injected crash)"
		where = "during the call of " + sig.during
	}
	res := result{d: d, again: true}
	res.line = fmt.Sprintf("   %s delivery %d: crash %s, nothing acknowledged -> the broker redelivers\n", p.msg.Name, p.deliveries, where)
	return res
}

// settledResult reports a delivery the consumer settled as s.
func settledResult(p *pending, d Delivery, del *delivery, s consumer.Settled) result {
	var detail []string
	d.Action = string(s.Action)
	if s.Action == inboxkit.ActionRequeue {
		d.Action = "redelivery"
	}
	d.Outcome, d.Class, d.Reason = string(s.Result.Outcome), string(s.Result.Class), s.Result.Reason
	detail = append(detail, "outcome="+d.Outcome)
	if s.Result.Status != "" {
		detail = append(detail, "status="+string(s.Result.Status))
	}
	if d.Class != "" {
		detail = append(detail, "class="+d.Class)
	}
	if d.Reason != "" {
		detail = append(detail, "reason="+d.Reason)
	}
	if s.Result.Attempts > 0 {
		detail = append(detail, "attempts="+strconv.Itoa(s.Result.Attempts))
	}
	if s.Result.Err != nil {
		d.Error = s.Result.Err.Error()
		detail = append(detail, "error="+strconv.Quote(d.Error))
	}
	if s.Err != nil && !del.lost {
		detail = append(detail, "runtime-error="+strconv.Quote(s.Err.Error()))
	}
	return resultLine(p, d, del, detail)
}

// resultLine is the transcript line of a settled delivery.
func resultLine(p *pending, d Delivery, del *delivery, detail []string) result {
	d.AckLost = del.lost
	res := result{d: d, again: del.lost || del.requeued}
	line := fmt.Sprintf("   %s delivery %d: %s", p.msg.Name, p.deliveries, d.Action)
	if len(detail) > 0 {
		line += " | " + strings.Join(detail, " ")
	}
	if del.lost {
		line += "\n      the ack is lost (crash after commit) -> the broker redelivers"
	}
	res.line = line + "\n"
	return res
}

type delivery struct {
	m        inboxkit.Message
	w        *world
	lost     bool
	requeued bool
}

func (d *delivery) Message() inboxkit.Message { return d.m }

func (d *delivery) Ack(context.Context) error {
	if d.w.ackLost() {
		d.lost = true
		return errors.New("connection lost before the ack reached the broker (injected crash after commit)")
	}
	return nil
}

func (d *delivery) Requeue(context.Context, time.Duration) error {
	d.requeued = true
	return nil
}

type noSource struct{}

func (noSource) Receive(ctx context.Context) (consumer.Delivery, error) {
	return nil, consumer.ErrClosed
}
func (noSource) Close() error { return nil }

func (r *runner) final(ctx context.Context) error {
	r.w.mu.Lock()
	calls := slices.Clone(r.w.svc.calls)
	pubs := slices.Clone(r.w.published)
	unused, during := r.w.svc.unused()
	for _, k := range slices.Sorted(maps.Keys(r.w.crash)) {
		if r.w.crash[k] > 0 {
			unused = append(unused, fmt.Sprintf("crash %s: %d left", k, r.w.crash[k]))
		}
	}
	unused = append(unused, during...)
	r.w.mu.Unlock()

	r.out.calls(calls)
	for _, t := range r.insts[0].subject.Tables {
		order := t.OrderBy
		if order == "" {
			order = t.Columns[0]
		}
		q := fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", strings.Join(t.Columns, ", "), t.Name, order)
		if err := r.out.query(ctx, r.db.DB, "table "+t.Name, t.Name, t.Columns, q, nil); err != nil {
			return err
		}
	}
	if r.store != nil {
		cols := inboxShown
		tab := r.store.Config().Table
		q := fmt.Sprintf("SELECT %s FROM %s ORDER BY EVENT_ID, CONSUMER_NAME", strings.Join(cols, ", "), tab)
		if err := r.out.query(ctx, r.db.DB, "inbox "+tab, "inbox", cols, q, nil); err != nil {
			return err
		}
	} else {
		r.out.section("inbox")
		r.out.item("(none: the consumer has no inbox table)")
	}
	if tab := r.insts[0].subject.Outbox; tab != "" {
		q := fmt.Sprintf("SELECT %s FROM %s ORDER BY MSG_KEY, SEQ", strings.Join(outboxShown, ", "), tab)
		if err := r.out.query(ctx, r.db.DB, "outbox "+tab, "outbox", outboxShown, q, nil); err != nil {
			return err
		}
	}

	dests := []string{"DLQ." + r.sc.Queue, r.sc.Queue + ".REJECTED"}
	for _, p := range pubs {
		if !slices.Contains(dests, p.destination) {
			dests = append(dests, p.destination)
		}
	}
	for _, dest := range dests {
		var msgs []Published
		for _, p := range pubs {
			if p.destination == dest {
				msgs = append(msgs, Published{Destination: dest, Headers: p.headers, Body: string(p.body)})
			}
		}
		r.tr.Published = append(r.tr.Published, msgs...)
		r.out.section("published to " + dest)
		r.out.messages(msgs)
	}
	r.out.section("broker dead-letter queue " + BrokerDeadLetterQueue)
	if len(r.tr.BrokerDeadLetters) == 0 {
		r.out.item("(nothing)")
	}
	for i, name := range r.tr.BrokerDeadLetters {
		r.out.item("%d. %s (no reason: the broker only counted deliveries)", i+1, name)
	}
	r.out.unused(unused)
	return nil
}
