package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// EventID by mistake), or SelectFunc given.
	All bool
	// SelectFunc, when set, replays only the dead letters (inboxkit
	// envelopes) it returns true for; the others count as Kept. Its
	// selection is ANDed with EventID.
	SelectFunc func(dlq.Envelope) bool
	// Limit, when positive, replays at most this many dead letters; the
	// selected ones after it count as Kept.
	Limit int
	// Rate, when positive, is the most dead letters published per second:
	// each publish waits until 1/Rate seconds after the previous one.
	Rate float64
	// Destination overrides the envelope's original destination.
	Destination string
	// DryRun changes nothing: every dead letter is handed back, no row is
	// reset and nothing is sent; the report says what a replay would do
	// (Replayed: the event ids it would replay, whose rows it would reset).
	DryRun bool
	// IdleTimeout ends the replay when the DLQ delivers nothing for this
	// long. Defaults to 2s.
	IdleTimeout time.Duration
	// Clock stamps the replay header. Defaults to the system clock.
	Clock inboxkit.Clock
}

// ReplayReport says what Replay did.
type ReplayReport struct {
	Replayed []string // event ids sent back to their destination (with DryRun: that would be)
	Skipped  []string // dead letters selected but left in the DLQ, each with the reason
	// Kept counts the dead letters not selected (another event id than
	// ReplayConfig.EventID), handed back unchanged.
	Kept int
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
	case cfg.EventID == "" && !cfg.All && cfg.SelectFunc == nil:
		return rep, errors.New("consumer: Replay: give an EventID or a SelectFunc, or set All to replay every dead letter")
	}
	if cfg.Clock == nil {
		cfg.Clock = inboxkit.SystemClock{}
	}
	var last time.Time // the previous publish (Rate)
	err := scanDLQ(ctx, cfg.DLQ, cfg.IdleTimeout, cfg.Clock, func(d Delivery, m inboxkit.Message) error {
		env, perr := dlq.Parse(m.Headers, m.Body)
		skip, report := skipReplay(cfg, m, env, perr)
		if !skip && cfg.Limit > 0 && len(rep.Replayed) >= cfg.Limit {
			skip, report = true, ""
		}
		if skip {
			if report == "" {
				rep.Kept++
			} else {
				rep.Skipped = append(rep.Skipped, report)
			}
			return handBack(ctx, d)
		}
		dest := cfg.Destination
		if dest == "" {
			dest = env.OriginalDestination
		}
		if cfg.DryRun {
			reason, err := wouldReopen(ctx, cfg.Store, env)
			if err != nil {
				_ = d.Requeue(ctx, 0)
				return fmt.Errorf("consumer: replay %s: %w", env.EventID, err)
			}
			if reason != "" {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", env.EventID, reason))
			} else {
				rep.Replayed = append(rep.Replayed, env.EventID)
			}
			return handBack(ctx, d)
		}
		if cfg.Rate > 0 {
			if wait := time.Duration(float64(time.Second)/cfg.Rate) - time.Since(last); !last.IsZero() && wait > 0 {
				select {
				case <-ctx.Done():
					_ = d.Requeue(context.WithoutCancel(ctx), 0)
					return ctx.Err()
				case <-time.After(wait):
				}
			}
			last = time.Now()
		}
		reason, err := reopen(ctx, cfg.Store, env)
		if err != nil {
			_ = d.Requeue(ctx, 0)
			return fmt.Errorf("consumer: replay %s: %w", env.EventID, err)
		}
		if reason != "" {
			// The replay could not take effect: keep the message.
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", env.EventID, reason))
			return handBack(ctx, d)
		}
		if err := cfg.Publisher.Publish(ctx, dest, env.ReplayHeaders(cfg.Clock.Now()), env.Body); err != nil {
			_ = d.Requeue(ctx, 0)
			return fmt.Errorf("consumer: replay %s to %s: %w (left in the DLQ)", env.EventID, dest, err)
		}
		if err := d.Ack(ctx); err != nil {
			return fmt.Errorf("consumer: replay %s: ack dead letter: %w (replayed; the DLQ copy may come again)", env.EventID, err)
		}
		rep.Replayed = append(rep.Replayed, env.EventID)
		return nil
	})
	return rep, err
}

// handBack returns a dead letter that is not taken to the DLQ.
func handBack(ctx context.Context, d Delivery) error {
	if err := d.Requeue(ctx, 0); err != nil {
		return fmt.Errorf("consumer: hand back to the DLQ: %w", err)
	}
	return nil
}

// scanDLQ receives the dead letters of src and calls visit for each, which
// settles it (acknowledges or hands it back), until src delivers nothing
// for idle (2s when 0), a dead letter comes for the second time (what is
// left was visited), or one comes that was dead-lettered after the scan
// started (a replayed message that failed again, which must not be
// visited in a loop). It returns visit's first error, or ctx's.
func scanDLQ(ctx context.Context, src Source, idle time.Duration, clock inboxkit.Clock, visit func(Delivery, inboxkit.Message) error) error {
	if idle == 0 {
		idle = 2 * time.Second
	}
	start := clock.Now()
	seen := map[string]bool{}
	for {
		rctx, cancel := context.WithTimeout(ctx, idle)
		d, err := src.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
				return nil
			}
			return fmt.Errorf("consumer: receive from the DLQ: %w", err)
		}
		m := d.Message()
		if k := letterKey(m); seen[k] {
			return handBack(ctx, d) // came round again: everything left was visited
		} else {
			seen[k] = true
		}
		if at, err := time.Parse(time.RFC3339Nano, m.Header(dlq.HeaderDeadLetteredAt)); err == nil && at.After(start) {
			return handBack(ctx, d)
		}
		if err := visit(d, m); err != nil {
			return err
		}
	}
}

