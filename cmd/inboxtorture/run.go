package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/internal/failpoint"
)

const consumerName = "invoice-consumer"

// rig is one run.
type rig struct {
	cfg      config
	log      func(string, ...any)
	inboxctl string
	dbURL    string
	db       *sql.DB
	// dbName is the run's database; keepDB keeps it after the run (a
	// failed ledger, to look at).
	dbName string
	keepDB bool
	queue  string
	dlq    string
	plan   *plan
	sup    *supervisor

	published   atomic.Int64 // messages confirmed by inboxctl publish
	retried     atomic.Int64 // messages published again after a failed chunk
	lateSent    atomic.Int64
	publishDone atomic.Bool

	// faults are the run's service faults besides the restarts (watch).
	faults  []fault
	stopped int // consumers stopped with SIGSTOP

	mu             sync.Mutex
	faultsDone     []string // each fault run, when, and how long it took
	dbRestarts     int
	brokerRestarts int
	restartErrs    []string
}

// binary is a program a scenario runs: its path (from a flag), or "" to
// build pkg with -tags failpoints.
type binary struct {
	path *string
	pkg  string
}

// setup is what every scenario does first: the generator of cfg's seed; a
// run id for the queues and the database, never from the seed, so that a
// repeated seed does not find the DLQ copies of an earlier run; the rig
// with its log; the binaries, built with -tags failpoints where no path
// was given (into a directory removed by cleanup) and checked for the tag
// when failpoints are on; the broker answering; a fresh database, migrated
// with migrateArgs (dropped by cleanup unless --keep). cleanup must be
// called once the scenario is done, also after an error.
func setup(ctx context.Context, cfg config, stderr io.Writer, bins []binary, migrateArgs ...string) (r *rig, rnd *rand.Rand, runID string, cleanup func(), err error) {
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	rnd = rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
	runID = fmt.Sprintf("%06x", uint32(time.Now().UnixNano()/1000)&0xffffff^uint32(os.Getpid()))
	r = &rig{cfg: cfg}
	r.log = func(format string, args ...any) {
		if cfg.verbose {
			fmt.Fprintf(stderr, "%s inboxtorture: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(e error) (*rig, *rand.Rand, string, func(), error) {
		cleanup()
		return nil, nil, "", func() {}, e
	}
	tmp, err := os.MkdirTemp("", "inboxtorture-")
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { os.RemoveAll(tmp) })
	r.inboxctl = cfg.inboxctl
	for _, b := range append([]binary{{&r.inboxctl, "./cmd/inboxctl"}}, bins...) {
		if *b.path != "" {
			continue
		}
		*b.path = filepath.Join(tmp, filepath.Base(b.pkg))
		r.log("building %s with -tags failpoints", b.pkg)
		out, err := exec.CommandContext(ctx, "go", "build", "-tags", "failpoints", "-o", *b.path, b.pkg).CombinedOutput()
		if err != nil {
			return fail(fmt.Errorf("go build -tags failpoints %s (run the rig from the repository root, or give its path by flag): %v\n%s", b.pkg, err, out))
		}
	}
	if cfg.failpoints != "" {
		// A binary without the tag would silently never fire.
		for _, b := range append([]binary{{&r.inboxctl, "./cmd/inboxctl"}}, bins...) {
			out, _ := exec.Command("go", "version", "-m", *b.path).Output()
			if !bytes.Contains(out, []byte("-tags=failpoints")) {
				return fail(fmt.Errorf("%s was not built with -tags failpoints (go version -m shows no such tag): its failpoints would never fire", *b.path))
			}
		}
	}
	if err := brokerAnswers(cfg.brokerURL, cfg.private); err != nil {
		return fail(err)
	}
	r.dbName = "inboxtorture_" + runID
	if err := r.createDB(ctx, r.dbName); err != nil {
		return fail(err)
	}
	undo = append(undo, func() {
		r.db.Close()
		if !cfg.keep && !r.keepDB {
			r.dropDB(r.dbName)
		}
	})
	if out, err := r.inboxctlRun(ctx, append([]string{"migrate", "--db", r.dbURL}, migrateArgs...)...); err != nil {
		return fail(fmt.Errorf("inboxctl migrate: %v\n%s", err, out))
	}
	return r, rnd, runID, cleanup, nil
}

// run sets up, tortures, waits for quiet and checks the ledger.
func run(ctx context.Context, cfg config, stderr io.Writer) (*result, error) {
	start := time.Now()
	r, rnd, runID, cleanup, err := setup(ctx, cfg, stderr, nil, "--seed-customers")
	if err != nil {
		return nil, err
	}
	cfg.seed = r.cfg.seed // setup chose it when --seed was 0
	defer cleanup()
	r.queue, r.dlq = "torture."+runID, "DLQ.torture."+runID

	r.plan, err = newPlan(runID, cfg.messages, cfg.rejects, cfg.poison, cfg.resendPct, rnd)
	if err != nil {
		return nil, err
	}
	logDir := cfg.logDir
	if logDir != "" {
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, err
		}
	}
	args := []string{"run", "--db", r.dbURL, "--broker", cfg.brokerURL, "--queue", r.queue, "--dlq", r.dlq,
		"--concurrency", fmt.Sprint(cfg.concurrency), "--batch", fmt.Sprint(cfg.batch), "--mode", cfg.mode, "--max-attempts", fmt.Sprint(cfg.maxAttempts), "--log-format", "json"}
	r.sup = newSupervisor(r.inboxctl, args, []string{failpoint.EnvVar + "=" + cfg.failpoints}, logDir, r.log)
	var peer *hostile
	if cfg.garbleAfter > 0 {
		if peer, err = newHostile(cfg.brokerURL); err != nil {
			return nil, err
		}
		defer peer.close()
		r.sup.slotArgs = func(slot int) []string {
			if slot == 0 {
				return []string{"--broker", peer.url} // the last --broker wins
			}
			return nil
		}
	}
	r.faults = r.soakFaults(peer)
	for i := 0; i < cfg.consumers; i++ {
		if err := r.sup.start(i, 0); err != nil {
			r.sup.stop(10 * time.Second)
			return nil, err
		}
	}
	r.log("run %s: %d consumers on %s queue %s, database %s, seed %d", runID, cfg.consumers, cfg.brokerURL, r.queue, r.dbName, cfg.seed)

	pubSeed, killSeed := rnd.Uint64(), rnd.Uint64()
	pctx, cancelPub := context.WithCancel(ctx)
	var pubWG sync.WaitGroup
	pubWG.Add(1)
	go func() {
		defer pubWG.Done()
		r.publish(pctx, pubSeed)
	}()
	kills, timedOut := r.torture(ctx, rand.New(rand.NewPCG(killSeed, 7)))
	cancelPub()
	pubWG.Wait()
	r.sup.stop(30 * time.Second)

	res, err := r.ledger(ctx)
	if err != nil {
		return nil, err
	}
	res.broker, res.mode, res.seed, res.runID = cfg.broker, cfg.mode, cfg.seed, runID
	if cfg.batch > 1 {
		res.mode += fmt.Sprintf(" batch %d", cfg.batch)
	}
	res.messages = cfg.messages
	res.rejects, res.poison = r.plan.count(reject), r.plan.count(poison)
	res.resends = len(r.plan.order) - cfg.messages + int(r.lateSent.Load())
	res.resendsInFlight, res.resendsLate = r.plan.inFlight, int(r.lateSent.Load())
	res.producerRetries = int(r.retried.Load())
	res.kills = kills
	res.deaths, res.restarts = r.sup.counts()
	res.dbRestarts, res.brokerRestarts, res.restartErrs = r.dbRestarts, r.brokerRestarts, r.restartErrs
	res.timedOut = timedOut
	res.faults, res.stopped, res.stopFor = r.faultsDone, r.stopped, cfg.stopFor
	if cfg.cluster != "" {
		res.broker = cfg.cluster + " cluster"
	}
	if peer != nil {
		res.garbleAfter, res.garbled = cfg.garbleAfter, peer.garbled()
	}
	res.duration = time.Since(start)
	if !res.ok() {
		r.keepDB = true
		res.keptDB = r.dbName
	}
	return res, nil
}

