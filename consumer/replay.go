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
	// selection is ANDed with EventID. With All set too, a message that is
	// not an envelope is reported in Skipped, as without SelectFunc.
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
	// Job, when set, makes the replay a resumable job, recorded in
	// inbox.ReplayJobTable (create it with inbox.Store.CreateReplayJob; to
	// resume, pass the same job again: Replay updates *Job in place). See
	// "Replay jobs" below for what it guarantees. Limit counts the events
	// of every run of the job. DryRun must not be set with a Job.
	Job *inbox.ReplayJob
	// StopAfterFailures, with a Job, stops the job (inbox.JobStopped,
	// ErrReplayStopped) when this many of its replayed events failed again
	// (their rows are failed rows again, checked at most once a second and
	// at the end); 0 never stops.
	StopAfterFailures int
	// StopAfterPercent, with a Job, stops it when more than this percentage
	// of the events it replayed (in all its runs) failed again, judged once
	// it replayed StopMinSample events; 0 never stops. It may be set with
	// StopAfterFailures: the first reached stops the job.
	StopAfterPercent float64
	// StopMinSample is how many events a job replays before
	// StopAfterPercent is judged. Defaults to DefaultStopMinSample.
	StopMinSample int
	// JobStale is the stale time of the job's claim: Replay claims the Job
	// (inbox.Store.ClaimReplayJob: refused with *inbox.JobHeldError while
	// another runner's heartbeat is younger than this), writes its
	// heartbeat every inbox.ReplayJobBeat(JobStale), and stops, leaving
	// the job to be resumed, when it lost the claim or could not write
	// the heartbeat for two thirds of it. Every process that runs a
	// job must use the same. Defaults to inbox.DefaultJobStale; at least
	// inbox.MinJobStale.
	JobStale time.Duration
	// Progress, when set, is called after each event sent, with its id.
	Progress func(eventID string)
}

// DefaultStopMinSample is ReplayConfig.StopMinSample's default: a
// percentage of failures is judged after 20 events replayed.
const DefaultStopMinSample = 20

// ErrReplayStopped is returned by Replay when its job stopped itself
// (ReplayConfig.StopAfterFailures, StopAfterPercent); ReplayReport.Stopped
// says why.
var ErrReplayStopped = errors.New("consumer: replay job stopped")

