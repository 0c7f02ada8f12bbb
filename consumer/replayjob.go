package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// errStop ends a job's scan after the job stopped itself.
var errStop = errors.New("stop")

// replayJob is Replay with a Job (see "Replay jobs" at Replay).
func replayJob(parent context.Context, cfg ReplayConfig) (ReplayReport, error) {
	var rep ReplayReport
	st, job := cfg.Store, cfg.Job
	stale := cfg.JobStale
	if stale <= 0 {
		stale = inbox.DefaultJobStale
	}
	if err := st.ClaimReplayJob(parent, job, stale); err != nil {
		return rep, err
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// mu serializes the runner's writes of the job row (the heartbeat's
	// and the counts'): each is conditional on the one before.
	var mu sync.Mutex
	write := func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return st.UpdateReplayJob(ctx, job)
	}
	beatDone := make(chan struct{})
	beatStopped := make(chan struct{})
	go func() {
		defer close(beatStopped)
		heartbeat(ctx, st, job, &mu, stale, beatDone, cancel)
	}()
	stopBeat := func() { close(beatDone); <-beatStopped }

	sent0, _, err := st.JobProgress(ctx, job.ID)
	if err == nil {
		job.State, job.StopReason = inbox.JobRunning, ""
		err = write(ctx)
	}
	if err != nil {
		stopBeat()
		return rep, err
	}
	skipped0 := job.Skipped // the earlier runs'
	minSample := cfg.StopMinSample
	if minSample <= 0 {
		minSample = DefaultStopMinSample
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
		if err := write(ctx); err != nil {
			return err
		}
		if rep.Stopped = stopReason(job.FailedAgain, job.Replayed, cfg.StopAfterFailures, cfg.StopAfterPercent, minSample); rep.Stopped != "" {
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
	stopBeat()
	if c := context.Cause(ctx); c != nil && parent.Err() == nil && !errors.Is(scanErr, inbox.ErrJobLost) {
		scanErr = c // the heartbeat stopped the run
	}
	uctx := context.WithoutCancel(ctx)
	switch {
	case errors.Is(scanErr, inbox.ErrJobLost):
		return rep, scanErr // another process has the job: write nothing
	case errors.Is(scanErr, errStop):
		job.State, job.StopReason = inbox.JobStopped, rep.Stopped
		scanErr = fmt.Errorf("%w: %s", ErrReplayStopped, rep.Stopped)
	case scanErr == nil:
		job.State = inbox.JobDone
	default:
		// Ended by an error or a cancel: the job stays RUNNING
		// (resumable), released with the error as its reason.
		job.StopReason = "the run ended unfinished: " + scanErr.Error()
	}
	job.Skipped = skipped0 + int64(len(rep.Skipped))
	if err := st.UpdateReplayJob(uctx, job); err != nil && scanErr == nil {
		scanErr = err
	}
	return rep, scanErr
}

// heartbeat writes the heartbeat of job every inbox.ReplayJobBeat(stale)
// until done is closed, under mu. It cancels the run (cancel, with the
// cause) when the claim is lost, or when no heartbeat could be written for
// two thirds of stale: the run stops before another process may take the
// job over.
func heartbeat(ctx context.Context, st *inbox.Store, job *inbox.ReplayJob, mu *sync.Mutex, stale time.Duration, done <-chan struct{}, cancel context.CancelCauseFunc) {
	t := time.NewTicker(inbox.ReplayJobBeat(stale))
	defer t.Stop()
	ok := time.Now()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mu.Lock()
		err := st.BeatReplayJob(ctx, job)
		mu.Unlock()
		switch {
		case err == nil:
			ok = time.Now()
		case errors.Is(err, inbox.ErrJobLost):
			cancel(err)
			return
		case time.Since(ok) > stale*2/3:
			cancel(fmt.Errorf("consumer: replay job %d: no heartbeat written for %s (%w): stopped before another runner may take it over; resume it", job.ID, time.Since(ok).Round(time.Second), err))
			return
		}
	}
}

// stopReason is why a job with replayed events sent, failedAgain of them
// failed again, stops: more than n failed (n > 0), or more than pct
// percent of them once minSample were replayed (pct > 0); "" to go on.
func stopReason(failedAgain, replayed int64, n int, pct float64, minSample int) string {
	if n > 0 && failedAgain >= int64(n) {
		return fmt.Sprintf("%d of the %d events replayed failed again (--stop-after-failures %d)", failedAgain, replayed, n)
	}
	if pct > 0 && replayed >= int64(minSample) && float64(failedAgain)*100 > pct*float64(replayed) {
		return fmt.Sprintf("%d of the %d events replayed failed again: %.1f%%, more than %g%% (--stop-after-failures %g%%, judged after %d events)",
			failedAgain, replayed, float64(failedAgain)*100/float64(replayed), pct, pct, minSample)
	}
	return ""
}
