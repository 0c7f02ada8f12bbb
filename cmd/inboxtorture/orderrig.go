package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// The order scenario (--scenario order): per-key order across processes,
// crashes, retries and a poison event (issue 28, docs/order.md).
//
// The rig publishes --messages invoice events spread over --keys keys, each
// key's events numbered 1, 2, 3, … and published in that order with
// JMSXGroupID = the key (ActiveMQ message groups; on RabbitMQ the queue is
// declared single-active-consumer unless --single-active=false; on ActiveMQ
// --exclusive subscribes as exclusive consumers instead). --consumers
// `inboxctl run --order-key header:JMSXGroupID --concurrency 8` processes
// consume the queue and are killed with kill -9 every --kill-every.
//
// The handler's log is a table written in the handler's transaction: a
// trigger on shipping_letters (the invoice handler's first write) inserts
// (key, sequence) into torture_order_log, so a row exists exactly when the
// handler's transaction committed. The same trigger makes --fail-pct of the
// events fail technically on their first attempt (it reads the inbox row's
// ATTEMPTS: below 2 it raises) and the --poison events fail on every attempt
// (dead-lettered after --max-attempts). For the events of a poison event's
// key that come after it, the trigger records whether the poison's row was
// DEAD_LETTERED when they ran: they must have waited for it. With
// --on-poison park-key they must not run at all: each must end
// DEAD_LETTERED with reason KEY_PARKED, parked in sequence (their rows'
// UPDATED_AT rising with the sequence), while the other keys finish.

// orderEvent is one event of the order scenario's plan.
type orderEvent struct {
	id, invoice, key string
	seq              int
	fail             string // "", "once" or "always" (poison)
	afterPoison      string // the poison event of its key it must wait for
}

// orderDDL is the scenario's plan, log and trigger, created after
// inboxctl migrate.
const orderDDL = `
CREATE TABLE torture_order_plan (
	invoice_no   VARCHAR(40) PRIMARY KEY,
	event_id     VARCHAR(120) NOT NULL,
	okey         VARCHAR(40) NOT NULL,
	seq          INTEGER NOT NULL,
	fail         VARCHAR(10) NOT NULL,
	after_poison VARCHAR(120)
);
CREATE TABLE torture_order_log (
	id         BIGSERIAL PRIMARY KEY,
	event_id   VARCHAR(120) NOT NULL,
	okey       VARCHAR(40) NOT NULL,
	seq        INTEGER NOT NULL,
	waited     BOOLEAN,
	at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION torture_order_log() RETURNS trigger AS $$
DECLARE
	p torture_order_plan%ROWTYPE;
	n INTEGER;
	st VARCHAR(20);
BEGIN
	SELECT * INTO p FROM torture_order_plan WHERE invoice_no = NEW.invoice_no;
	IF NOT FOUND THEN
		RETURN NEW;
	END IF;
	IF p.fail = 'always' THEN
		RAISE EXCEPTION 'torture: poison event % fails on every attempt', p.event_id;
	END IF;
	IF p.fail = 'once' THEN
		SELECT ATTEMPTS INTO n FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = NEW.event_id AND CONSUMER_NAME = 'invoice-consumer';
		IF COALESCE(n, 0) < 2 THEN
			RAISE EXCEPTION 'torture: event % fails on its first attempt', p.event_id;
		END IF;
	END IF;
	IF p.after_poison IS NOT NULL THEN
		SELECT STATUS INTO st FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = p.after_poison AND CONSUMER_NAME = 'invoice-consumer';
	END IF;
	INSERT INTO torture_order_log (event_id, okey, seq, waited)
	VALUES (NEW.event_id, p.okey, p.seq, CASE WHEN p.after_poison IS NULL THEN NULL ELSE COALESCE(st = 'DEAD_LETTERED', false) END);
	RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER torture_order_log AFTER INSERT ON shipping_letters FOR EACH ROW EXECUTE FUNCTION torture_order_log();`

