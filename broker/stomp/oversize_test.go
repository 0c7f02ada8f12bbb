package stomp_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 11.11: a 6 MB message at the head of the queue (the client's body
// limit is 4 MiB) broke the connection on every attempt, so nothing behind
// it was processed, silently. Now it goes to ActiveMQ's dead-letter queue
// whole (NACK), its event gets a DEAD_LETTERED row with reason
// MESSAGE_TOO_LARGE, the log says so, and the messages behind it are
// processed.
func TestOversizeMessageIsDeadLetteredAndTheQueueMovesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := bytes.Repeat([]byte("x"), 6<<20)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "big-1", "correlationId": "c-big"}, big); err != nil {
		t.Fatal(err)
	}
	small := []string{"small-1", "small-2", "small-3"}
	for _, id := range small {
		if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": id}, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	db := dbtest.New(t, dbtest.SQLite)
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	logs := &lockedLog{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	cfg := b.cfg
	cfg.Prefetch = 1
	cfg.Logger = logger
	src := newSource(t, cfg)
	settled := make(chan consumer.Settled, 10)
	c, err := consumer.New(consumer.Config{
		Name: "oversize-test", Source: src, Store: store, DeadLetter: b.pub, DeadLetterQueue: "DLQ.inboxkit." + b.cfg.Queue,
		Handler: func(context.Context, *sql.Tx, inboxkit.Message) error { return nil },
		Logger:  logger, Observer: consumer.ObserveSettled(func(s consumer.Settled) { settled <- s }),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	got := map[string]consumer.Settled{}
	for len(got) < 4 {
		select {
		case s := <-settled:
			got[s.Message.ID] = s
		case <-time.After(30 * time.Second):
			t.Fatalf("settled %d of 4 in 30s\n%s", len(got), logs)
		}
	}
	if s := got["big-1"]; s.Action != inboxkit.ActionDeadLetter || s.Result.Reason != inboxkit.ReasonMessageTooLarge || s.Err != nil {
		t.Errorf("big-1 settled %s %s (%v), want dead-letter MESSAGE_TOO_LARGE", s.Action, s.Result.Reason, s.Err)
	}
	for _, id := range small {
		if s := got[id]; s.Action != inboxkit.ActionAck || s.Result.Outcome != inboxkit.OutcomeProcessed {
			t.Errorf("%s settled %s %s, want ack PROCESSED", id, s.Action, s.Result.Outcome)
		}
	}
	r, err := store.Get(ctx, "big-1", "oversize-test")
	if err != nil || r.Status != inboxkit.StatusDeadLettered || r.ReasonCode != inboxkit.ReasonMessageTooLarge {
		t.Errorf("big-1 row %+v (%v), want DEAD_LETTERED MESSAGE_TOO_LARGE", r, err)
	}
	if !strings.Contains(logs.String(), "message over the size limit") || !strings.Contains(logs.String(), "size=6291456") {
		t.Errorf("the log does not say what happened:\n%s", logs)
	}
	// Issue 23.11: it said it twice ("message over the size limit", then
	// the dead letter's "settled" line); one line, at warn, has it all.
	if n := strings.Count(logs.String(), "event_id=big-1"); n != 1 || !strings.Contains(logs.String(), "action=dead-letter reason=MESSAGE_TOO_LARGE status=DEAD_LETTERED") {
		t.Errorf("the oversize dead letter has %d log lines, want 1 with its action, reason and status:\n%s", n, logs)
	}
	// ActiveMQ holds the whole message in its dead-letter queue.
	bcfg := b.cfg
	bcfg.Limits.MaxBodySize = 8 << 20
	msgs, err := stomp.Browse(ctx, bcfg, "DLQ."+b.cfg.Queue, 0)
	if err != nil || len(msgs) != 1 || len(msgs[0].Body) != len(big) || msgs[0].Header("eventId") != "big-1" {
		t.Fatalf("DLQ.%s holds %d messages (%v), want big-1 with its 6 MB body", b.cfg.Queue, len(msgs), err)
	}
	// Take it out again: left on the shared broker, eleven runs of this
	// test filled its 64 MB of memory, and every producer waited.
	dcfg := bcfg
	dcfg.Queue = "DLQ." + b.cfg.Queue
	dlq, err := stomp.Open(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	d, err := dlq.Receive(ctx)
	if err != nil {
		t.Fatalf("take big-1 out of DLQ.%s: %v", b.cfg.Queue, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack big-1 in DLQ.%s: %v", b.cfg.Queue, err)
	}
}

// Issue 11.11: a connection that kept failing was never logged. Now its
// cause is logged, at most once per minute, however often it fails.
func TestConnectionFailuresLoggedOncePerMinute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &lockedLog{}
	cfg := b.cfg
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	var mu sync.Mutex
	failures := 0
	cfg.ErrorFunc = func(error) { mu.Lock(); failures++; mu.Unlock() }
	src := newSource(t, cfg)
	for i := 0; i < 3; i++ {
		c := src.Conn()
		c.NetConn().Close() // a broken connection
		<-c.Done()
		for deadline := time.Now().Add(20 * time.Second); src.Conn() == c; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no reconnect in 20s")
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Count(logs.String(), "connection to the broker failed")
	if failures < 3 || lines != 1 || !strings.Contains(logs.String(), "error=") {
		t.Fatalf("%d failures, %d log lines, want >= 3 and 1 with its cause:\n%s", failures, lines, logs)
	}
}