// ReplayReport says what Replay did.
type ReplayReport struct {
	Replayed []string // event ids sent back to their destination (with DryRun: that would be)
	Skipped  []string // dead letters selected but left in the DLQ, each with the reason
	// Kept counts the dead letters not selected (another event id than
	// ReplayConfig.EventID), handed back unchanged.
	Kept int
	// With a Job: Settled counts the dead letters removed without a send
	// (a copy of one the job sent already, left by a run killed after the
	// send), FailedAgain the dead letters of the job's events made after
	// the job reopened them (left on the queue), Stopped the reason the job
	// stopped ("" when it did not).
	Settled     int
	FailedAgain int
	Stopped     string
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
// to the DLQ: at once, or, in a dry run and a job, when the scan ends (they
// are held meanwhile, so the DLQ source's prefetch bounds what one scan
// sees). Replay stops when the DLQ is idle for IdleTimeout, when it
// sees a dead letter for the second time, or at the first dead letter made
// after the replay started (a replayed message that failed again).
//
// # Replay jobs
//
// With ReplayConfig.Job, each selected dead letter goes through these
// steps, each a commit or a broker confirm:
//
//  1. one transaction: the job's item for the event is inserted (state
//     REOPENED; its primary key (job, event id, consumer) admits one) and
//     the row is reopened;
//  2. the message is published and the broker confirms it;
//  3. the item is marked SENT;
//  4. the dead letter is acknowledged (removed from the DLQ).
//
// Dead letters the job does not take are held unsettled until the scan
// ends and handed back then, so that a broker that requeues at the head
// (RabbitMQ) does not end the scan early; the DLQ source needs a prefetch
// as large as the dead letters to look at in one run.
//
// Killed at any point (kill -9) and run again with the same Job, the job
// finishes the rest and reopens no event twice: the dead letter was not
// acknowledged, so it comes again; its item tells how far it got. No item
// (killed in step 1): the transaction rolled back, it starts afresh.
// REOPENED (killed after step 1): the message is sent, then marked. SENT
// (killed after step 3): the dead letter is a copy of one already sent and
// is removed without a send (ReplayReport.Settled). So each event is
// reopened exactly once per job, and sent exactly once, except when the
// process dies between the broker's confirm (2) and the mark (3): then it
// is sent once more, at most once per such death. The receiver's inbox
// deduplicates the two copies by event id (the second finds its row
// PROCESSED, or is one more attempt when the first failed). A dead letter
// of the job's event made after the job reopened it (its envelope's
// dead-letter time after the item's REOPENED_AT; the two clocks of the
// consumer and of the replaying process are compared) is a new failure:
// it stays on the queue (ReplayReport.FailedAgain).
//
// A job has one runner at a time: Replay claims it first (a conditional
// UPDATE on the job's row, see inbox.Store.ClaimReplayJob) and keeps a
// heartbeat in its UPDATED_AT; a second Replay of the job is refused
// (*inbox.JobHeldError) while the heartbeat is fresh, and takes the job
// over once it is older than ReplayConfig.JobStale (the first runner was
// killed). A runner that finds its claim gone (inbox.ErrJobLost: it could
// not write its heartbeat for the stale time and was taken over) or that
// cannot write it for two thirds of the stale time stops at once; an event
// it was sending then may reach the broker once more, as after a kill. A
// run that ends on an error or a cancel leaves the job RUNNING with the
// error as its StopReason, released: a resume claims it at once.
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
	if cfg.Job != nil {
		if cfg.DryRun || cfg.EventID != "" {
			return rep, errors.New("consumer: Replay: a Job replays a selection (All or SelectFunc), not a dry run or one EventID")
		}
		if cfg.JobStale > 0 && cfg.JobStale < inbox.MinJobStale {
			return rep, fmt.Errorf("consumer: Replay: JobStale %s: give at least %s (inbox.MinJobStale), or 0 for %s", cfg.JobStale, inbox.MinJobStale, inbox.DefaultJobStale)
		}
		return replayJob(ctx, cfg)
	}
	var last time.Time // the previous publish (Rate)
	// A dry run holds every dead letter until the scan ends, as a job
	// does, so that it sees each once on a broker that requeues at the
	// head (RabbitMQ); a replay hands back at once what it does not take.
	var held []Delivery
	handBack := func(ctx context.Context, d Delivery) error {
		if cfg.DryRun {
			held = append(held, d)
			return nil
		}
		return handBack(ctx, d)
	}
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
		if err := pace(ctx, cfg.Rate, &last); err != nil {
			_ = d.Requeue(context.WithoutCancel(ctx), 0)
			return err
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
		if cfg.Progress != nil {
			cfg.Progress(env.EventID)
		}
		return nil
	})
	err = settleHeld(ctx, held, err)
	return rep, err
}

// settleHeld hands back the held deliveries; it returns err, else the
// first hand-back's error.
func settleHeld(ctx context.Context, held []Delivery, err error) error {
	for _, d := range held {
		if herr := handBack(context.WithoutCancel(ctx), d); herr != nil && err == nil {
			err = herr
		}
	}
	return err
}

// pace waits until 1/rate seconds after *last (no wait for rate 0 or the
// first send) and sets *last to that moment, or to now when it is later
// (a send slower than 1/rate is not made up for by a burst): sends are
// spaced 1/rate apart on average, the timer's lateness not added to each.
func pace(ctx context.Context, rate float64, last *time.Time) error {
	if rate <= 0 {
		return nil
	}
	now := time.Now()
	if last.IsZero() {
		*last = now
		return nil
	}
	next := last.Add(time.Duration(float64(time.Second) / rate))
	if wait := next.Sub(now); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	} else {
		next = now
	}
	*last = next
	return nil
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
		if (cfg.EventID != "" && m.Header("eventId") != cfg.EventID) || (cfg.SelectFunc != nil && !cfg.All) {
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
