package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// interrupt starts inboxctl args, waits until ready says the command is at
// work, sends sig and returns the exit code and the output.
func interrupt(t *testing.T, sig syscall.Signal, ready func(out string) bool, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	waitFor(t, "inboxctl "+strings.Join(args[:1], " ")+" at work", func() bool { return ready(out.String()) }, out)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("inboxctl %v did not exit 60s after %v\n%s", args, sig, out)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// Issue 23.11: Ctrl-C exited 0 (run, drained), 2 (a command waiting for its
// database: "database ... unreachable: ... context canceled", which it was
// not) or 130 (publish). Now SIGINT exits 130 in every command, and says it
// was interrupted. Each command here is stopped while it waits for a
// database or broker that stopped answering (a hung proxy), run while it
// consumes.
func TestSIGINTExits130(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--seed-customers"), 0, "migrated")
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	dbProxy := tcpproxy.Start(t, u.Host)
	dbProxy.Hang()
	u.Host = dbProxy.Addr()
	hungDB := u.String()
	brokerProxy := tcpproxy.Start(t, stompAddr)
	brokerProxy.Hang()
	hungBroker := "stomp://" + brokerProxy.Addr()
	waiting := func(p *tcpproxy.Proxy, before int64) func(string) bool {
		return func(string) bool { return p.Dropped() > before }
	}
	queue := fmt.Sprintf("inboxctl.sigint.%d", time.Now().UnixNano())
	for _, tc := range []struct {
		name  string
		args  []string
		proxy *tcpproxy.Proxy
	}{
		{"migrate", []string{"migrate", "--db", hungDB}, dbProxy},
		{"migrate status", []string{"migrate", "status", "--db", hungDB}, dbProxy},
		{"check", []string{"check", "--db", hungDB}, dbProxy},
		{"stats", []string{"stats", "--db", hungDB}, dbProxy},
		{"audit", []string{"audit", "--db", hungDB, "--correlation-id", "c-1"}, dbProxy},
		{"purge", []string{"purge", "--db", hungDB, "--older-than", "720h"}, dbProxy},
		{"publish", []string{"publish", "--broker", hungBroker, "--queue", queue, "--file", "testdata/sigint.jsonl"}, brokerProxy},
		{"dlq list", []string{"dlq", "list", "--broker", hungBroker, "--queue", "DLQ." + queue}, brokerProxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One at a time: Dropped counts the bytes of every client.
			code, out := interrupt(t, syscall.SIGINT, waiting(tc.proxy, tc.proxy.Dropped()), tc.args...)
			if code != exitInterrupted || !strings.Contains(out, "interrupted") || strings.Contains(out, "unreachable") {
				t.Errorf("inboxctl %s after SIGINT: exit %d, want 130 and \"interrupted\" (not \"unreachable\"):\n%s", tc.name, code, out)
			}
		})
	}
	t.Run("run", func(t *testing.T) {
		code, out := interrupt(t, syscall.SIGINT, func(out string) bool { return strings.Contains(out, "consumer started") },
			"run", "--db", db.DSN, "--broker", "stomp://"+stompAddr, "--queue", queue)
		if code != exitInterrupted || !strings.Contains(out, "drained") {
			t.Errorf("run after SIGINT: exit %d, want 130 after the drain:\n%s", code, out)
		}
	})
	t.Run("run SIGTERM", func(t *testing.T) { // a service manager's stop: still 0
		code, out := interrupt(t, syscall.SIGTERM, func(out string) bool { return strings.Contains(out, "consumer started") },
			"run", "--db", db.DSN, "--broker", "stomp://"+stompAddr, "--queue", queue)
		if code != 0 {
			t.Errorf("run after SIGTERM: exit %d, want 0:\n%s", code, out)
		}
	})
	t.Run("check SIGTERM", func(t *testing.T) {
		code, out := interrupt(t, syscall.SIGTERM, waiting(dbProxy, dbProxy.Dropped()), "check", "--db", hungDB)
		if code != exitTerminated || !strings.Contains(out, "interrupted by SIGTERM") {
			t.Errorf("check after SIGTERM: exit %d, want 143:\n%s", code, out)
		}
	})
}

// Issue 23.11: a database or broker that answered and refused the login
// was reported as "unreachable ... check that the database runs". It
// says "authentication failed" now (exit 2, still a configuration error).
func TestRefusedLoginSaysAuthenticationFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, flag, url string }{
		{"postgres unknown role", "--db", "postgres://no_such_role_23@127.0.0.1:5432/test?sslmode=disable"},
		{"mariadb wrong password", "--db", "mysql://root:wrong-password@127.0.0.1:3306/test"},
		{"mariadb unknown user", "--db", "mysql://no_such_user_23@127.0.0.1:3306/test"},
		{"rabbitmq wrong password", "--broker", "amqp://guest:wrong-password@127.0.0.1:5672/"},
		{"rabbitmq amqp10 wrong password", "--broker", "amqp10://guest:wrong-password@127.0.0.1:5672"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"stats", tc.flag, tc.url}
			if tc.flag == "--broker" {
				args = []string{"dlq", "list", "--broker", tc.url, "--queue", "DLQ.auth"}
			}
			r := inboxctl(t, "", args...)
			wantCode(t, r, exitUsage, "authentication failed", "check the user and password")
			if strings.Contains(r.stderr, "unreachable") || strings.Contains(r.stderr, "wrong-password") {
				t.Errorf("the refused login is worded as unreachable, or shows the password:\n%s", r)
			}
		})
	}
}

// Issue 23.11: business SQL in check's --config that does not run exited 1,
// which means "findings"; it is exit 2 now, naming the check and its SQL.
// And -o json gave "samples": null for a check with nothing found.
func TestCheckBadSQLExits2AndJSONSamples(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	url := dbURL(t, db)
	wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0, "migrated")
	cfg := filepath.Join(t.TempDir(), "check.json")
	if err := os.WriteFile(cfg, []byte(`{"consumer": "claims-service",
  "businessRowExists": {"name": "processed-without-case", "sql": "SELECT 1 FROM no_such_table c WHERE c.event_id = {event_id}"},
  "businessKeys": {"name": "duplicate-cases", "sql": "SELECT claim_no AS business_key, event_id FROM no_such_table"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "check", "--db", url, "--config", cfg), exitUsage, "check processed-without-case", "no_such_table")
	wantCode(t, inboxctl(t, "", "check", "--db", url, "--consumer", "c", "--business-key-sql", "SELECT nonsense FROM"), exitUsage, "check duplicate-business-keys")

	r := inboxctl(t, "", "check", "--db", url, "-o", "json")
	wantCode(t, r, 0)
	var out struct {
		Findings []map[string]any
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Findings) == 0 {
		t.Fatalf("check -o json: %v\n%s", err, r)
	}
	for _, f := range out.Findings {
		if s, ok := f["samples"].([]any); !ok || len(s) != 0 {
			t.Errorf("check %v: samples %#v, want []", f["check"], f["samples"])
		}
	}
}