// letterKey tells dead letters apart: its event id, dead-letter time and
// payload hash, and the broker's first message id of it (a requeued copy
// on ActiveMQ keeps it in HeaderOriginalMessageID), so that two messages
// the broker dead-lettered itself, with no envelope and the same (or no)
// body, are not taken for one.
func letterKey(m inboxkit.Message) string {
	return m.Header(dlq.HeaderEventID) + "|" + m.Header(dlq.HeaderDeadLetteredAt) + "|" + PayloadHash(m.Body) + "|" + BrokerID(m)
}

// BrokerID is the broker's id of a message as it was first delivered: the
// original message id of a copy that a requeue re-sent (ActiveMQ, see
// HeaderOriginalMessageID), else its BrokerMessageID.
func BrokerID(m inboxkit.Message) string {
	if v := m.Header(HeaderOriginalMessageID); v != "" {
		return v
	}
	return m.BrokerMessageID
}

// skipReplay tells whether a dead letter is left on the queue before its
// row is looked at (skip), and why, for ReplayReport.Skipped; report is
// empty for a dead letter of another event than cfg.EventID, which is
// not reported.
func skipReplay(cfg ReplayConfig, m inboxkit.Message, env dlq.Envelope, perr error) (skip bool, report string) {
	switch {
	case perr != nil:
		if (cfg.EventID != "" && m.Header("eventId") != cfg.EventID) || cfg.SelectFunc != nil {
			return true, ""
		}
		return true, describeForeign(m) + ": not an inboxkit dead letter (no " + dlq.HeaderReason + " header): the broker or another program put it there, and it cannot be replayed; remove it with 'inboxctl dlq drop'"
	case cfg.EventID != "" && env.EventID != cfg.EventID:
		return true, ""
	case cfg.SelectFunc != nil && !cfg.SelectFunc(env):
		return true, ""
	case env.EventID == "":
		return true, "(no event id, " + env.Reason + "): fix the producer and resend"
	case cfg.Destination == "" && env.OriginalDestination == "":
		return true, env.EventID + ": no original destination: give one"
	}
	return false, ""
}

// describeForeign names a message that is not an inboxkit envelope: its
// broker id, the eventId header it carries and its size.
func describeForeign(m inboxkit.Message) string {
	id := BrokerID(m)
	if id == "" {
		id = "without a broker id"
	}
	d := "message " + id
	if ev := m.Header("eventId"); ev != "" {
		d += " (event id " + ev + ")"
	}
	return fmt.Sprintf("%s, %d bytes", d, MessageSize(m))
}

// MessageSize is the size of a message's body: the content-length the
// broker sent when the body was not read (over a STOMP client's limit), else
// the body's length.
func MessageSize(m inboxkit.Message) int {
	if n, err := strconv.Atoi(m.Header("content-length")); err == nil && n > len(m.Body) {
		return n
	}
	return len(m.Body)
}

// wouldReopen is reopen without a change: why the replay could not take
// effect ("" when it could).
func wouldReopen(ctx context.Context, st *inbox.Store, env dlq.Envelope) (string, error) {
	r, err := st.Get(ctx, env.EventID, env.Consumer)
	if errors.Is(err, inbox.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if r.Status == reopenable(env) {
		return "", nil
	}
	return notReopened(env, r.Status), nil
}

// reopenable is the status a replay of env reopens: REJECTED for an
// envelope of class BUSINESS (from the reject queue), else DEAD_LETTERED.
func reopenable(env dlq.Envelope) inboxkit.Status {
	if env.Class == string(inboxkit.ClassBusiness) {
		return inboxkit.StatusRejected
	}
	return inboxkit.StatusDeadLettered
}

// notReopened says why a replay of env, whose row is in state got (not the
// one reopen changes), would not take effect; "" when it would all the
// same: a TECHNICAL_FAILURE row (a dead letter of UNKNOWN_STATUS whose row
// was mapped since) needs nothing, the replayed message is its next
// attempt.
func notReopened(env dlq.Envelope, got inboxkit.Status) string {
	switch {
	case got == inboxkit.StatusTechnicalFailure:
		return ""
	case !got.Known():
		return fmt.Sprintf("its inbox row (consumer %s) is %s, a status the state machine does not know: map it first (inboxctl migrate --map-status '%s=TECHNICAL_FAILURE'); left on the queue",
			env.Consumer, got, got)
	}
	return fmt.Sprintf("its inbox row (consumer %s) is %s, not %s: a replay would be a duplicate and change nothing; left on the queue", env.Consumer, got, reopenable(env))
}

// reopen makes the inbox row of a dead letter or rejection ready for the
// replayed message: DEAD_LETTERED is reset, REJECTED (an envelope of class
// BUSINESS, from the reject queue) is reopened. It returns why the replay
// could not take effect ("" when it can; see notReopened). Without a row
// the replayed message is processed as new.
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
	return notReopened(env, r.Status), nil
}
