package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/broker/jetstream"
)

// Issue 23.9: `publish` before any `run` created a limits stream that kept
// every acknowledged message, and a consumer under a new name read them
// all again. Now publish creates the work-queue stream run would, and says
// so; after run processed the messages the stream is empty, and a run
// under another consumer name is refused (exit 2, naming the cause, not
// "unreachable") instead of processing them a second time.
func TestPublishBeforeRunCreatesAWorkQueueStream(t *testing.T) {
	t.Parallel()
	const natsURL = "nats://127.0.0.1:4222"
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite, "--seed-customers"), 0)
	subject := fmt.Sprintf("inboxctl.published.first.%d", time.Now().UnixNano())
	stream := jetstream.StreamName(subject)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatalf("NATS: %v (start it: start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log)", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	lines := invoiceLine("js-1", "corr-js", "INV-JS1", "K-100") + "\n" + invoiceLine("js-2", "corr-js", "INV-JS2", "K-100") + "\n"
	wantCode(t, inboxctl(t, lines, "publish", "--broker", natsURL, "--queue", subject, "--file", "-"), 0,
		"published 2 message(s)", "created JetStream stream "+stream, "work-queue retention")
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Retention; r != natsjs.WorkQueuePolicy {
		t.Fatalf("publish created a stream with %v retention, want work-queue", r)
	}

	run, logs := startRun(ctx, t, "--db", sqlite, "--broker", natsURL, "--queue", subject, "--consumer", "first", "--log-level", "debug")
	waitFor(t, "both processed", func() bool { return strings.Count(logs.String(), "outcome=PROCESSED") == 2 }, logs)
	stopRun(t, run, logs)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("the stream keeps %d acknowledged message(s), want 0", info.State.Msgs)
	}
	r := inboxctlEnv(t, nil, "", "run", "--db", sqlite, "--broker", natsURL, "--queue", subject, "--consumer", "second")
	wantCode(t, r, exitUsage, "refused (consume "+subject+")", "another durable consumer reads this subject of a work-queue stream", "keep the consumer name")
	if strings.Contains(r.stderr, "unreachable") {
		t.Errorf("worded as unreachable:\n%s", r)
	}
}
