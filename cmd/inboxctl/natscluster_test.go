package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// natsClusterScript is scripts/nats-cluster seen from this package.
const natsClusterScript = "../../scripts/nats-cluster"

// natsCluster is a private 3-node JetStream cluster made by
// scripts/nats-cluster in a directory of its own, removed at test end.
type natsCluster struct {
	t    *testing.T
	env  []string
	base int // client ports base+1..3, monitoring base+21..23
}

var natsNodes = []string{"n1", "n2", "n3"}

// startNATSCluster builds nats-server (the version go.mod requires) and
// starts the three nodes on ports from base.
func startNATSCluster(t *testing.T, base int) *natsCluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "inboxkit-natsc-")
	if err != nil {
		t.Fatal(err)
	}
	c := &natsCluster{t: t, base: base, env: []string{
		"INBOXKIT_NATSC_DIR=" + dir,
		fmt.Sprintf("INBOXKIT_NATSC_PORT=%d", base),
	}}
	t.Cleanup(func() {
		if out, err := c.script("clean"); err != nil {
			t.Errorf("scripts/nats-cluster clean: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	t.Cleanup(func() { // runs before clean: what the nodes said
		if t.Failed() {
			for _, n := range natsNodes {
				b, _ := os.ReadFile(filepath.Join(dir, n, "log"))
				lines := strings.Split(string(b), "\n")
				t.Logf("%s's log, last lines:\n%s", n, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	if out, err := c.script("start"); err != nil {
		t.Fatalf("a 3-node NATS JetStream cluster did not start (the script builds nats-server with `go build github.com/nats-io/nats-server/v2`; "+
			"start by hand with `scripts/nats-cluster start`): %v\n%s", err, out)
	}
	return c
}

func (c *natsCluster) script(args ...string) (string, error) {
	cmd := exec.Command(natsClusterScript, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// url lists the three client addresses in the form inboxctl takes.
func (c *natsCluster) url() string {
	return fmt.Sprintf("nats://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", c.base+1, c.base+2, c.base+3)
}

// connections returns the names of the client connections node holds
// (its monitoring endpoint's /connz).
func (c *natsCluster) connections(node int) []string {
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz", c.base+21+node))
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	var z struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	body, _ := io.ReadAll(res.Body)
	if json.Unmarshal(body, &z) != nil {
		return nil
	}
	var names []string
	for _, x := range z.Connections {
		names = append(names, x.Name)
	}
	return names
}

// streamState is who leads a stream and whether every replica is current.
type streamState struct {
	leader    string
	followers []string
	current   bool // every replica current, none offline
	// consumerLeader leads the durable consumer (its own raft group)
	consumerLeader string
}

func streamStateOf(ctx context.Context, js natsjs.JetStream, stream string) (streamState, error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, stream)
	if err != nil {
		return streamState{}, err
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return streamState{}, fmt.Errorf("stream %s has no cluster information", stream)
	}
	st := streamState{leader: info.Cluster.Leader, current: info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2}
	for _, r := range info.Cluster.Replicas {
		st.followers = append(st.followers, r.Name)
		if !r.Current || r.Offline {
			st.current = false
		}
	}
	for ci := range s.ListConsumers(ictx).Info() {
		if ci.Cluster != nil {
			st.consumerLeader = ci.Cluster.Leader
		}
	}
	return st, nil
}

// Issue 29.1: `inboxctl run` on a 3-node JetStream cluster (its stream and
// its dead-letter stream with 3 replicas) while a producer publishes at a
// steady pace; the node leading the stream is killed with -9 mid-run, then,
// once it is back and caught up, a follower (the one holding the consumer's
// connection where there is one). The consumer recovers by itself (no
// restart), and the ledger holds: every invoice processed exactly once
// (one PROCESSED inbox row and one business row each), the one malformed
// message dead-lettered once, nothing else dead-lettered, the stream empty.
// The recovery time is from the kill to the processing of the first message
// published after it.
func TestRunRidesOutJetStreamClusterNodeKills(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node NATS cluster, two kill -9; skipped with -short")
	}
	t.Parallel()
	cl := startNATSCluster(t, 16720)
	broker := cl.url() + "?replicas=3"
	db := dbtest.New(t, dbtest.Postgres)
	f := startFaultRun(t, db, broker, "--db", db.DSN, "--broker", broker+"&heartbeat=1s", "--process-timeout", "5s", "--log-level", "debug")
	stream, dlqStream := jetstream.StreamName(f.queue), jetstream.StreamName("DLQ."+f.queue)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	nc, err := nats.Connect(cl.url(), nats.Name("inboxkit-test-observer"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The producer retries a publish until the cluster confirms it; its
	// Nats-Msg-Id lets the stream drop a retry of one that was stored.
	pub, err := jetstream.Open(ctx, jetstream.Config{URL: cl.url(), Replicas: 3, ConnectionName: "inboxkit-test-producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var mu sync.Mutex
	publishRetries := 0
	send := func(id string, line string) {
		h, body, err := parseEventLine([]byte(line))
		if err != nil {
			t.Error(err)
			return
		}
		h["Nats-Msg-Id"] = id
		for start := time.Now(); ; {
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			err := pub.Publish(pctx, f.queue, h, body)
			pcancel()
			if err == nil {
				return
			}
			if time.Since(start) > time.Minute {
				t.Errorf("publish %s: no confirm within a minute: %v", id, err)
				return
			}
			mu.Lock()
			publishRetries++
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}

	// A malformed message first: its dead letter creates the DLQ stream.
	send("pt-bad", `{"headers":{"eventId":"pt-bad","correlationId":"corr-bad"},"body":"{\"invoiceNo\": \"INV-BAD\", broken"}`)
	f.wait("the malformed message dead-lettered", time.Minute, func() bool { return f.statuses()["DEAD_LETTERED"] == 1 })
	for _, s := range []string{stream, dlqStream} {
		info, err := js.Stream(ctx, s)
		if err != nil {
			t.Fatalf("stream %s: %v", s, err)
		}
		if r := info.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", s, r)
		}
	}

	// The producer: 5 invoices a second until stopped.
	var sentMu sync.Mutex
	var began []time.Time // began[i]: when the producer began to send pt-(i+1)
	stop := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			sentMu.Lock()
			n := f.sent + 1
			began = append(began, time.Now())
			sentMu.Unlock()
			id := fmt.Sprintf("pt-%d", n)
			send(id, invoiceLine(id, "corr-"+id, "INV-"+id, "K-100"))
			sentMu.Lock()
			f.sent = n
			sentMu.Unlock()
		}
	}()
	sent := func() int {
		sentMu.Lock()
		defer sentMu.Unlock()
		return f.sent
	}
	processedAfter := func(n int) bool {
		var k int
		err := db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'PROCESSED' AND EVENT_ID LIKE 'pt-%' AND EVENT_ID <> 'pt-bad'
			AND CAST(SUBSTRING(EVENT_ID FROM 4) AS INTEGER) > $1`, n).Scan(&k)
		return err == nil && k > 0
	}
	waitState := func(what string, cond func(streamState) bool) streamState {
		var st streamState
		f.wait(what, time.Minute, func() bool {
			var err error
			st, err = streamStateOf(ctx, js, stream)
			return err == nil && cond(st)
		})
		return st
	}
	// kill kills node with -9 and returns how long it took until a message
	// published after the kill was processed, then brings the node back
	// and waits until its replica is current again.
	kill := func(role, node string) time.Duration {
		t.Helper()
		var conns []string // the nodes the consumer is connected to
		for i, n := range natsNodes {
			if slices.Contains(cl.connections(i), "inboxkit") {
				conns = append(conns, n)
			}
		}
		before, _ := streamStateOf(ctx, js, stream)
		out, err := cl.script("kill", node)
		killed := time.Now() // the node is dead by now
		if err != nil {
			t.Fatalf("kill %s: %v\n%s", node, err, out)
		}
		// The first message whose publish began after the kill.
		firstAfter := func() int {
			sentMu.Lock()
			defer sentMu.Unlock()
			for i, at := range began {
				if at.After(killed) {
					return i + 1
				}
			}
			return 0
		}
		f.wait(fmt.Sprintf("a message published after the kill of the %s (%s) processed", role, node), 2*time.Minute, func() bool {
			n := firstAfter()
			return n > 0 && processedAfter(n-1)
		})
		took := time.Since(killed)
		if out, err := cl.script("start"); err != nil {
			t.Fatalf("bring %s back: %v\n%s", node, err, out)
		}
		st := waitState(node+" back and every replica current", func(s streamState) bool { return s.current })
		t.Logf("kill -9 of the %s %s (stream leader %s, consumer leader %s, inboxctl run connected to %v): first message published after the kill processed %v after it; "+
			"stream leader now %s, consumer leader %s", role, node, before.leader, before.consumerLeader, conns, took.Round(time.Millisecond), st.leader, st.consumerLeader)
		return took
	}

	start := time.Now()
	phase := func(what string) {
		mu.Lock()
		r := publishRetries
		mu.Unlock()
		t.Logf("%6.1fs %s (published %d, publish retries %d, inbox rows %v)", time.Since(start).Seconds(), what, sent(), r, f.statuses())
	}
	f.wait("20 invoices processed before the first kill", time.Minute, func() bool { return processedAfter(19) })
	st := waitState("a stream leader and current replicas", func(s streamState) bool { return s.current })
	leaderRecovery := kill("stream leader", st.leader)
	phase("leader back")
	n := sent()
	f.wait("10 more invoices processed", time.Minute, func() bool { return processedAfter(n + 9) })

	st = waitState("a stream leader and current replicas", func(s streamState) bool { return s.current })
	follower := st.followers[0]
	for _, n := range st.followers { // the follower the consumer is connected to, if one is
		if slices.Contains(cl.connections(slices.Index(natsNodes, n)), "inboxkit") {
			follower = n
		}
	}
	phase("10 more processed")
	followerRecovery := kill("follower", follower)
	phase("follower back")
	n = sent()
	f.wait("10 more invoices processed", time.Minute, func() bool { return processedAfter(n + 9) })
	phase("10 more processed; stopping the producer")
	close(stop)
	<-producerDone
	phase("producer stopped")

	took := f.wait("every invoice processed", 2*time.Minute, f.allProcessed)
	f.wait("/readyz 200 at the end", time.Minute, f.ready)
	// A delivery whose acknowledgement was lost with a leader stays on the
	// work-queue stream until AckWait (30s) brings it back, a duplicate.
	drained := f.wait("the stream empty", 2*time.Minute, func() bool {
		n, err := pub.Depth(ctx, f.queue)
		return err == nil && n == 0
	})
	phase(fmt.Sprintf("the stream empty %v after the last invoice was processed", drained.Round(time.Millisecond)))

	// The ledger.
	var docs, docsDistinct, bad, dead int
	if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT invoice_no) FROM archived_documents`).Scan(&docs, &docsDistinct); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = 'pt-bad' AND STATUS = 'DEAD_LETTERED'`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	statuses := f.statuses()
	dead = statuses["DEAD_LETTERED"]
	left, err := pub.Depth(ctx, f.queue)
	if err != nil {
		t.Fatal(err)
	}
	dlqDepth, err := pub.Depth(ctx, "DLQ."+f.queue)
	if err != nil {
		t.Fatal(err)
	}
	duplicates := strings.Count(f.logs.String(), `"outcome":"DUPLICATE"`)
	mu.Lock()
	retries := publishRetries
	mu.Unlock()
	t.Logf("ledger: sent %d invoices + 1 malformed (publish retries %d); inbox rows %v; business rows %d (%d distinct); "+
		"malformed dead-lettered %d; on the stream %d; on the DLQ stream %d; duplicates acknowledged %d; "+
		"the last invoice processed %v after the producer stopped", f.sent, retries, statuses, docs, docsDistinct, bad, left, dlqDepth, duplicates, took.Round(time.Millisecond))
	t.Logf("recovery (kill -9 to the first message published after it processed): stream leader %v, follower %v",
		leaderRecovery.Round(time.Millisecond), followerRecovery.Round(time.Millisecond))
	if statuses["PROCESSED"] != f.sent || dead != 1 || bad != 1 || len(statuses) != 2 {
		t.Errorf("inbox rows by status %v; want PROCESSED %d and DEAD_LETTERED 1 (the malformed one), nothing else", statuses, f.sent)
	}
	if docs != f.sent || docsDistinct != f.sent {
		t.Errorf("%d business rows (%d distinct) for %d invoices, want one each", docs, docsDistinct, f.sent)
	}
	if left != 0 || dlqDepth != 1 {
		t.Errorf("%d message(s) left on the stream, %d on the DLQ stream; want 0 and 1", left, dlqDepth)
	}
}
