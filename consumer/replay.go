package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// ReplayConfig configures Replay.
type ReplayConfig struct {
	// DLQ is a Source on the dead-letter queue. Required.
	DLQ Source
	// Publisher sends the replayed message to its original destination. Required.
	Publisher dlq.Publisher
	// Store is the inbox whose DEAD_LETTERED rows are reset so the replayed
	// message is processed again. Required.
	Store *inbox.Store
	// EventID replays only the dead letters of this event id; empty replays
	// all (with All set).
	EventID string
	// All must be set to replay every dead letter (a guard against an empty
	// EventID by mistake).
	All bool
	// Destination overrides the envelope's original destination.
	Destination string
	// IdleTimeout ends the replay when the DLQ delivers nothing for this
	// long. Defaults to 2s.
	IdleTimeout time.Duration
	// Clock stamps the replay header. Defaults to the system clock.
	Clock inboxkit.Clock
}

// ReplayReport says what Replay did.
type ReplayReport struct {
	Replayed []string // event ids sent back to their destination
	Skipped  []string // dead letters left in the DLQ, with the reason
}

// Replay moves dead letters back to their original destination, with the
// same event id so that the inbox still deduplicates, and resets their
// inbox rows (DEAD_LETTERED → TECHNICAL_FAILURE, ATTEMPTS 0, REPLAY_COUNT+1)
// so that the replayed message is processed once more. On a reject queue
// (envelopes of class BUSINESS) it reopens REJECTED rows the same way, for a
// rejection whose business case was clarified (see inbox.ReopenRejected).
// A message whose row is in any other state (already PROCESSED, say) is not
// replayed: it stays on the queue and is reported in Skipped.
//
// For each dead letter, in this order: the row is reset, the message is
// published to its destination (confirmed), and only then is the dead letter
// acknowledged; a failure leaves it in the DLQ. Dead letters that are not
// replayed (another event id, no event id, not an envelope) are handed back
// to the DLQ. Replay stops when the DLQ is idle for IdleTimeout, when it
// sees a dead letter for the second time, or at the first dead letter made
// after the replay started (a replayed message that failed again).
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	var rep ReplayReport
	switch {
	case cfg.DLQ == nil || cfg.Publisher == nil || cfg.Store == nil:
		return rep, errors.New("consumer: ReplayConfig needs DLQ, Publisher and Store")
	case cfg.EventID == "" && !cfg.All:
		return rep, errors.New("consumer: Replay: give an EventID, or set All to replay every dead letter")
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = inboxkit.SystemClock{}
	}
	// Only the dead letters that were there when the replay started: a
	// replayed message that fails again while a consumer runs is
	// dead-lettered anew, and must not be replayed in a loop.
	start := cfg.Clock.Now()
	seen := map[string]bool{}
	for {
		rctx, cancel := context.WithTimeout(ctx, cfg.IdleTimeout)
		d, err := cfg.DLQ.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
				return rep, nil
			}
			return rep, fmt.Errorf("consumer: replay: receive: %w", err)
		}
		m := d.Message()
		env, perr := dlq.Parse(m.Headers, m.Body)
		key := env.EventID + "|" + m.Header(dlq.HeaderDeadLetteredAt) + "|" + PayloadHash(m.Body)
		if seen[key] {
			// Came round again: everything left is not for us.
			if err := d.Requeue(ctx, 0); err != nil {
				return rep, fmt.Errorf("consumer: replay: hand back: %w", err)
			}
			return rep, nil
		}
		seen[key] = true
		if at, err := time.Parse(time.RFC3339Nano, m.Header(dlq.HeaderDeadLetteredAt)); err == nil && at.After(start) {
			if err := d.Requeue(ctx, 0); err != nil {
				return rep, fmt.Errorf("consumer: replay: hand back: %w", err)
			}
			return rep, nil
		}
		if skip, report := skipReplay(cfg, env, perr); skip {
			if err := d.Requeue(ctx, 0); err != nil {
				return rep, fmt.Errorf("consumer: replay: hand back: %w", err)
			}
			if report != "" {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", env.EventID, report))
			}
			continue
		}
		dest := cfg.Destination
		if dest == "" {
			dest = env.OriginalDestination
		}
		reason, err := reopen(ctx, cfg.Store, env)
		if err != nil {
			_ = d.Requeue(ctx, 0)
			return rep, fmt.Errorf("consumer: replay %s: %w", env.EventID, err)
		}
		if reason != "" {
			// The replay could not take effect: keep the message.
			if err := d.Requeue(ctx, 0); err != nil {
				return rep, fmt.Errorf("consumer: replay: hand back: %w", err)
			}
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", env.EventID, reason))
			continue
		}
		if err := cfg.Publisher.Publish(ctx, dest, env.ReplayHeaders(cfg.Clock.Now()), env.Body); err != nil {
			_ = d.Requeue(ctx, 0)
			return rep, fmt.Errorf("consumer: replay %s to %s: %w (left in the DLQ)", env.EventID, dest, err)
		}
		if err := d.Ack(ctx); err != nil {
			return rep, fmt.Errorf("consumer: replay %s: ack dead letter: %w (replayed; the DLQ copy may come again)", env.EventID, err)
		}
		rep.Replayed = append(rep.Replayed, env.EventID)
	}
}