// newOrderPlan numbers n events over keys keys; failPct percent fail once,
// and poisons keys (the first ones of a random permutation) get a poison
// event in the middle of their sequence. The publish order is each key's
// events in sequence, the keys interleaved at random.
func newOrderPlan(runID string, n, keys, failPct, poisons int, rnd *rand.Rand) (events []*orderEvent, order []*orderEvent) {
	byKey := make([][]*orderEvent, keys)
	for i := range n {
		k := i % keys
		e := &orderEvent{key: fmt.Sprintf("k%03d", k), seq: len(byKey[k]) + 1}
		e.id = fmt.Sprintf("ord-%s-%s-%05d", runID, e.key, e.seq)
		e.invoice = fmt.Sprintf("INV-%s-%s-%05d", runID, e.key, e.seq)
		byKey[k] = append(byKey[k], e)
		events = append(events, e)
	}
	for _, i := range rnd.Perm(n)[:n*failPct/100] {
		events[i].fail = "once"
	}
	for _, k := range rnd.Perm(keys)[:min(poisons, keys)] {
		line := byKey[k]
		if len(line) == 0 {
			continue
		}
		p := line[len(line)/2]
		p.fail = "always"
		for _, e := range line[len(line)/2+1:] {
			e.afterPoison = p.id
		}
	}
	next := make([]int, keys)
	for len(order) < n {
		k := rnd.IntN(keys)
		for next[k] >= len(byKey[k]) {
			k = (k + 1) % keys
		}
		order = append(order, byKey[k][next[k]])
		next[k]++
	}
	return events, order
}

func (e *orderEvent) line() []byte {
	b, err := json.Marshal(map[string]any{
		"headers": map[string]string{"eventId": e.id, "JMSXGroupID": e.key, "correlationId": "order-" + e.key},
		"body": map[string]string{"invoiceNo": e.invoice, "customerNo": "K-100", "amount": fmt.Sprintf("%d.00", e.seq),
			"currency": "EUR", "issuedAt": "2026-01-05"},
	})
	if err != nil {
		panic(err) // strings only
	}
	return b
}

// isSTOMP reports whether u is an ActiveMQ (STOMP) broker URL.
func isSTOMP(u string) bool { return strings.HasPrefix(u, "stomp:") || strings.HasPrefix(u, "tcp:") }

// withQuery adds a query parameter to a broker URL.
func withQuery(u, param string) string {
	if strings.Contains(u, "?") {
		return u + "&" + param
	}
	return u + "?" + param
}

