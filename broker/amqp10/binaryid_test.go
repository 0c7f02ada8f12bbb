package amqp10_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// mqID returns a 24-byte id shaped like an IBM MQ MsgId or CorrelId ("AMQ ",
// a queue manager name padded with blanks, then binary bytes, NULs
// included), unique per n.
func mqID(n int) []byte {
	id := []byte("AMQ QM1             \x00\x00\x00\x00")
	id[20], id[23] = byte(n>>8), byte(n)
	return id
}

// jmsForm is what the adapter makes of a binary id: the JMS form of an IBM
// MQ id.
func jmsForm(b []byte) string { return "ID:" + hex.EncodeToString(b) }

// TestBinaryIDs (issue 23.2): messages whose message-id and correlation-id
// are binary, as IBM MQ delivers the MQMD MsgId and CorrelId of a JMS or
// MQI producer, sent with go-amqp through RabbitMQ's plugin (which passes
// binary ids on), consumed with the event id taken from the message-id on
// PostgreSQL. Each is processed once under "ID:" + hex, a resend with the
// same MsgId is a duplicate, audit finds the row by its correlation id,
// and a dead letter carries both ids in that form and replays with its
// binary correlation-id. Before the fix the raw bytes reached the inbox
// statement and PostgreSQL refused them (SQLSTATE 22021) as an outage, the
// first message handed back forever.
func TestBinaryIDs(t *testing.T) {
	q := consumertest.QueueName(t.Name())
	dlqName := q + ".dlq"
	declarer(t)(t, q, dlqName)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	db := dbtest.New(t, dbtest.Postgres)
	d, err := inbox.DialectByName(dbtest.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	store, err := inbox.New(db.DB, d, inbox.Config{ClassifyFunc: classify.Of,
		Retry: inboxkit.RetryPolicy{Redelivery: inboxkit.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := consumertest.CreateBusinessTable(ctx, db.DB); err != nil {
		t.Fatal(err)
	}

	snd, err := rawConn(t).NewSender(ctx, "/amq/queue/"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int, body []byte) {
		t.Helper()
		m := &amqp.Message{
			Header:     &amqp.MessageHeader{Durable: true},
			Properties: &amqp.MessageProperties{MessageID: mqID(n), CorrelationID: mqID(1000 + n)},
			Data:       [][]byte{body},
		}
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatalf("send message %d: %v", n, err)
		}
	}
	const good = 5
	for n := range good {
		send(n, consumertest.Event{Amount: n + 1}.Body())
	}
	const poison = 99
	send(poison, []byte("not json"))

	chain, _, err := consumer.ParseEventIDChain("message-id")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var settled []consumer.Settled
	runCtx, stop := context.WithCancel(ctx)
	c, err := consumer.New(consumer.Config{
		Name: "binary-ids", Source: open(t, amqp10.Config{Queue: q, Prefetch: 4}), Store: store,
		Handler:    consumertest.Handler(d, nil),
		DeadLetter: open(t, amqp10.Config{}), DeadLetterQueue: dlqName,
		EventIDFunc: chain, Concurrency: 2, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: consumer.ObserveSettled(func(s consumer.Settled) {
			mu.Lock()
			settled = append(settled, s)
			mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	var once sync.Once
	stopRun := func() { once.Do(func() { stop(); <-done }) }
	defer stopRun()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				msg := fmt.Sprintf("timeout waiting for %s; %d settlements", what, len(settled))
				for i, s := range settled {
					if i == 5 {
						break
					}
					msg += fmt.Sprintf("\n\tevent=%q outcome=%s action=%s runtime-err=%v", s.Message.ID, s.Result.Outcome, s.Action, s.Err)
				}
				t.Fatal(msg)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	count := func(pred func(consumer.Settled) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range settled {
			if pred(s) {
				n++
			}
		}
		return n
	}
	waitFor(fmt.Sprintf("%d processed and 1 dead-lettered", good), func() bool {
		return count(func(s consumer.Settled) bool { return s.Result.Outcome == inboxkit.OutcomeProcessed }) == good &&
			count(func(s consumer.Settled) bool { return s.Action == inboxkit.ActionDeadLetter }) == 1
	})

	for n := range good {
		id, corr := jmsForm(mqID(n)), jmsForm(mqID(1000+n))
		r, err := store.Get(ctx, id, "binary-ids")
		if err != nil {
			t.Fatalf("inbox row of %s: %v", id, err)
		}
		if r.Status != inboxkit.StatusProcessed || r.CorrelationID != corr {
			t.Errorf("row %s: status %s correlation %q, want PROCESSED %q", id, r.Status, r.CorrelationID, corr)
		}
		if rs, err := store.ByCorrelation(ctx, corr); err != nil || len(rs) != 1 || rs[0].EventID != id {
			t.Errorf("audit by correlation id %s: %v %+v, want the row of %s", corr, err, rs, id)
		}
	}

	// A resend with the same MsgId is a duplicate: one business row.
	send(0, consumertest.Event{Amount: 1}.Body())
	waitFor("the resend settled as a duplicate", func() bool {
		return count(func(s consumer.Settled) bool { return s.Result.Outcome == inboxkit.OutcomeDuplicate }) == 1
	})
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM business WHERE event_id = $1`, jmsForm(mqID(0))).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("business rows of the resent event: %d (%v), want 1", rows, err)
	}
	stopRun()

	// The dead letter names both ids in the JMS form, and a replay sends
	// the correlation-id on as the binary it came as.
	dlqSrc := open(t, amqp10.Config{Queue: dlqName})
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	dl, err := dlqSrc.Receive(rctx)
	rcancel()
	if err != nil {
		t.Fatalf("receive the dead letter: %v", err)
	}
	env, err := dlq.Parse(dl.Message().Headers, dl.Message().Body)
	if err != nil {
		t.Fatal(err)
	}
	wantID, wantCorr := jmsForm(mqID(poison)), jmsForm(mqID(1000+poison))
	if env.EventID != wantID || env.CorrelationID != wantCorr || env.Original[amqp10.HeaderCorrelationID] != wantCorr {
		t.Errorf("envelope: event id %q correlation id %q original correlation-id %q; want %q and %q", env.EventID, env.CorrelationID, env.Original[amqp10.HeaderCorrelationID], wantID, wantCorr)
	}
	if err := dl.Requeue(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := consumer.Replay(ctx, consumer.ReplayConfig{DLQ: dlqSrc, Publisher: open(t, amqp10.Config{}), Store: store, EventID: wantID})
	if err != nil || len(rep.Replayed) != 1 {
		t.Fatalf("replay %s: %v %+v", wantID, err, rep)
	}
	rcv, err := rawConn(t).NewReceiver(ctx, "/amq/queue/"+q, &amqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("receive the replayed message: %v", err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.Properties.CorrelationID.([]byte); !ok || string(got) != string(mqID(1000+poison)) {
		t.Errorf("replayed correlation-id %T %v, want the binary %x", m.Properties.CorrelationID, m.Properties.CorrelationID, mqID(1000+poison))
	}
}