func (r *rig) inboxctlRun(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.inboxctl, args...)
	cmd.Env = append(os.Environ(), failpoint.EnvVar+"=") // the rig's own calls never die
	return cmd.CombinedOutput()
}

func (r *rig) createDB(ctx context.Context, name string) error {
	admin, err := sql.Open("pgx", r.cfg.adminDB)
	if err != nil {
		return fmt.Errorf("--db: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		start := "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
		if r.cfg.private {
			start = "scripts/torture-services start pg"
		}
		return fmt.Errorf("create database %s on --db: %v\n\tis PostgreSQL running? start it with: %s", name, err, start)
	}
	u, err := url.Parse(r.cfg.adminDB)
	if err != nil {
		return fmt.Errorf("--db: %v", err)
	}
	u.Path = "/" + name
	r.dbURL = u.String()
	r.db, err = sql.Open("pgx", r.dbURL)
	return err
}

func (r *rig) dropDB(name string) {
	admin, err := sql.Open("pgx", r.cfg.adminDB)
	if err != nil {
		return
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		r.log("drop database %s: %v", name, err)
	}
}

// publish sends the plan through `inboxctl publish` in chunks; a chunk that
// fails (broker restarting) is sent again whole, as a producer that does
// not know what got through does. Late resends go out once their first
// copy has a final row.
func (r *rig) publish(ctx context.Context, seed uint64) {
	defer r.publishDone.Store(true)
	rnd := rand.New(rand.NewPCG(seed, 3))
	const chunk = 250
	late := append([]int(nil), r.plan.late...)
	rnd.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
	order := r.plan.order
	for len(order) > 0 || len(late) > 0 {
		if ctx.Err() != nil {
			return
		}
		var lines [][]byte
		n := min(chunk, len(order))
		for _, e := range order[:n] {
			lines = append(lines, r.plan.events[e].line)
		}
		order = order[n:]
		if len(late) > 0 {
			final := r.finalIDs(ctx)
			var keep []int
			for _, e := range late {
				if final[r.plan.events[e].id] && len(lines) < 2*chunk {
					lines = append(lines, r.plan.events[e].line)
					r.lateSent.Add(1)
				} else {
					keep = append(keep, e)
				}
			}
			late = keep
		}
		if len(lines) == 0 {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		r.publishLines(ctx, lines)
	}
}

func (r *rig) publishLines(ctx context.Context, lines [][]byte) {
	input := append(bytes.Join(lines, []byte("\n")), '\n')
	for try := 0; ctx.Err() == nil; try++ {
		cmd := exec.CommandContext(ctx, r.inboxctl, "publish", "--broker", r.cfg.brokerURL, "--queue", r.queue, "--file", "-")
		cmd.Stdin = bytes.NewReader(input)
		out, err := cmd.CombinedOutput()
		if err == nil {
			r.published.Add(int64(len(lines)))
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.retried.Add(int64(len(lines)))
		r.log("publish of %d messages failed (try %d), sending the chunk again: %v: %s", len(lines), try+1, err, bytes.TrimSpace(out))
		time.Sleep(time.Second)
	}
}

// finalIDs returns the event ids with a final row, or none when the
// database cannot be read (the late duplicates then wait for a later round).
func (r *rig) finalIDs(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	rows, err := r.db.QueryContext(ctx, `SELECT EVENT_ID FROM INBOX_EVENT_PROCESSING WHERE STATUS IN ('PROCESSED','REJECTED','DEAD_LETTERED')`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil {
			out[id] = true
		}
	}
	if rows.Err() != nil {
		return map[string]bool{} // as when the query fails: the late duplicates wait for the next round
	}
	return out
}

// snapshot is the inbox at one moment.
type snapshot struct {
	final, open, rows int
	sig               string
}

func (r *rig) snapshot(ctx context.Context) (snapshot, error) {
	var s snapshot
	rows, err := r.db.QueryContext(ctx, `SELECT STATUS, COUNT(*), COALESCE(SUM(ATTEMPTS),0), COALESCE(MAX(UPDATED_AT), MAX(CREATED_AT)) FROM INBOX_EVENT_PROCESSING GROUP BY STATUS ORDER BY STATUS`)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	var sig strings.Builder
	for rows.Next() {
		var st string
		var n, attempts int
		var at sql.NullTime
		if err := rows.Scan(&st, &n, &attempts, &at); err != nil {
			return s, err
		}
		fmt.Fprintf(&sig, "%s=%d/%d/%v ", st, n, attempts, at.Time.UnixNano())
		s.rows += n
		switch st {
		case "PROCESSED", "REJECTED", "DEAD_LETTERED":
			s.final += n
		default:
			s.open += n
		}
	}
	s.sig = sig.String()
	return s, rows.Err()
}

// torture kills consumers at random points of the progress, restarts the
// database and the broker when asked, and returns when the inbox is quiet
// (or at the timeout).
func (r *rig) torture(ctx context.Context, rnd *rand.Rand) (kills int, timedOut bool) {
	cfg := r.cfg
	at := make([]float64, cfg.kills)
	for i := range at {
		at[i] = 0.03 + 0.85*rnd.Float64()
	}
	sort.Float64s(at)
	stopAt := make([]float64, cfg.stops)
	for i := range stopAt {
		stopAt[i] = 0.05 + 0.8*rnd.Float64()
	}
	sort.Float64s(stopAt)
	var paused []chan struct{}
	var lastKill time.Time
	timedOut = r.watch(ctx, func() (float64, bool, string, error) {
		s, err := r.snapshot(ctx)
		if err != nil {
			return 0, true, "", err
		}
		progress := float64(s.final) / float64(cfg.messages)
		if len(at) > 0 && progress >= at[0] && time.Since(lastKill) > 300*time.Millisecond {
			slot := rnd.IntN(cfg.consumers)
			for i := 0; i < cfg.consumers; i++ {
				if r.sup.kill((slot + i) % cfg.consumers) {
					kills++
					at = at[1:]
					lastKill = time.Now()
					r.log("kill -9 consumer %d at %.0f%% final", (slot+i)%cfg.consumers, 100*progress)
					break
				}
			}
		}
		if len(stopAt) > 0 && progress >= stopAt[0] {
			slot := rnd.IntN(cfg.consumers)
			for i := 0; i < cfg.consumers; i++ {
				if done, ok := r.sup.pause((slot+i)%cfg.consumers, cfg.stopFor); ok {
					stopAt = stopAt[1:]
					paused = append(paused, done)
					r.stopped++
					r.log("SIGSTOP of consumer %d for %v at %.0f%% final", (slot+i)%cfg.consumers, cfg.stopFor, 100*progress)
					break
				}
			}
		}
		for len(paused) > 0 && isClosed(paused[0]) {
			paused = paused[1:]
		}
		return progress, len(at) > 0 || len(stopAt) > 0 || len(paused) > 0 || s.final < cfg.messages || s.open > 0, s.sig, nil
	})
	return kills, timedOut
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watch is a torture run's supervising loop. Every 250 ms it calls poll,
// which does the scenario's killing and returns the progress (0 to 1),
// whether work is left, and a signature of the state (an error skips the
// tick: the database may be restarting). It runs the service faults one
// at a time as the progress reaches them: the database's restart at 40 %
// and the broker's at 60 % when asked, and r.faults (a cluster's node
// kills, the hostile peer). It returns false once nothing is left to do,
// every fault is done, the producer is done and the signature has not
// changed for --quiet; true when ctx ends or --timeout passes first. It
// returns after the fault it began.
func (r *rig) watch(ctx context.Context, poll func() (progress float64, busy bool, sig string, err error)) (timedOut bool) {
	cfg := r.cfg
	faults := append([]fault(nil), r.faults...)
	if cfg.restartDB {
		faults = append(faults, fault{at: 0.4, name: "database restart", run: func() error { return r.restart("database", cfg.dbRestart, &r.dbRestarts) }})
	}
	if cfg.restartBrk {
		faults = append(faults, fault{at: 0.6, name: "broker restart", run: func() error { return r.restart("broker", cfg.brkRestart, &r.brokerRestarts) }})
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].at < faults[j].at })
	var running sync.WaitGroup
	var faultBusy atomic.Bool
	defer running.Wait()
	deadline := time.Now().Add(cfg.timeout)
	var quietSince time.Time
	var lastSig string
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			r.log("timeout: not quiet after %v", cfg.timeout)
			return true
		}
		progress, busy, sig, err := poll()
		if err != nil {
			continue
		}
		if len(faults) > 0 && progress >= faults[0].at && !faultBusy.Load() {
			f := faults[0]
			faults = faults[1:]
			faultBusy.Store(true)
			running.Add(1)
			go func() {
				defer running.Done()
				defer faultBusy.Store(false)
				r.runFault(f, progress)
			}()
		}
		if busy || len(faults) > 0 || faultBusy.Load() || !r.publishDone.Load() || sig != lastSig {
			quietSince, lastSig = time.Now(), sig
			continue
		}
		if time.Since(quietSince) >= cfg.quiet {
			return false
		}
	}
}

