package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// settleLog records, in order, how a batch's deliveries were settled.
type settleLog struct {
	mu  sync.Mutex
	log []string
}

func (l *settleLog) add(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

// ackSource is a consumer.BatchAcker; its deliveries are handed to
// HandleBatch directly.
type ackSource struct{ l *settleLog }

func (ackSource) Receive(ctx context.Context) (consumer.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (ackSource) Close() error { return nil }

func (s ackSource) AckBatch(_ context.Context, ds []consumer.Delivery) []error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.Message().Header("eventId")
	}
	s.l.add("ack together " + strings.Join(ids, " "))
	return make([]error, len(ds))
}

type logDelivery struct {
	m inboxkit.Message
	l *settleLog
}

func (d logDelivery) Message() inboxkit.Message { return d.m }

func (d logDelivery) Ack(context.Context) error {
	d.l.add("ack " + d.m.Header("eventId"))
	return nil
}

func (d logDelivery) Requeue(context.Context, time.Duration) error {
	d.l.add("requeue " + d.m.Header("eventId"))
	return nil
}

type logPublisher struct{ l *settleLog }

func (p logPublisher) Publish(_ context.Context, dest string, h map[string]string, _ []byte) error {
	p.l.add("publish " + dest)
	return nil
}

// TestHandleBatchAcksTogether: the deliveries of a committed batch that
// need nothing but an acknowledgement (processed, duplicate, rejected,
// dead-lettered: the store published the poison message's dead letter
// before HandleBatch acknowledges anything) go to the source's AckBatch in
// one call, first; a technical failure is requeued on its own.
func TestHandleBatchAcksTogether(t *testing.T) {
	ctx := context.Background()
	db := dbtest.New(t, dbtest.SQLite)
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{ClassifyFunc: classify.Of, Retry: inboxkit.RetryPolicy{MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l := &settleLog{}
	c, err := consumer.New(consumer.Config{
		Name: "batch-ack", Source: ackSource{l}, Store: store, DeadLetter: logPublisher{l}, DeadLetterQueue: "dlq",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: func(_ context.Context, _ *sql.Tx, m inboxkit.Message) error {
			switch string(m.Body) {
			case "reject":
				return classify.Reject("UNKNOWN_CUSTOMER", errors.New("no such customer"))
			case "fail":
				return errors.New("connection reset")
			case "poison":
				return classify.Poison("MALFORMED_PAYLOAD", errors.New("not JSON"))
			}
			return nil
		},
		BatchSize: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ds []consumer.Delivery
	for _, e := range []struct{ id, body string }{
		{"E-1", "ok"}, {"E-2", "reject"}, {"E-3", "fail"}, {"E-1", "ok"}, {"E-4", "poison"}, {"E-5", "ok"},
	} {
		ds = append(ds, logDelivery{m: inboxkit.Message{Headers: map[string]string{"eventId": e.id}, Body: []byte(e.body)}, l: l})
	}
	out := c.HandleBatch(ctx, ds)
	want := []string{"publish dlq", "ack together E-1 E-2 E-1 E-4 E-5", "requeue E-3"}
	if !slices.Equal(l.log, want) {
		t.Fatalf("settled as %q, want %q", l.log, want)
	}
	actions := make([]inboxkit.Action, len(out))
	for i, s := range out {
		actions[i] = s.Action
		if s.Err != nil {
			t.Errorf("delivery %d: %v", i, s.Err)
		}
	}
	wantActions := []inboxkit.Action{inboxkit.ActionAck, inboxkit.ActionReject, inboxkit.ActionRequeue, inboxkit.ActionAck, inboxkit.ActionDeadLetter, inboxkit.ActionAck}
	if !slices.Equal(actions, wantActions) {
		t.Fatalf("actions %v, want %v", actions, wantActions)
	}
}
