package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// The outbox scenario (--scenario outbox): the claims story end to end.
//
// Producer (the rig) -> senders (business row + outbox row, one
// transaction) -> relays (inboxctl relay) -> broker -> receivers (inbox +
// their own row). The producer sends each key's commands in sequence, the
// next one only after the previous was answered, and sends --resend-pct of
// them a second time with the same command id: half at the same moment to
// another sender (in flight), half after the key's next command was
// answered (late). A request that fails (its sender killed, the database
// restarting) is sent again to another sender until one answers.
// Senders, relays and receivers are killed with kill -9 every --kill-every
// and at their failpoints, and restarted.

// obCommand is one command of the plan with what the producer saw.
type obCommand struct {
	command
	resend int // 0 none, 1 in flight, 2 late
}

// obRig is one run of the outbox scenario.
type obRig struct {
	*rig
	agent      string
	queues     []string
	keys       [][]*obCommand // by key, in sequence
	ports      []int
	sups       map[string]*supervisor
	roles      []string
	acked      atomic.Int64
	dupAnswers atomic.Int64 // "duplicate" answers of the senders
	reqRetries atomic.Int64 // requests sent again after a failure
	resent     atomic.Int64 // planned producer retries sent
}

func (o *obRig) dest(key int) string { return o.queues[key%len(o.queues)] }

func newOBPlan(runID string, n, keys, resendPct int, rnd *rand.Rand, dest func(int) string) [][]*obCommand {
	out := make([][]*obCommand, keys)
	for i := 0; i < n; i++ {
		k := i % keys
		c := &obCommand{command: command{ID: fmt.Sprintf("cmd-%s-%06d", runID, i), Key: fmt.Sprintf("key-%03d", k), Seq: len(out[k]) + 1, Dest: dest(k)}}
		out[k] = append(out[k], c)
	}
	resends := n * resendPct / 100
	for i, idx := range rnd.Perm(n)[:resends] {
		out[idx%keys][idx/keys].resend = 1 + i%2
	}
	return out
}

// runOutbox sets up, tortures, waits for quiet and checks the ledger of
// the outbox scenario.
func runOutbox(ctx context.Context, cfg config, stderr io.Writer) (*obResult, error) {
	start := time.Now()
	agent := cfg.agent
	r, rnd, runID, cleanup, err := setup(ctx, cfg, stderr, []binary{{&agent, "./cmd/inboxtorture"}})
	if err != nil {
		return nil, err
	}
	cfg.seed = r.cfg.seed // setup chose it when --seed was 0
	defer cleanup()
	o := &obRig{rig: r, sups: map[string]*supervisor{}, agent: agent}
	if _, err := r.db.ExecContext(ctx, agentDDL); err != nil {
		return nil, fmt.Errorf("create the scenario's tables: %v", err)
	}
	for i := 0; i < cfg.receivers; i++ {
		o.queues = append(o.queues, fmt.Sprintf("obtorture.%s.p%d", runID, i))
	}
	r.dlq = "DLQ.obtorture." + runID
	defer r.dropQueues(append([]string{r.dlq}, o.queues...)...)
	if err := o.declareQueues(ctx); err != nil {
		return nil, err
	}
	o.keys = newOBPlan(runID, cfg.messages, cfg.keys, cfg.resendPct, rnd, o.dest)
	for i := 0; i < cfg.senders; i++ {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		o.ports = append(o.ports, p)
	}
	if cfg.logDir != "" {
		if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
			return nil, err
		}
	}
	fp := []string{failpoint.EnvVar + "=" + cfg.failpoints}
	role := func(name string, bin string, n int, args []string, env []string, slotArgs func(int) []string) error {
		s := newSupervisor(bin, args, env, cfg.logDir, r.log)
		s.name, s.slotArgs = name, slotArgs
		o.sups[name] = s
		o.roles = append(o.roles, name)
		for i := 0; i < n; i++ {
			if err := s.start(i, 0); err != nil {
				return err
			}
		}
		return nil
	}
	stopAll := func() {
		for _, name := range o.roles {
			o.sups[name].stop(30 * time.Second)
		}
	}
	err = role("receiver", o.agent, cfg.receivers, []string{"receiver", "--db", r.dbURL, "--broker", cfg.brokerURL, "--dlq", r.dlq, "--jetstream-ack-wait", cfg.jsAckWait.String()},
		append([]string{roleEnv + "=receiver"}, fp...), func(slot int) []string { return []string{"--queue", o.queues[slot]} })
	if err == nil {
		err = role("relay", r.inboxctl, cfg.relays, []string{"relay", "--db", r.dbURL, "--broker", cfg.brokerURL, "--lease", cfg.relayLease.String(), "--log-format", "json"}, fp, nil)
	}
	if err == nil {
		err = role("sender", o.agent, cfg.senders, []string{"sender", "--db", r.dbURL}, []string{roleEnv + "=sender"},
			func(slot int) []string { return []string{"--listen", fmt.Sprintf("127.0.0.1:%d", o.ports[slot])} })
	}
	if err != nil {
		stopAll()
		return nil, err
	}
	r.log("run %s: %d senders, %d relays, %d receivers on %s, database %s, seed %d", runID, cfg.senders, cfg.relays, cfg.receivers, cfg.brokerURL, r.dbName, cfg.seed)

	prodSeed, killSeed := rnd.Uint64(), rnd.Uint64()
	pctx, cancelProd := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	prodWG.Add(1)
	go func() {
		defer prodWG.Done()
		o.produce(pctx, prodSeed)
	}()
	kills, timedOut := o.torture(ctx, rand.New(rand.NewPCG(killSeed, 7)))
	cancelProd()
	prodWG.Wait()
	stopAll()

	res, err := o.ledger(ctx, timedOut)
	if err != nil {
		return nil, err
	}
	res.broker, res.seed, res.runID = cfg.broker, cfg.seed, runID
	res.commands, res.keys = cfg.messages, cfg.keys
	res.resent, res.reqRetries, res.dupAnswers = int(o.resent.Load()), int(o.reqRetries.Load()), int(o.dupAnswers.Load())
	res.kills = kills
	res.deaths, res.restarts = map[string]map[death]int{}, 0
	for _, name := range o.roles {
		d, n := o.sups[name].counts()
		res.deaths[name] = d
		res.restarts += n
	}
	res.roles = o.roles
	res.dbRestarts, res.brokerRestarts, res.restartErrs = r.dbRestarts, r.brokerRestarts, r.restartErrs
	res.timedOut = timedOut
	res.duration = time.Since(start)
	if !res.ok() {
		r.keepDB = true
		res.keptDB = r.dbName
	}
	return res, nil
}