// runOrder sets up, tortures, waits for quiet and checks the ledger of the
// order scenario.
func runOrder(ctx context.Context, cfg config, stderr io.Writer) (*orderResult, error) {
	if cfg.singleActive && strings.HasPrefix(cfg.brokerURL, "amqp") {
		cfg.brokerURL = withQuery(cfg.brokerURL, "single-active-consumer=true")
	}
	if cfg.exclusive && !isSTOMP(cfg.brokerURL) {
		return nil, errors.New("--exclusive is ActiveMQ's exclusive consumer: use it with --broker stomp (RabbitMQ's is --single-active)")
	}
	if cfg.exclusive && !strings.Contains(cfg.brokerURL, "exclusive=") {
		cfg.brokerURL = withQuery(cfg.brokerURL, "exclusive=true")
	}
	exclusive := isSTOMP(cfg.brokerURL) && strings.Contains(cfg.brokerURL, "exclusive=true")
	start := time.Now()
	r, rnd, runID, cleanup, err := setup(ctx, cfg, stderr, nil, "--seed-customers")
	if err != nil {
		return nil, err
	}
	cfg.seed = r.cfg.seed // setup chose it when --seed was 0
	defer cleanup()
	r.queue, r.dlq = "ordertorture."+runID, "DLQ.ordertorture."+runID
	defer r.dropQueues(r.queue, r.dlq)
	if _, err := r.db.ExecContext(ctx, orderDDL); err != nil {
		return nil, fmt.Errorf("create the scenario's tables: %v", err)
	}
	events, order := newOrderPlan(runID, cfg.messages, cfg.keys, cfg.failPct, cfg.poison, rnd)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		var after any
		if e.afterPoison != "" {
			after = e.afterPoison
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO torture_order_plan (invoice_no, event_id, okey, seq, fail, after_poison) VALUES ($1, $2, $3, $4, $5, $6)`,
			e.invoice, e.id, e.key, e.seq, e.fail, after); err != nil {
			_ = tx.Rollback()
			return nil, fmt.Errorf("write the plan: %v", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("write the plan: %v", err)
	}
	if cfg.logDir != "" {
		if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
			return nil, err
		}
	}
	args := []string{"run", "--db", r.dbURL, "--broker", cfg.brokerURL, "--queue", r.queue, "--dlq", r.dlq,
		"--concurrency", fmt.Sprint(cfg.concurrency), "--max-attempts", fmt.Sprint(cfg.maxAttempts),
		"--requeue-delay", "100ms", "--no-relay", "--log-format", "json"}
	if cfg.orderKey != "" {
		args = append(args, "--order-key", cfg.orderKey, "--on-poison", cfg.onPoison)
	}
	r.sup = newSupervisor(r.inboxctl, args, []string{failpoint.EnvVar + "=" + cfg.failpoints}, cfg.logDir, r.log)
	for i := range cfg.consumers {
		if err := r.sup.start(i, 0); err != nil {
			r.sup.stop(10 * time.Second)
			return nil, err
		}
	}
	r.log("run %s: %d consumers on %s queue %s, database %s, seed %d", runID, cfg.consumers, cfg.brokerURL, r.queue, r.dbName, cfg.seed)

	pctx, cancelPub := context.WithCancel(ctx)
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		defer r.publishDone.Store(true)
		const chunk = 500
		for i := 0; i < len(order) && pctx.Err() == nil; i += chunk {
			var lines [][]byte
			for _, e := range order[i:min(i+chunk, len(order))] {
				lines = append(lines, e.line())
			}
			r.publishLines(pctx, lines)
		}
	}()
	kills, timedOut := r.tortureOrder(ctx, rand.New(rand.NewPCG(rnd.Uint64(), 7)))
	cancelPub()
	<-pubDone
	r.sup.stop(30 * time.Second)

	res, err := r.orderLedger(ctx, events, cfg.onPoison == "park-key")
	if err != nil {
		return nil, err
	}
	res.broker, res.seed, res.runID, res.orderKey, res.onPoison = cfg.broker, cfg.seed, runID, cfg.orderKey, cfg.onPoison
	res.consumers, res.concurrency, res.singleActive = cfg.consumers, cfg.concurrency, cfg.singleActive && strings.HasPrefix(cfg.brokerURL, "amqp")
	res.exclusive = exclusive
	res.messages, res.keys = cfg.messages, cfg.keys
	res.kills = kills
	res.deaths, res.restarts = r.sup.counts()
	res.timedOut = timedOut
	res.duration = time.Since(start)
	if !res.ok() {
		r.keepDB = true
		res.keptDB = r.dbName
	}
	return res, nil
}

// tortureOrder kills a random consumer every --kill-every while events
// are open, and returns when every event is final and the inbox has been
// quiet for --quiet (or at the timeout).
func (r *rig) tortureOrder(ctx context.Context, rnd *rand.Rand) (kills int, timedOut bool) {
	cfg := r.cfg
	lastKill := time.Now()
	timedOut = r.watch(ctx, func() (float64, bool, string, error) {
		s, err := r.snapshot(ctx)
		if err != nil {
			return 0, true, "", err
		}
		progress := float64(s.final) / float64(cfg.messages)
		if cfg.killEvery > 0 && s.final < cfg.messages && time.Since(lastKill) >= cfg.killEvery {
			// A consumer that a failpoint just ended (restarting) cannot be
			// killed: the next one is, so that a short run still has its
			// kills; with none running, the next look tries again.
			first := rnd.IntN(cfg.consumers)
			for i := range cfg.consumers {
				slot := (first + i) % cfg.consumers
				if r.sup.kill(slot) {
					kills++
					r.log("kill -9 consumer %d at %.0f%% final", slot, 100*progress)
					lastKill = time.Now()
					break
				}
			}
		}
		return progress, s.final < cfg.messages || s.open > 0, s.sig, nil
	})
	return kills, timedOut
}

// orderResult is the ledger of the order scenario.
type orderResult struct {
	broker, runID, orderKey string
	onPoison                string
	seed                    uint64
	consumers, concurrency  int
	singleActive, exclusive bool
	messages, keys          int
	kills                   int
	deaths                  map[death]int
	restarts                int
	timedOut                bool
	duration                time.Duration

	logged, failOnce, retried, poison, deadLettered int
	throughput                                      float64 // logged events per second, first to last log row
	lost, doubled, stuck, inversions, overtook      []string
	// With --on-poison park-key: behind counts the poison keys' later
	// events, parked those of them DEAD_LETTERED with KEY_PARKED and never
	// run, parkedOutOfOrder the parked ones whose row was dead-lettered
	// before a lower sequence of their key.
	behind, parked   int
	parkedOutOfOrder []string
	keptDB           string
}

func (r *orderResult) ok() bool {
	return len(r.lost) == 0 && len(r.doubled) == 0 && len(r.stuck) == 0 && len(r.inversions) == 0 &&
		len(r.overtook) == 0 && r.deadLettered == r.poison && !r.timedOut &&
		len(r.parkedOutOfOrder) == 0 && (r.onPoison != "park-key" || r.parked == r.behind)
}

// orderLedger checks every event against the handler's log and the inbox:
// each non-poison event logged once and PROCESSED, each poison event
// DEAD_LETTERED and never logged; per key, the sequence strictly rising in
// the log's order; the events after a poison event logged only once it was
// dead-lettered; with park (--on-poison park-key), those events never
// logged but DEAD_LETTERED with reason KEY_PARKED, parked in sequence.
func (r *rig) orderLedger(ctx context.Context, events []*orderEvent, park bool) (*orderResult, error) {
	res := &orderResult{}
	logged, err := r.countBy(ctx, `SELECT event_id, COUNT(*) FROM torture_order_log GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	status := map[string]string{}
	attempts := map[string]int{}
	reason := map[string]string{}
	updated := map[string]time.Time{}
	rows, err := r.db.QueryContext(ctx, `SELECT EVENT_ID, STATUS, ATTEMPTS, COALESCE(REASON_CODE, ''), COALESCE(UPDATED_AT, CREATED_AT) FROM INBOX_EVENT_PROCESSING`)
	if err != nil {
		return nil, fmt.Errorf("ledger: inbox: %v", err)
	}
	for rows.Next() {
		var id, st, rc string
		var n int
		var at time.Time
		if err := rows.Scan(&id, &st, &n, &rc, &at); err != nil {
			rows.Close()
			return nil, fmt.Errorf("ledger: inbox: %v", err)
		}
		status[id], attempts[id], reason[id], updated[id] = st, n, rc, at
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: inbox: %w", err)
	}
	lastParked := map[string]*orderEvent{} // per key, the parked event of the highest sequence so far
	for _, e := range events {
		where := fmt.Sprintf("%s (%s #%d): %d log row(s), inbox %s, %d attempt(s)", e.id, e.key, e.seq, logged[e.id], orNone(status[e.id]), attempts[e.id])
		res.logged += logged[e.id]
		if park && e.afterPoison != "" && e.fail != "always" {
			// events are in sequence per key: each parked one must have
			// been dead-lettered after the one before it.
			res.behind++
			switch {
			case logged[e.id] > 0:
				res.overtook = append(res.overtook, where+": ran although its key was parked")
			case status[e.id] != "DEAD_LETTERED" || reason[e.id] != inboxkit.ReasonKeyParked:
				res.stuck = append(res.stuck, where+", reason "+orNone(reason[e.id])+": not parked")
			default:
				res.parked++
				if p := lastParked[e.key]; p != nil && updated[e.id].Before(updated[p.id]) {
					res.parkedOutOfOrder = append(res.parkedOutOfOrder, fmt.Sprintf("%s #%d parked at %s, before #%d at %s",
						e.key, e.seq, updated[e.id].Format(time.RFC3339Nano), p.seq, updated[p.id].Format(time.RFC3339Nano)))
				}
				lastParked[e.key] = e
			}
			continue
		}
		switch e.fail {
		case "always":
			res.poison++
			if status[e.id] == "DEAD_LETTERED" && logged[e.id] == 0 {
				res.deadLettered++
			} else {
				res.stuck = append(res.stuck, where)
			}
			continue
		case "once":
			res.failOnce++
			if attempts[e.id] >= 2 {
				res.retried++
			}
		}
		switch {
		case logged[e.id] == 0 && status[e.id] == "PROCESSED":
			res.lost = append(res.lost, where)
		case logged[e.id] == 0:
			res.stuck = append(res.stuck, where)
		case logged[e.id] > 1:
			res.doubled = append(res.doubled, where)
		case status[e.id] != "PROCESSED":
			res.stuck = append(res.stuck, where)
		}
	}
	q, err := r.db.QueryContext(ctx, `SELECT okey, seq, id, waited, EXTRACT(EPOCH FROM at)::float8 FROM torture_order_log ORDER BY okey, id`)
	if err != nil {
		return nil, fmt.Errorf("ledger: order: %v", err)
	}
	defer q.Close()
	last, lastKey := 0, ""
	var first, end float64
	for q.Next() {
		var key string
		var seq int
		var id int64
		var waited *bool
		var at float64
		if err := q.Scan(&key, &seq, &id, &waited, &at); err != nil {
			return nil, fmt.Errorf("ledger: order: %v", err)
		}
		if first == 0 || at < first {
			first = at
		}
		end = max(end, at)
		if key != lastKey {
			last, lastKey = 0, key
		}
		if seq <= last {
			res.inversions = append(res.inversions, fmt.Sprintf("%s: #%d written after #%d (log row %d)", key, seq, last, id))
		}
		last = max(last, seq)
		if waited != nil && !*waited {
			res.overtook = append(res.overtook, fmt.Sprintf("%s #%d ran before the key's poison event was dead-lettered (log row %d)", key, seq, id))
		}
	}
	if end > first {
		res.throughput = float64(res.logged) / (end - first)
	}
	return res, q.Err()
}

func (r *orderResult) print(w io.Writer) {
	key := r.orderKey
	if key == "" {
		key = "(none)"
	}
	across := "message groups (JMSXGroupID)"
	if r.exclusive {
		across = "exclusive consumers"
	}
	if strings.HasPrefix(r.broker, "amqp") || r.broker == "rabbitmq" {
		across = "competing consumers"
		if r.singleActive {
			across = "single-active-consumer queue"
		}
	}
	fmt.Fprintf(w, "order scenario on %s: %d events over %d keys, %d consumers × concurrency %d, --order-key %s, %s, seed %d, %.1fs\n",
		r.broker, r.messages, r.keys, r.consumers, r.concurrency, key, across, r.seed, r.duration.Seconds())
	var other []string
	for d, n := range r.deaths {
		if d != deathKill {
			other = append(other, fmt.Sprintf("%s %d", strings.TrimPrefix(string(d), "failpoint "), n))
		}
	}
	if len(other) == 0 {
		other = []string{"-"}
	}
	fmt.Fprintf(w, "kill -9: %d; other deaths: %s; %d restarts\n", r.kills, strings.Join(other, ", "), r.restarts)
	fmt.Fprintf(w, "failures: %d events failing once (%d retried and processed), %d poison (%d dead-lettered after their attempts)\n",
		r.failOnce, r.retried, r.poison, r.deadLettered)
	if r.onPoison == "park-key" {
		fmt.Fprintf(w, "--on-poison park-key: %d of the poison keys' %d later events parked (DEAD_LETTERED, KEY_PARKED, never run), %d parked out of sequence\n",
			r.parked, r.behind, len(r.parkedOutOfOrder))
	}
	fmt.Fprintf(w, "handler log: %d rows, %.0f events/s from the first to the last\n", r.logged, r.throughput)
	fmt.Fprintf(w, "ledger: lost %d, doubled %d, stuck %d, per-key inversions %d, ran before their key's poison was settled %d\n",
		len(r.lost), len(r.doubled), len(r.stuck), len(r.inversions), len(r.overtook))
	if r.timedOut {
		fmt.Fprintln(w, "TIMEOUT: not every event was final in time; what was open counts as stuck")
	}
	printIDs(w, "LOST", r.lost)
	printIDs(w, "DOUBLED", r.doubled)
	printIDs(w, "STUCK", r.stuck)
	printIDs(w, "INVERSION", r.inversions)
	printIDs(w, "OVERTOOK THE POISON", r.overtook)
	printIDs(w, "PARKED OUT OF SEQUENCE", r.parkedOutOfOrder)
	if r.keptDB != "" {
		fmt.Fprintf(w, "database %s kept for inspection\n", r.keptDB)
	}
}
