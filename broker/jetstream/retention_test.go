package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
)

// openLogged is open with the adapter's log kept in the returned buffer.
func openLogged(t *testing.T, cfg Config) (*Adapter, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	if cfg.URL == "" {
		cfg.URL = systemURL
	}
	cfg.PollWait = time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open (%s): %v", startHint, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, logs
}

// logBuffer is a log the adapter writes while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// streamInfo returns the stream's info, fresh from the server.
func streamInfo(t *testing.T, a *Adapter, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := a.js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// Issue 23.9: `inboxctl publish` before any `run` created the subject's
// stream with limits retention: it kept all 4,800 acknowledged messages,
// and a consumer under a new name read them all again. Every stream the
// adapter creates (Publish to a subject no stream captures, EnsureStream,
// Open) is a work-queue stream now, and says so in the log: an
// acknowledged message is removed, and a second durable on the subject is
// refused with ErrSubjectTaken instead of reading everything again.
func TestStreamsThePublisherCreatesAreWorkQueues(t *testing.T) {
	t.Parallel()
	_, stream := testNames(t, systemURL)
	subject := "inboxkit.test." + randID() + ".published-first"
	name := StreamName(subject)
	t.Cleanup(func() {
		nc, err := nats.Connect(systemURL)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	pub, logs := openLogged(t, Config{}) // publisher only, as `inboxctl publish`
	for _, body := range []string{"1", "2", "3"} {
		publish(t, pub, subject, map[string]string{"eventId": "e-" + body}, body)
	}
	if info := streamInfo(t, pub, name); info.Config.Retention != jetstream.WorkQueuePolicy || info.State.Msgs != 3 {
		t.Fatalf("the stream Publish created: %s retention, %d messages; want work-queue, 3", retentionName(info.Config.Retention), info.State.Msgs)
	}
	if !strings.Contains(logs.String(), `msg="jetstream: created stream" stream=`+name) || !strings.Contains(logs.String(), "retention=work-queue") {
		t.Errorf("the creation is not logged:\n%s", logs)
	}

	first := open(t, Config{Subject: subject, Durable: "first"})
	for range 3 {
		d := receive(t, first, 5*time.Second)
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if info := streamInfo(t, pub, name); info.State.Msgs != 0 {
		t.Errorf("the stream keeps %d acknowledged message(s), want 0", info.State.Msgs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	second, err := Open(ctx, Config{URL: systemURL, Subject: subject, Durable: "second", PollWait: time.Second})
	if err == nil {
		defer second.Close()
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		_, rerr := second.Receive(rctx)
		t.Fatalf("a second durable on the subject was opened (its first Receive: %v); want ErrSubjectTaken", rerr)
	}
	if !errors.Is(err, ErrSubjectTaken) || !strings.Contains(err.Error(), "keep the consumer name") {
		t.Errorf("Open of a second durable = %v; want ErrSubjectTaken with the fix", err)
	}

	// EnsureStream (a DLQ's stream made ahead) is a work-queue stream too.
	dlqName := stream("DLQ")
	if err := pub.EnsureStream(ctx, dlqName, subject+".dlq"); err != nil {
		t.Fatal(err)
	}
	if info := streamInfo(t, pub, dlqName); info.Config.Retention != jetstream.WorkQueuePolicy {
		t.Errorf("EnsureStream made a %s stream, want work-queue", retentionName(info.Config.Retention))
	}
}

// A consumer opened on a stream that keeps acknowledged messages (made by
// someone else, or by an older inboxkit) is warned about it in the log.
func TestOpenWarnsAboutAStreamThatKeepsAcknowledgedMessages(t *testing.T) {
	t.Parallel()
	n, _ := testNames(t, systemURL)
	keep := open(t, Config{Stream: n.stream, Subject: n.subject, KeepAcked: true, Durable: "keeper"})
	if info := streamInfo(t, keep, n.stream); info.Config.Retention != jetstream.LimitsPolicy {
		t.Fatalf("KeepAcked made a %s stream", retentionName(info.Config.Retention))
	}
	_, logs := openLogged(t, Config{Stream: n.stream, Subject: n.subject, Durable: "other"})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "the stream keeps acknowledged messages") ||
		!strings.Contains(logs.String(), "retention=limits") {
		t.Errorf("no warning about the limits stream:\n%s", logs)
	}
}

// A Transient durable (inboxctl's dlq commands) is deleted on Close, so the
// messages it handed back come at once to the next command, also on an
// embedded server restarted in between (one per command with
// embedded:DIR): a kept durable held them as pending until AckWait, and
// `dlq list` run twice said the queue was empty the second time.
func TestTransientDurableAcrossAnEmbeddedRestart(t *testing.T) {
	t.Parallel()
	e, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	subject := "dlq.transient"
	cfg := Config{URL: e.URL(), Subject: subject, Durable: "tool", Transient: true, AckWait: time.Minute}
	a := open(t, cfg)
	publish(t, a, subject, nil, "dead letter")
	_ = receive(t, a, 5*time.Second) // held, as a listing holds it
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	e.Shutdown()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	b := open(t, cfg)
	if d := receive(t, b, 5*time.Second); string(d.Message().Body) != "dead letter" {
		t.Errorf("after the restart: %q", d.Message().Body)
	}
}