// declareQueues opens a source on every partition queue once, so that the
// broker keeps what the relays publish before a receiver first consumed.
func (o *obRig) declareQueues(ctx context.Context) error {
	b, err := brokerurl.Open(o.cfg.brokerURL, brokerurl.Options{})
	if err != nil {
		return err
	}
	defer b.Close()
	for _, q := range append([]string{o.dlq}, o.queues...) {
		src, err := b.Source(ctx, q, "receiver-"+q, 1)
		if err != nil {
			return fmt.Errorf("declare queue %s: %v", q, err)
		}
		src.Close()
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// produce sends every key's commands in sequence through the senders, with
// --producers keys at a time.
func (o *obRig) produce(ctx context.Context, seed uint64) {
	defer o.publishDone.Store(true)
	keys := make(chan int, len(o.keys))
	for k := range o.keys {
		keys <- k
	}
	close(keys)
	client := &http.Client{Timeout: 15 * time.Second}
	var wg sync.WaitGroup
	for w := 0; w < o.cfg.producers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(w)))
			for k := range keys {
				var late *obCommand
				for _, c := range o.keys[k] {
					if ctx.Err() != nil {
						return
					}
					var inflight sync.WaitGroup
					first := rnd.IntN(len(o.ports))
					if c.resend == 1 {
						inflight.Add(1)
						go func() { // the same command to the next sender, at the same moment
							defer inflight.Done()
							o.request(ctx, client, first+1, c)
							o.resent.Add(1)
						}()
					}
					o.request(ctx, client, first, c)
					inflight.Wait()
					o.acked.Add(1)
					if late != nil {
						o.request(ctx, client, rnd.IntN(len(o.ports)), late)
						o.resent.Add(1)
						late = nil
					}
					if c.resend == 2 {
						late = c
					}
				}
				if late != nil {
					o.request(ctx, client, rnd.IntN(len(o.ports)), late)
					o.resent.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
}

// request sends c to a sender until one answers 200, starting with sender
// first and going round the others after a failure.
func (o *obRig) request(ctx context.Context, client *http.Client, first int, c *obCommand) {
	body, err := json.Marshal(c.command)
	if err != nil {
		panic(err) // strings and an int
	}
	for try := 0; ctx.Err() == nil; try++ {
		if try > 0 {
			o.reqRetries.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/command", o.ports[(first+try)%len(o.ports)])
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if string(answer) == "duplicate" {
				o.dupAnswers.Add(1)
			}
			return
		}
	}
}

// obSnapshot is the receiver side and the outbox at one moment.
type obSnapshot struct {
	received, rows, pending, open int
	sig                           string
}

func (o *obRig) snapshot(ctx context.Context) (obSnapshot, error) {
	var s obSnapshot
	err := o.db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(DISTINCT command_id) FROM torture_received),
		(SELECT COUNT(*) FROM torture_received),
		(SELECT COUNT(*) FROM INBOXKIT_OUTBOX WHERE STATUS <> 'SENT'),
		(SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS NOT IN ('PROCESSED','REJECTED','DEAD_LETTERED'))`).Scan(&s.received, &s.rows, &s.pending, &s.open)
	s.sig = fmt.Sprint(s.received, s.rows, s.pending, s.open)
	return s, err
}

// torture kills a random sender, relay or receiver every --kill-every,
// restarts the database and the broker when asked (at 40 % and 60 % of the
// commands received), and returns when everything was received, nothing
// is pending and nothing changed for --quiet (or at the timeout).
func (o *obRig) torture(ctx context.Context, rnd *rand.Rand) (kills map[string]int, timedOut bool) {
	cfg := o.cfg
	kills = map[string]int{}
	lastKill := time.Now()
	timedOut = o.watch(ctx, func() (float64, bool, string, error) {
		s, err := o.snapshot(ctx)
		if err != nil {
			return 0, true, "", err
		}
		progress := float64(s.received) / float64(cfg.messages)
		if cfg.killEvery > 0 && s.received < cfg.messages && time.Since(lastKill) >= cfg.killEvery {
			name := o.roles[rnd.IntN(len(o.roles))]
			sup := o.sups[name]
			slot := rnd.IntN(sup.size())
			if sup.kill(slot) {
				kills[name]++
				o.log("kill -9 %s %d at %.0f%% received", name, slot, 100*progress)
			}
			lastKill = time.Now()
		}
		return progress, s.received < cfg.messages || s.pending > 0 || s.open > 0, s.sig, nil
	})
	return kills, timedOut
}

// obResult is the ledger of the outbox scenario.
type obResult struct {
	broker, runID string
	seed          uint64

	commands, keys                  int
	resent, reqRetries, dupAnswers  int
	kills                           map[string]int
	roles                           []string
	deaths                          map[string]map[death]int
	restarts                        int
	dbRestarts, brokerRestarts      int
	restartErrs                     []string
	timedOut                        bool
	duration                        time.Duration
	senderRows, outboxRows, relayed int
	deliveries                      int // receiver rows, duplicates included

	lost, doubled, stuck, order []string
	keptDB                      string
}

func (r *obResult) ok() bool {
	return len(r.lost) == 0 && len(r.doubled) == 0 && len(r.stuck) == 0 && len(r.order) == 0 && len(r.restartErrs) == 0 && !r.timedOut
}

// ledger checks every command at the sender, in the outbox and at the
// receiver, and every key's order at the receiver. After a timeout a
// command no sender wrote yet, or one sent and not received yet, is still
// on its way: stuck, not lost.
func (o *obRig) ledger(ctx context.Context, timedOut bool) (*obResult, error) {
	res := &obResult{}
	sent, err := o.countBy(ctx, `SELECT command_id, COUNT(*) FROM torture_sent GROUP BY command_id`)
	if err != nil {
		return nil, err
	}
	received, err := o.countBy(ctx, `SELECT command_id, COUNT(*) FROM torture_received GROUP BY command_id`)
	if err != nil {
		return nil, err
	}
	status := map[string]string{}
	q, err := o.db.QueryContext(ctx, `SELECT s.command_id, COALESCE(b.STATUS, '(none)') FROM torture_sent s LEFT JOIN INBOXKIT_OUTBOX b ON b.MESSAGE_ID = s.message_id`)
	if err != nil {
		return nil, fmt.Errorf("ledger: outbox: %v", err)
	}
	for q.Next() {
		var id, st string
		if err := q.Scan(&id, &st); err != nil {
			q.Close()
			return nil, fmt.Errorf("ledger: outbox: %v", err)
		}
		status[id] = st
	}
	q.Close()
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("ledger: outbox: %w", err)
	}
	if err := o.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE STATUS = 'SENT') FROM INBOXKIT_OUTBOX`).Scan(&res.outboxRows, &res.relayed); err != nil {
		return nil, fmt.Errorf("ledger: outbox: %v", err)
	}
	inboxOpen, err := o.countBy(ctx, `SELECT EVENT_ID || ' ' || STATUS, 1 FROM INBOX_EVENT_PROCESSING WHERE STATUS <> 'PROCESSED'`)
	if err != nil {
		return nil, err
	}
	for row := range inboxOpen {
		res.stuck = append(res.stuck, "inbox row "+row)
	}
	for _, key := range o.keys {
		for _, c := range key {
			res.senderRows += sent[c.ID]
			res.deliveries += received[c.ID]
			where := fmt.Sprintf("%s (%s #%d): %d sender row(s), outbox %s, %d receiver row(s)", c.ID, c.Key, c.Seq, sent[c.ID], orNone(status[c.ID]), received[c.ID])
			switch {
			case sent[c.ID] == 1 && status[c.ID] != "SENT":
				res.stuck = append(res.stuck, where)
			case received[c.ID] == 0 && timedOut:
				res.stuck = append(res.stuck, where+" at the timeout")
			case received[c.ID] == 0 || sent[c.ID] == 0:
				res.lost = append(res.lost, where)
			case received[c.ID] > 1 || sent[c.ID] > 1:
				res.doubled = append(res.doubled, where)
			}
		}
	}
	// Per key, in the receiver's write order, the sequence rises strictly.
	rows, err := o.db.QueryContext(ctx, `SELECT cmd_key, seq, id FROM torture_received ORDER BY cmd_key, id`)
	if err != nil {
		return nil, fmt.Errorf("ledger: order: %v", err)
	}
	defer rows.Close()
	last, lastKey := 0, ""
	for rows.Next() {
		var key string
		var seq int
		var id int64
		if err := rows.Scan(&key, &seq, &id); err != nil {
			return nil, fmt.Errorf("ledger: order: %v", err)
		}
		if key != lastKey {
			last, lastKey = 0, key
		}
		if seq <= last {
			res.order = append(res.order, fmt.Sprintf("%s: #%d written after #%d (receiver row %d)", key, seq, last, id))
		}
		last = max(last, seq)
	}
	return res, rows.Err()
}

