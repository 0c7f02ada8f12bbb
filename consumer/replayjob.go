package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// errStop ends a job's scan after the job stopped itself.
var errStop = errors.New("stop")

// replayJob is Replay with a Job (see "Replay jobs" at Replay).
func replayJob(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	var rep ReplayReport
	st, job := cfg.Store, cfg.Job
	sent0, _, err := st.JobProgress(ctx, job.ID)
	if err != nil {
		return rep, err
	}
	skipped0 := job.Skipped // the earlier runs'
	job.State, job.StopReason = inbox.JobRunning, ""
	if err := st.UpdateReplayJob(ctx, job); err != nil {
		return rep, err
	}
	var held []Delivery // settled when the scan ends
	hold := func(d Delivery) error { held = append(held, d); return nil }
	var last, checked time.Time
	// check stops the job when too many of its events failed again; it
	// also writes the job's counts (at most once a second unless final).
	check := func(final bool) error {
		if !final && time.Since(checked) < time.Second {
			return nil
		}
		checked = time.Now()
		job.Skipped = skipped0 + int64(len(rep.Skipped))
		if err := st.UpdateReplayJob(ctx, job); err != nil {
			return err
		}
		if cfg.StopAfterFailures > 0 && job.FailedAgain >= int64(cfg.StopAfterFailures) {
			rep.Stopped = fmt.Sprintf("%d of the %d events replayed failed again (--stop-after-failures %d)", job.FailedAgain, job.Replayed, cfg.StopAfterFailures)
			return errStop
		}
		return nil
	}
	scanErr := scanDLQ(ctx, cfg.DLQ, cfg.IdleTimeout, cfg.Clock, func(d Delivery, m inboxkit.Message) error {
		env, perr := dlq.Parse(m.Headers, m.Body)
		skip, report := skipReplay(cfg, m, env, perr)
		if !skip && cfg.Limit > 0 && sent0+int64(len(rep.Replayed)) >= int64(cfg.Limit) {
			skip, report = true, ""
		}
		if skip {
			if report == "" {
				rep.Kept++
			} else {
				rep.Skipped = append(rep.Skipped, report)
			}
			return hold(d)
		}
		it, err := st.ReopenForJob(ctx, job.ID, env.EventID, env.Consumer, env.Class == string(inboxkit.ClassBusiness))
		if err != nil {
			_ = d.Requeue(context.WithoutCancel(ctx), 0)
			return fmt.Errorf("consumer: replay job %d: %s: %w", job.ID, env.EventID, err)
		}
		switch {
		case it.Refused:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", env.EventID, notReopened(env, it.Status)))
			return hold(d)
		case !it.New && !env.DeadLetteredAt.IsZero() && env.DeadLetteredAt.After(it.ReopenedAt):
			rep.FailedAgain++ // dead-lettered again after this job reopened it
			return hold(d)
		case it.State == inbox.ItemSent:
			if env.DeadLetteredAt.IsZero() {
				rep.FailedAgain++ // no time to tell a copy from a new failure: kept
				return hold(d)
			}
			if err := d.Ack(ctx); err != nil {
				return fmt.Errorf("consumer: replay job %d: remove the copy of %s, sent already: %w", job.ID, env.EventID, err)
			}
			rep.Settled++
			return nil
		}
		// ItemReopened: this call's, or an earlier run's that died before
		// the mark (its send may or may not have happened).
		if err := pace(ctx, cfg.Rate, &last); err != nil {
			_ = d.Requeue(context.WithoutCancel(ctx), 0)
			return err
		}
		failpoint.Hit(failpoint.ReplayAfterReopen)
		dest := cfg.Destination
		if dest == "" {
			dest = env.OriginalDestination
		}
		if err := cfg.Publisher.Publish(ctx, dest, env.ReplayHeaders(cfg.Clock.Now()), env.Body); err != nil {
			_ = d.Requeue(context.WithoutCancel(ctx), 0)
			return fmt.Errorf("consumer: replay job %d: %s to %s: %w (reopened, left in the DLQ: resume the job)", job.ID, env.EventID, dest, err)
		}
		failpoint.Hit(failpoint.ReplayAfterSend)
		if err := st.MarkItemSent(ctx, job.ID, env.EventID, env.Consumer); err != nil {
			_ = d.Requeue(context.WithoutCancel(ctx), 0)
			return fmt.Errorf("consumer: replay job %d: %w (sent; a resume sends it once more)", job.ID, err)
		}
		failpoint.Hit(failpoint.ReplayAfterMark)
		if err := d.Ack(ctx); err != nil {
			return fmt.Errorf("consumer: replay job %d: %s: ack dead letter: %w (sent and recorded; a resume removes the copy)", job.ID, env.EventID, err)
		}
		rep.Replayed = append(rep.Replayed, env.EventID)
		if cfg.Progress != nil {
			cfg.Progress(env.EventID)
		}
		return check(false)
	})
	scanErr = settleHeld(ctx, held, scanErr)
	if scanErr == nil {
		scanErr = check(true)
	}
	uctx := context.WithoutCancel(ctx)
	switch {
	case errors.Is(scanErr, errStop):
		job.State, job.StopReason = inbox.JobStopped, rep.Stopped
		scanErr = fmt.Errorf("%w: %s", ErrReplayStopped, rep.Stopped)
	case scanErr == nil:
		job.State = inbox.JobDone
	}
	// Killed by an error or a cancel: the job stays RUNNING (resumable).
	job.Skipped = skipped0 + int64(len(rep.Skipped))
	if err := st.UpdateReplayJob(uctx, job); err != nil && scanErr == nil {
		scanErr = err
	}
	return rep, scanErr
}
