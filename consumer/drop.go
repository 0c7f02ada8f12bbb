package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

// DropConfig configures Drop.
type DropConfig struct {
	// DLQ is a Source on the dead-letter queue. Required.
	DLQ Source
	// SelectFunc chooses the messages to drop. Required.
	SelectFunc func(m inboxkit.Message) bool
	// DryRun removes nothing: every message is handed back, and the report
	// says what Drop would remove.
	DryRun bool
	// IdleTimeout ends Drop when the DLQ delivers nothing for this long.
	// Defaults to 2s.
	IdleTimeout time.Duration
	// Clock tells when Drop started (dead letters made after that are not
	// looked at). Defaults to the system clock.
	Clock inboxkit.Clock
}

// DropReport says what Drop did.
type DropReport struct {
	// Dropped are the messages removed from the DLQ (with DryRun: that
	// would be).
	Dropped []inboxkit.Message
	// Kept counts the messages looked at and not selected, handed back
	// unchanged.
	Kept int
}

// Drop removes the messages of a dead-letter queue that SelectFunc chooses,
// for what cannot be replayed: a message the broker dead-lettered itself
// (not an inboxkit envelope: over the client's size limit, say) or a dead
// letter that is to be given up. Nothing else changes: an event's inbox row
// stays as it is (DEAD_LETTERED). Each selected message is acknowledged,
// every other one is handed back; Drop stops as Replay does (idle, a message
// seen for the second time, one dead-lettered after Drop started).
func Drop(ctx context.Context, cfg DropConfig) (DropReport, error) {
	var rep DropReport
	if cfg.DLQ == nil || cfg.SelectFunc == nil {
		return rep, errors.New("consumer: DropConfig needs DLQ and SelectFunc")
	}
	if cfg.Clock == nil {
		cfg.Clock = inboxkit.SystemClock{}
	}
	err := scanDLQ(ctx, cfg.DLQ, cfg.IdleTimeout, cfg.Clock, func(d Delivery, m inboxkit.Message) error {
		if !cfg.SelectFunc(m) {
			rep.Kept++
			return handBack(ctx, d)
		}
		if cfg.DryRun {
			rep.Dropped = append(rep.Dropped, m)
			return handBack(ctx, d)
		}
		if err := d.Ack(ctx); err != nil {
			return fmt.Errorf("consumer: drop %s: %w (left in the DLQ)", BrokerID(m), err)
		}
		rep.Dropped = append(rep.Dropped, m)
		return nil
	})
	return rep, err
}