func (r *obResult) print(w io.Writer) {
	var kills, other []string
	for _, name := range r.roles {
		kills = append(kills, fmt.Sprintf("%s %d", name, r.kills[name]))
		var fps []string
		for d, n := range r.deaths[name] {
			if d != deathKill {
				fps = append(fps, fmt.Sprintf("%s %d", strings.TrimPrefix(string(d), "failpoint "), n))
			}
		}
		if len(fps) > 0 {
			sort.Strings(fps)
			other = append(other, name+": "+strings.Join(fps, ", "))
		}
	}
	if len(other) == 0 {
		other = []string{"-"}
	}
	fmt.Fprintf(w, "outbox scenario on %s: %d commands over %d keys, seed %d, %.1fs\n", r.broker, r.commands, r.keys, r.seed, r.duration.Seconds())
	fmt.Fprintf(w, "producer: %d planned retries sent (same command id), %d requests sent again after a failure, %d answered duplicate by the sender\n", r.resent, r.reqRetries, r.dupAnswers)
	fmt.Fprintf(w, "kill -9: %s; other deaths: %s; %d restarts; db/broker restarts %d/%d\n", strings.Join(kills, ", "), strings.Join(other, "; "), r.restarts, r.dbRestarts, r.brokerRestarts)
	fmt.Fprintf(w, "rows: %d at the senders, %d in the outbox (%d SENT), %d at the receivers\n", r.senderRows, r.outboxRows, r.relayed, r.deliveries)
	fmt.Fprintf(w, "ledger: lost %d, doubled %d, out of order %d, stuck %d\n", len(r.lost), len(r.doubled), len(r.order), len(r.stuck))
	if r.timedOut {
		fmt.Fprintln(w, "TIMEOUT: not everything was received and relayed in time; what was open counts as stuck")
	}
	for _, e := range r.restartErrs {
		fmt.Fprintln(w, "RESTART FAILED:", e)
	}
	printIDs(w, "LOST", r.lost)
	printIDs(w, "DOUBLED", r.doubled)
	printIDs(w, "OUT OF ORDER", r.order)
	printIDs(w, "STUCK", r.stuck)
	if r.keptDB != "" {
		fmt.Fprintf(w, "database %s kept for inspection\n", r.keptDB)
	}
}
