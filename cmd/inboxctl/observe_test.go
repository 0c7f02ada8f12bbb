package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// proxy is a loopback TCP proxy a test cuts to simulate a database outage
// without touching the shared server.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
}

// setCut cuts (closing every open connection, refusing new ones) or heals.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dump adapts a function to waitFor's fmt.Stringer.
type dump func() string

func (d dump) String() string { return d() }

// `run --metrics-addr` serves exact counts of a known mix on /metrics, and
// /readyz turns 503 while the database is cut off (through a proxy), 200
// again after, and 503 while draining on SIGTERM; the outage is logged
// once when it starts and once when it ends, not per message.
func TestRunMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	px := newProxy(t, "127.0.0.1:5432")
	dbURL := strings.Replace(db.DSN, "127.0.0.1:5432", px.Addr(), 1)
	if dbURL == db.DSN {
		t.Fatalf("test DSN %s is not on 127.0.0.1:5432", dbtest.PostgresDSN())
	}
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.metrics.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL, "--seed-customers"), 0, "migrated")
	events := knownMix("m")
	wantCode(t, inboxctl(t, events, "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 5 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", dbURL, "--broker", broker, "--queue", queue,
		"--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	base := metricsBase(t, logs)

	want := []string{
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="PROCESSED",status="PROCESSED"} 2`,
		`inboxkit_deliveries_total{action="ack",consumer="invoice-consumer",outcome="DUPLICATE",status="PROCESSED"} 1`,
		`inboxkit_deliveries_total{action="reject",consumer="invoice-consumer",outcome="REJECTED",status="REJECTED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="invoice-consumer",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
		`inboxkit_duplicates_total{consumer="invoice-consumer"} 1`,
		`inboxkit_rejections_total{consumer="invoice-consumer",reason="CUSTOMER_UNKNOWN"} 1`,
		`inboxkit_dead_letters_total{consumer="invoice-consumer",reason="MALFORMED_PAYLOAD"} 1`,
		`inboxkit_runtime_errors_total{consumer="invoice-consumer"} 0`,
		`inboxkit_inbox_rows{consumer="invoice-consumer",status="PROCESSED"} 2`,
	}
	metrics := waitForMetrics(t, base, logs, want)
	t.Logf("/metrics after the mix:\n%s", grepLines(metrics, "inboxkit_deliveries_total", "inboxkit_duplicates", "inboxkit_dead_letters", "inboxkit_rejections", "inboxkit_runtime", "inboxkit_inbox_rows{"))

	code, body := httpGet(t, base+"/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz before the outage: %d %s", code, body)
	}
	t.Logf("/readyz before the outage: %d %s", code, body)
	px.setCut(true)
	waitFor(t, "/readyz 503 during the outage", func() bool { code, body = httpGet(t, base+"/readyz"); return code == 503 }, dump(func() string { return body }))
	wantOnlyFailing(t, body, "database")
	t.Logf("/readyz during the outage: %d %s", code, body)
	px.setCut(false)
	waitFor(t, "/readyz 200 after the outage", func() bool { code, body = httpGet(t, base+"/readyz"); return code == 200 }, dump(func() string { return body }))
	t.Logf("/readyz after the outage: %d %s", code, body)
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}

	stopRun(t, run, logs)
}

func grepLines(body string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