// runFault runs f, begun at progress, and records it (or its error) for
// the ledger.
func (r *rig) runFault(f fault, progress float64) {
	r.log("fault at %.0f%%: %s", 100*progress, f.name)
	began := time.Now()
	err := f.run()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.restartErrs = append(r.restartErrs, fmt.Sprintf("%s: %v", f.name, err))
		return
	}
	r.faultsDone = append(r.faultsDone, fmt.Sprintf("%s at %.0f%% (%.1fs)", f.name, 100*progress, time.Since(began).Seconds()))
}

func (r *rig) restart(what, command string, count *int) error {
	r.log("restarting the %s: %s", what, command)
	if err := shell(command); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	*count++
	r.log("%s restarted", what)
	return nil
}

// brokerAnswers fails early, naming the start command, when nothing
// listens on the broker's address.
func brokerAnswers(raw string, private bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--broker %q is not a URL with a host", raw)
	}
	var c net.Conn
	for _, host := range strings.Split(u.Host, ",") { // a cluster's node list: one node answering is enough
		if c, err = net.DialTimeout("tcp", host, 3*time.Second); err == nil {
			break
		}
	}
	if err != nil {
		start := map[string]string{"stomp": "scripts/activemq start", "amqp": "rabbitmq-server -detached",
			"nats": "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"}[u.Scheme]
		if private {
			start = "scripts/torture-services start " + map[string]string{"stomp": "activemq", "amqp": "rabbitmq", "nats": "nats"}[u.Scheme]
		}
		return fmt.Errorf("broker %s://%s does not answer: %v\n\tstart it with: %s", u.Scheme, u.Host, err, start)
	}
	return c.Close()
}

// dropQueues deletes the run's queues (and their messages) when the broker
// is RabbitMQ, after the run: they are its scratch, named by its run id,
// and nothing else reads them. A run whose database is kept (--keep, a
// failed ledger) keeps them too, for the look at what happened. Other
// brokers keep theirs (ActiveMQ's and JetStream's are the run's too, but
// their removal is an administration call this rig does not make).
func (r *rig) dropQueues(names ...string) {
	u, err := url.Parse(r.cfg.brokerURL)
	if err != nil || u.Scheme != "amqp" || r.cfg.keep || r.keepDB {
		return
	}
	u.RawQuery = ""
	for _, host := range strings.Split(u.Host, ",") { // a cluster's node list: one node is enough
		u.Host = host
		conn, err := amqp.DialConfig(u.String(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			continue
		}
		ch, err := conn.Channel()
		for _, q := range names {
			if err != nil {
				break
			}
			_, err = ch.QueueDelete(q, false, false, false)
		}
		if err != nil {
			r.log("delete the run's queues %v: %v", names, err)
		}
		_ = conn.Close()
		return
	}
}
