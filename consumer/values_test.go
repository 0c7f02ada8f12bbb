package consumer_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// A message whose event id the database cannot store (a NUL byte, as a
// binary id rendered as text has) is dead-lettered as INVALID_EVENT_ID on
// its first delivery, and the message behind it is processed: before
// issue 23, item 3, PostgreSQL's 22021 handed it back as an outage,
// forever, in both modes.
func TestUnstorableEventIDIsPoisonNotOutage(t *testing.T) {
	for _, mode := range []consumer.Mode{consumer.ModeTransactional, consumer.ModeStoreThenProcess} {
		t.Run(string(mode), func(t *testing.T) {
			cfg, a, settled := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db := dbtest.New(t, dbtest.Postgres)
			store, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of,
				Retry: inboxkit.RetryPolicy{Redelivery: inboxkit.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}}})
			dbtest.Must(t, err, "store")
			dbtest.Must(t, store.Migrate(ctx), "migrate")
			cfg.Store, cfg.Mode = store, mode
			if mode == consumer.ModeStoreThenProcess {
				cfg.WorkerPollInterval = 20 * time.Millisecond
			}
			cfg.EventIDFunc = func(m inboxkit.Message) (string, string) {
				if id := m.Header("eventId"); id != "E-1" {
					return id, ""
				}
				return "E-1\x00", "" // the first message's id holds a NUL byte
			}
			cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
			dbtest.Must(t, a.Publish(ctx, "invoices", map[string]string{"eventId": "E-2"}, []byte(`{}`)), "publish")
			c, err := consumer.New(cfg)
			dbtest.Must(t, err, "consumer")
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(rctx) }()
			defer func() { stop(); <-done }()
			var dead, processed bool
			for !dead || !processed {
				select {
				case s := <-settled:
					switch {
					case s.Err != nil:
						t.Fatalf("handed back as an outage: %v", s.Err)
					case s.Message.ID == "E-1\x00" && s.Action == inboxkit.ActionDeadLetter && s.Result.Reason == inboxkit.ReasonInvalidEventID:
						dead = true
					case s.Message.ID == "E-2" && s.Action == inboxkit.ActionAck:
						processed = true
					}
				case <-ctx.Done():
					t.Fatalf("dead-lettered %v, E-2 settled %v", dead, processed)
				}
			}
		})
	}
}
