package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// pgPair is a private PostgreSQL primary and streaming standby made by
// scripts/pg-standby in a directory of its own, removed at test end.
type pgPair struct {
	t                    *testing.T
	env                  []string
	primary, standby     int
	primaryDB, standbyDB *sql.DB
}

// syncReplication is the replication of TestRunFailsOverToAPromotedStandby;
// false is asynchronous, to see that test fail when it loses a commit.
var syncReplication = true

// pgStandbyScript is scripts/pg-standby seen from this package.
const pgStandbyScript = "../../scripts/pg-standby"

// startPGPair starts a pair on the ports given: sync selects synchronous
// replication; upstream, when not "", is where the standby streams from
// (a proxy in front of the primary).
func startPGPair(t *testing.T, primary, standby int, sync bool, upstream string) *pgPair {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "inboxkit-pgsb-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgPair{t: t, primary: primary, standby: standby, env: []string{
		"INBOXKIT_PGSB_DIR=" + dir,
		fmt.Sprintf("INBOXKIT_PGSB_PRIMARY_PORT=%d", primary),
		fmt.Sprintf("INBOXKIT_PGSB_STANDBY_PORT=%d", standby),
		"INBOXKIT_PGSB_SYNC=" + map[bool]string{true: "on", false: "off"}[sync],
	}}
	if upstream != "" {
		p.env = append(p.env, "INBOXKIT_PGSB_UPSTREAM="+upstream)
	}
	t.Cleanup(func() {
		if out, err := p.script("clean"); err != nil {
			t.Errorf("scripts/pg-standby clean: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	if out, err := p.script("start"); err != nil {
		t.Fatalf("a PostgreSQL primary and standby did not start (needs PostgreSQL's server binaries, pg_basebackup; "+
			"start by hand with `scripts/pg-standby start`): %v\n%s", err, out)
	}
	p.primaryDB = p.open(primary)
	p.standbyDB = p.open(standby)
	return p
}

func (p *pgPair) script(cmd string) (string, error) {
	c := exec.Command(pgStandbyScript, cmd)
	c.Env = append(os.Environ(), p.env...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

func (p *pgPair) open(port int) *sql.DB {
	db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = db.Close() })
	return db
}

// url is the multi-host URL a consumer uses: whichever of the two accepts
// writes.
func (p *pgPair) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?target_session_attrs=read-write", p.primary, p.standby)
}

// db is the pair as a dbtest.DB for startFaultRun: DSN the multi-host
// URL, the pool on the primary (see failedOver).
func (p *pgPair) db() *dbtest.DB {
	return &dbtest.DB{DB: p.primaryDB, Backend: dbtest.Postgres, DSN: p.url(), Driver: "pgx"}
}

// processed counts the PROCESSED inbox rows on db.
func processed(db *sql.DB) (int, error) {
	var n int
	err := db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'PROCESSED'`).Scan(&n)
	return n, err
}

// failover is what killAndPromote measured.
type failover struct {
	replicated   int           // PROCESSED rows on the standby once it replayed all it received
	promoted     time.Duration // from the kill to the end of pg_ctl promote
	firstCommit  time.Duration // from the kill to the first new PROCESSED row on the new primary
	err          error
	promoteLog   string
	killedOutput string
}

// killAndPromote kills the primary with -9 (and cut, when not nil, at the
// same instant: what was in flight on the replication link is lost with
// it), promotes the standby once it replayed what it received, and waits
// for the first commit on it (at most limit; 0: not at all). It runs on its own
// goroutine: it reports through the result, never through t.
func (p *pgPair) killAndPromote(cut func(), limit time.Duration) (fo failover) {
	out, err := p.script("kill-primary")
	killed := time.Now()
	if cut != nil {
		cut()
	}
	fo.killedOutput = out
	if err != nil {
		fo.err = fmt.Errorf("kill-primary: %v: %s", err, out)
		return fo
	}
	// Replay catches up with what the standby received before the count.
	for {
		var caught bool
		err := p.standbyDB.QueryRow(`SELECT pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()`).Scan(&caught)
		if err != nil {
			fo.err = err
			return fo
		}
		if caught {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fo.replicated, err = processed(p.standbyDB); err != nil {
		fo.err = err
		return fo
	}
	if fo.promoteLog, err = p.script("promote"); err != nil {
		fo.err = fmt.Errorf("promote: %v: %s", err, fo.promoteLog)
		return fo
	}
	fo.promoted = time.Since(killed)
	if limit == 0 {
		return fo
	}
	for time.Since(killed) < limit {
		n, err := processed(p.standbyDB)
		if err == nil && n > fo.replicated {
			fo.firstCommit = time.Since(killed)
			return fo
		}
		time.Sleep(20 * time.Millisecond)
	}
	fo.err = fmt.Errorf("no commit on the promoted standby within %v of the kill", limit)
	return fo
}

// Issue 29.2, synchronous replication: `inboxctl run` on a multi-host URL
// (target_session_attrs=read-write) while invoices arrive at a steady
// pace; the primary is killed with -9 mid-run and the standby promoted.
// The standby streams through a proxy that delays the link by 100ms each
// way, cut at the kill. The delivery in hand fails (--process-timeout bounds it) and is handed
// back; the consumer reconnects to the promoted standby; every invoice is
// processed exactly once there and nothing is dead-lettered: a commit the
// old primary acknowledged had reached the standby.
func TestRunFailsOverToAPromotedStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("a PostgreSQL primary and standby, a failover; skipped with -short")
	}
	t.Parallel()
	const primaryPort = 16601
	px := tcpproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", primaryPort))
	pair := startPGPair(t, primaryPort, 16602, syncReplication, px.Addr())
	broker := "amqp://guest:guest@127.0.0.1:5672/"
	f := startFaultRun(t, pair.db(), broker, "--db", pair.url(), "--broker", broker, "--process-timeout", "5s")
	// On loopback the standby lags by almost nothing; 100ms each way makes
	// every commit wait for a distant standby. With syncReplication false
	// the commits of the last 100ms or so before the kill are lost, and
	// this test fails when the kill falls on one (luck: it passed once).
	px.Delay(100 * time.Millisecond)

	const n = 40
	done := make(chan failover, 1)
	for f.sent < n {
		f.publish(2)
		if f.sent == n/2 {
			go func() { done <- pair.killAndPromote(px.Cut, time.Minute) }()
		}
		time.Sleep(100 * time.Millisecond)
	}
	fo := <-done
	if fo.err != nil {
		t.Fatalf("failover: %v\n%s", fo.err, f.logs)
	}
	f.db.DB = pair.standbyDB // the old primary is gone
	f.wait("every invoice processed on the promoted standby", time.Minute, f.allProcessed)
	f.exactlyOnce()
	t.Logf("synchronous failover (replication link delayed 100ms): %d of %d invoices processed on the standby at the kill; promoted %v after the kill; "+
		"first commit on the new primary %v after the kill",
		fo.replicated, n, fo.promoted.Round(time.Millisecond), fo.firstCommit.Round(time.Millisecond))
}

// Issue 29.2, asynchronous replication: the standby streams through a
// proxy that delays the replication link; the primary is killed with -9
// right after a burst of commits (the link cut with it: what was in flight
// is lost) and the standby promoted. The ledger shows what the window
// costs: invoices acknowledged to the broker (gone from the queue) whose
// inbox row and business row are both missing on the promoted standby.
// Loss is luck; consistency is not: an event never has its business row
// without its inbox row, nor the other way round.
func TestRunAsynchronousFailoverLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("a PostgreSQL primary and standby, a failover; skipped with -short")
	}
	t.Parallel()
	const primaryPort, burst = 16611, 30
	px := tcpproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", primaryPort))
	pair := startPGPair(t, primaryPort, 16612, false, px.Addr())
	broker := "amqp://guest:guest@127.0.0.1:5672/"
	f := startFaultRun(t, pair.db(), broker, "--db", pair.url(), "--broker", broker, "--process-timeout", "5s")

	f.publish(5)
	f.wait("the first 5 processed", time.Minute, f.allProcessed)
	px.Delay(500 * time.Millisecond) // the standby lags by about this much
	f.publish(burst)
	took := f.wait("the burst processed on the primary", time.Minute, f.allProcessed)
	onPrimary := f.statuses()["PROCESSED"]
	fo := pair.killAndPromote(px.Cut, 0) // nothing is left to commit
	if fo.err != nil {
		t.Fatalf("failover: %v\n%s", fo.err, f.logs)
	}
	f.db.DB = pair.standbyDB
	f.wait("/readyz 200 on the promoted standby", time.Minute, f.ready)
	time.Sleep(2 * time.Second) // a redelivery, if any, would land now

	var kept, lost, inconsistent []string
	for i := 1; i <= f.sent; i++ {
		id := fmt.Sprintf("pt-%d", i)
		var rows, docs int
		if err := f.db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1 AND STATUS = 'PROCESSED'`, id).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := f.db.QueryRow(`SELECT COUNT(*) FROM archived_documents WHERE invoice_no = $1`, "INV-"+id).Scan(&docs); err != nil {
			t.Fatal(err)
		}
		switch {
		case rows == 1 && docs == 1:
			kept = append(kept, id)
		case rows == 0 && docs == 0:
			lost = append(lost, id)
		default:
			inconsistent = append(inconsistent, fmt.Sprintf("%s (inbox rows %d, documents %d)", id, rows, docs))
		}
	}
	t.Logf("asynchronous failover ledger (replication link delayed 500ms, burst of %d done %v after publish returned): "+
		"sent %d, processed and acknowledged on the old primary %d, on the standby at the kill %d, "+
		"processed again after the failover %d, kept %d, lost %d %v, inconsistent %d; promoted %v after the kill",
		burst, took.Round(time.Millisecond), f.sent, onPrimary, fo.replicated, len(kept)-fo.replicated,
		len(kept), len(lost), lost, len(inconsistent), fo.promoted.Round(time.Millisecond))
	if len(inconsistent) > 0 {
		t.Errorf("events with a business row but no inbox row or the other way round: %v", inconsistent)
	}
	if len(kept)+len(lost) != f.sent {
		t.Errorf("ledger: kept %d + lost %d != sent %d", len(kept), len(lost), f.sent)
	}

	// Where the broker still holds a copy (here a second queue fed the
	// same invoices), inboxctl check finds exactly the lost ones.
	copyQueue := f.queue + ".copy"
	t.Cleanup(func() { deleteRabbitQueue(t, copyQueue) })
	var lines strings.Builder
	for i := 1; i <= f.sent; i++ {
		id := fmt.Sprintf("pt-%d", i)
		lines.WriteString(invoiceLine(id, "corr-"+id, "INV-"+id, "K-100") + "\n")
	}
	wantCode(t, inboxctl(t, lines.String(), "publish", "--broker", broker, "--queue", copyQueue, "--file", "-"), 0, "published")
	standbyDSN := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", pair.standby)
	r := inboxctl(t, "", "check", "--db", standbyDSN, "--broker", broker, "--copy-queue", copyQueue, "-o", "json")
	var out struct {
		Findings []finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("check -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	var missing *finding
	for i, x := range out.Findings {
		if x.Check == "missing-from-database" {
			missing = &out.Findings[i]
		} else if x.Count != 0 {
			t.Errorf("check on the promoted standby: %s %d %v, want none", x.Check, x.Count, x.Samples)
		}
	}
	wantExit := map[bool]int{true: 1, false: 0}[len(lost) > 0]
	if missing == nil || missing.Count != len(lost) || r.code != wantExit {
		t.Errorf("check --copy-queue: exit %d, finding %+v; want exit %d and the %d lost %v\n%s%s", r.code, missing, wantExit, len(lost), lost, r.stdout, r.stderr)
	} else {
		t.Logf("inboxctl check --copy-queue found the %d lost: %v", missing.Count, missing.Samples)
	}
}