// skipReplay tells whether a dead letter is left on the queue before its
// row is looked at (skip), and why, for ReplayReport.Skipped; report is
// empty for a dead letter of another event than cfg.EventID, which is
// not reported.
func skipReplay(cfg ReplayConfig, env dlq.Envelope, perr error) (skip bool, report string) {
	switch {
	case perr != nil:
		return true, "not a dead-letter envelope"
	case cfg.EventID != "" && env.EventID != cfg.EventID:
		return true, ""
	case env.EventID == "":
		return true, "no event id (" + env.Reason + "): fix the producer and resend"
	case cfg.Destination == "" && env.OriginalDestination == "":
		return true, "no original destination: give one"
	}
	return false, ""
}

// reopen makes the inbox row of a dead letter or rejection ready for the
// replayed message: DEAD_LETTERED is reset, REJECTED (an envelope of class
// BUSINESS, from the reject queue) is reopened. A TECHNICAL_FAILURE row
// (a dead letter of UNKNOWN_STATUS whose row was mapped since) needs
// nothing: the replayed message is its next attempt. It returns why the
// replay could not take effect ("" when it can): the row is in another
// state, so the replayed message would only be a duplicate, or its status
// is still unknown. Without a row the replayed message is processed as
// new.
func reopen(ctx context.Context, st *inbox.Store, env dlq.Envelope) (string, error) {
	var ok bool
	var err error
	if env.Class == string(inboxkit.ClassBusiness) {
		ok, err = st.ReopenRejected(ctx, env.EventID, env.Consumer)
	} else {
		ok, err = st.ResetForReplay(ctx, env.EventID, env.Consumer)
	}
	if err != nil || ok {
		return "", err
	}
	r, err := st.Get(ctx, env.EventID, env.Consumer)
	if errors.Is(err, inbox.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	switch {
	case r.Status == inboxkit.StatusTechnicalFailure:
		return "", nil
	case !r.Status.Known():
		return fmt.Sprintf("its inbox row (consumer %s) is %s, a status the state machine does not know: map it first (inboxctl migrate --map-status '%s=TECHNICAL_FAILURE'); left on the queue",
			env.Consumer, r.Status, r.Status), nil
	}
	return fmt.Sprintf("its inbox row (consumer %s) is %s, not %s: a replay would be a duplicate and change nothing; left on the queue",
		env.Consumer, r.Status, map[bool]inboxkit.Status{true: inboxkit.StatusRejected, false: inboxkit.StatusDeadLettered}[env.Class == string(inboxkit.ClassBusiness)]), nil
}
