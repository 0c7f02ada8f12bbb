package consumer_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
)

// The handler's ctx carries the message it handles, in both modes, so that
// an outbox write in the handler records the event that caused it.
func TestHandlerContextCarriesTheMessage(t *testing.T) {
	for _, mode := range []consumer.Mode{consumer.ModeTransactional, consumer.ModeStoreThenProcess} {
		t.Run(string(mode), func(t *testing.T) {
			cfg, _, _ := setup(t)
			cfg.Mode = mode
			seen := make(chan inboxkit.Message, 1)
			cfg.Handler = func(ctx context.Context, _ *sql.Tx, m inboxkit.Message) error {
				in, ok := inboxkit.MessageFromContext(ctx)
				if !ok {
					t.Error("the handler's ctx carries no message")
				}
				seen <- in
				return nil
			}
			stop := start(t, cfg)
			defer func() { _ = stop() }()
			var m inboxkit.Message
			select {
			case m = <-seen:
			case <-time.After(20 * time.Second):
				t.Fatal("the handler did not run in 20s")
			}
			if m.ID != "E-1" || m.CorrelationID != "C-1" {
				t.Fatalf("ctx message %q/%q, want E-1/C-1", m.ID, m.CorrelationID)
			}
		})
	}
}
