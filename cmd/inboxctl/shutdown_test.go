package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond every 100ms for at most 30s.
func waitFor(t *testing.T, what string, cond func() bool, logs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s\n%s", what, logs)
		}
	}
}

// startHungRun starts `inboxctl run` with its database behind a proxy,
// publishes one invoice, hangs the proxy and returns once the consumer's
// database call is stuck with the message in hand. The run has no outbox
// relay (--no-relay): the relay's polls would be bytes the hung proxy
// drops before the consumer holds the message.
func startHungRun(t *testing.T, direct, queue, eventID string, timeout string) (*exec.Cmd, *lockedBuffer, chan error) {
	t.Helper()
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	broker := "stomp://" + stompAddr
	run := exec.Command(binary, "run", "--db", u.String(), "--broker", broker, "--queue", queue,
		"--log-format", "json", "--shutdown-timeout", timeout, "--no-relay")
	run.Env = cleanEnv()
	logs := &lockedBuffer{}
	run.Stdout, run.Stderr = logs, logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		_ = run.Process.Kill()
		<-exited
	})
	waitFor(t, "consumer started", func() bool { return strings.Contains(logs.String(), "consumer started") }, logs)
	proxy.Hang()
	wantCode(t, inboxctl(t, invoiceLine(eventID, "corr-"+eventID, "INV-"+eventID, "K-100")+"\n", "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 1")
	waitFor(t, "the consumer's database call", func() bool { return proxy.Dropped() > 0 }, logs)
	return run, logs, exited
}

// Issue 11.8: with a hung database connection SIGTERM never stopped
// `inboxctl run`, a second signal was ignored and nothing said it was
// draining.
func TestRunShutdownTimeoutWithHungDatabase(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--seed-customers"), 0, "migrated")
	queue := fmt.Sprintf("inboxctl.shutdown.%d", time.Now().UnixNano())

	t.Run("timeout", func(t *testing.T) {
		run, logs, exited := startHungRun(t, db.DSN, queue, "sd-1", "1s")
		if err := run.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			exited <- err
			if code := run.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit %d (%v), want 1\n%s", code, err, logs)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run did not exit 30s after SIGTERM with --shutdown-timeout 1s\n%s", logs)
		}
		for _, want := range []string{`"msg":"draining 1 deliveries"`, `delivery abandoned`, `"event_id":"sd-1"`, "shutdown timeout"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %s:\n%s", want, logs)
			}
		}
	})

	t.Run("second signal", func(t *testing.T) {
		run, logs, exited := startHungRun(t, db.DSN, queue, "sd-2", "1h")
		if err := run.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "draining", func() bool { return strings.Contains(logs.String(), "draining 1 deliveries") }, logs)
		if err := run.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			exited <- err
			if code := run.ProcessState.ExitCode(); code != exitInterrupted { // the second signal is SIGINT
				t.Fatalf("exit %d (%v), want 130\n%s", code, err, logs)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run did not exit 30s after a second signal\n%s", logs)
		}
		if !strings.Contains(logs.String(), "second signal") {
			t.Errorf("no line about the second signal:\n%s", logs)
		}
	})

	// Nothing was lost: both messages are still on the broker, and a run
	// with a healthy database processes each once.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, binary, "run", "--db", db.DSN, "--broker", "stomp://"+stompAddr, "--queue", queue)
	run.Env = cleanEnv()
	logs := &lockedBuffer{}
	run.Stdout, run.Stderr = logs, logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	for _, id := range []string{"sd-1", "sd-2"} {
		waitFor(t, id+" PROCESSED", func() bool {
			r := inboxctl(t, "", "audit", "--db", db.DSN, "--correlation-id", "corr-"+id)
			return r.code == 0 && strings.Contains(r.stdout, "PROCESSED")
		}, logs)
	}
}
