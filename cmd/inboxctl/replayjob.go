package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// replaySelection is what a bulk dlq replay selects, as its job records it
// (inbox.ReplayJob.Selection, JSON) and --resume reads it back.
type replaySelection struct {
	Group    string    `json:"group,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	All      bool      `json:"all,omitempty"`
	Consumer string    `json:"consumer,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Until    time.Time `json:"until,omitzero"`
	To       string    `json:"to,omitempty"`
	Limit    int       `json:"limit,omitempty"`
	Rate     float64   `json:"rate,omitempty"`
	// StopAfterFailures is --stop-after-failures.
	StopAfterFailures int `json:"stopAfterFailures,omitempty"`
}

// bulk tells whether the selection is a bulk one (a job), not --event-id.
func (s replaySelection) bulk() bool {
	return s.Group != "" || s.Reason != "" || s.All || !s.Since.IsZero() || !s.Until.IsZero()
}

// String is the selection as flags, for the operator action and --jobs.
func (s replaySelection) String() string {
	var out string
	add := func(f string, a ...any) {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf(f, a...)
	}
	switch {
	case s.Group != "":
		add("--group %s", s.Group)
	case s.Reason != "":
		add("--reason %s", s.Reason)
	case s.All:
		add("--all")
	}
	if s.Consumer != "" {
		add("--consumer %s", s.Consumer)
	}
	if !s.Since.IsZero() {
		add("--since %s", s.Since.UTC().Format(time.RFC3339))
	}
	if !s.Until.IsZero() {
		add("--until %s", s.Until.UTC().Format(time.RFC3339))
	}
	if s.Limit > 0 {
		add("--limit %d", s.Limit)
	}
	if s.Rate > 0 {
		add("--rate %g/s", s.Rate)
	}
	if s.StopAfterFailures > 0 {
		add("--stop-after-failures %d", s.StopAfterFailures)
	}
	if s.To != "" {
		add("--to %s", s.To)
	}
	return out
}

// keySet is a set of inbox row keys; an envelope without a consumer
// matches by its event id alone.
type keySet map[string]bool

func (k keySet) add(ev, consumer string) { k[consumer+"\x00"+ev] = true; k["\x00"+ev] = true }

func (k keySet) has(e dlq.Envelope) bool { return k[e.Consumer+"\x00"+e.EventID] }

// selectFunc is the selection as a consumer.ReplayConfig.SelectFunc, with
// a description for the output. The rows are read now: a group's rows, or
// the failed rows in the time window; archived rows are never selected
// (inboxctl failures archive). job, when not nil, adds the events the job
// reopened already (a resumed job finishes them whatever the selection
// finds now).
func (s replaySelection) selectFunc(ctx context.Context, st *inbox.Store, job *inbox.ReplayJob) (func(dlq.Envelope) bool, string, error) {
	f := inbox.FailureFilter{Consumer: s.Consumer, Since: s.Since, Until: s.Until}
	desc := s.String()
	var rows keySet // nil: no row condition
	switch {
	case s.Group != "":
		g, ids, err := st.GroupEvents(ctx, s.Group, f)
		switch {
		case errors.Is(err, inbox.ErrNoSuchGroup) && job != nil:
			desc += " (the group has no rows left)"
		case errors.Is(err, inbox.ErrNoSuchGroup):
			return nil, "", usageErr("%w", err)
		case err != nil:
			return nil, "", err
		default:
			desc += fmt.Sprintf(" (%s %s %s: %d row(s))", g.ConsumerName, g.Status, orDash(g.ReasonCode), len(ids))
		}
		rows = keySet{}
		for _, id := range ids {
			rows.add(id, g.ConsumerName)
		}
	case s.Consumer != "" || !s.Since.IsZero() || !s.Until.IsZero():
		keys, err := st.FailedEvents(ctx, f)
		if err != nil {
			return nil, "", err
		}
		rows = keySet{}
		for _, k := range keys {
			rows.add(k.EventID, k.ConsumerName)
		}
	}
	archived := keySet{}
	keys, err := st.FailedEvents(ctx, inbox.FailureFilter{Archived: true})
	if err != nil {
		return nil, "", err
	}
	for _, k := range keys {
		archived[k.ConsumerName+"\x00"+k.EventID] = true
	}
	done := keySet{}
	if job != nil {
		keys, err := st.JobEvents(ctx, job.ID)
		if err != nil {
			return nil, "", err
		}
		for _, k := range keys {
			done.add(k.EventID, k.ConsumerName)
		}
	}
	return func(e dlq.Envelope) bool {
		if done.has(e) {
			return true
		}
		if archived[e.Consumer+"\x00"+e.EventID] {
			return false
		}
		if s.Reason != "" && e.Reason != s.Reason {
			return false
		}
		return rows == nil || rows.has(e)
	}, desc, nil
}

// prepareBulkReplay sets rc up for a bulk replay of queue by sel: its
// SelectFunc and All and, unless rc.DryRun, its Job: job when resumed
// (not nil), else a new job recorded for operator, refused while the
// queue has an unfinished one. It returns the job (nil for a dry run) and
// the selection in words for the output and the operator action. The
// command line and the console start a bulk replay through it and run it
// with consumer.Replay (the DLQ source opened with a prefetch of 1,000:
// see ReplayConfig.Job).
func prepareBulkReplay(ctx context.Context, st *inbox.Store, queue string, sel replaySelection, operator string, job *inbox.ReplayJob, rc *consumer.ReplayConfig) (*inbox.ReplayJob, string, error) {
	if job == nil && !rc.DryRun {
		u, err := unfinishedJob(ctx, st, queue)
		if err != nil {
			return nil, "", err
		}
		if u != nil {
			return nil, "", usageErr("replay job %d of %s is unfinished (RUNNING, last updated %s): its process may still run, or was killed;\n\tfinish it with 'inboxctl dlq replay --resume %d' (it sends nothing twice), then start a new one",
				u.ID, queue, u.UpdatedAt.UTC().Format(time.RFC3339), u.ID)
		}
	}
	selectFunc, selection, err := sel.selectFunc(ctx, st, job)
	if err != nil {
		return nil, "", err
	}
	rc.SelectFunc, rc.All = selectFunc, sel.All
	rc.Limit, rc.Rate, rc.StopAfterFailures, rc.Destination = sel.Limit, sel.Rate, sel.StopAfterFailures, sel.To
	if rc.DryRun {
		return nil, selection, nil
	}
	if job == nil {
		text, err := json.Marshal(sel)
		if err != nil {
			return nil, "", err
		}
		rate := ""
		if sel.Rate > 0 {
			rate = fmt.Sprintf("%g/s", sel.Rate)
		}
		jb, err := st.CreateReplayJob(ctx, inbox.ReplayJob{Queue: queue, Selection: string(text), Operator: operator, Rate: rate, Limit: int64(sel.Limit)})
		if err != nil {
			return nil, "", err
		}
		job = &jb
	}
	rc.Job = job
	return job, fmt.Sprintf("job %d: %s", job.ID, selection), nil
}

// replayRun is one replay of the dead letters on a queue: the one path of
// 'dlq replay' and of the console. A bulk selection (sel.bulk()) runs as a
// job (prepareBulkReplay; job when resumed), else the dead letters of
// eventID. The messages go to dest ("" their original destination).
type replayRun struct {
	queue, eventID, dest, operator string
	sel                            replaySelection
	dryRun                         bool
	job                            *inbox.ReplayJob
}

// run replays through consumer.Replay and returns its report, the job (nil
// without one) and the selection in words. A job and a dry run read the
// queue with a prefetch of 1,000: they hold what they do not take until
// the scan ends. b's AckWait is left as it is (the console's pages read
// it meanwhile).
func (r replayRun) run(ctx context.Context, st *inbox.Store, b *broker) (consumer.ReplayReport, *inbox.ReplayJob, string, error) {
	if err := b.requireQueue(ctx, r.queue); err != nil {
		return consumer.ReplayReport{}, r.job, "", err
	}
	rc := consumer.ReplayConfig{Store: st, EventID: r.eventID, Destination: r.dest, DryRun: r.dryRun, Limit: r.sel.Limit, Rate: r.sel.Rate, StopAfterFailures: r.sel.StopAfterFailures}
	job, selection, prefetch := r.job, "--event-id "+r.eventID, 10
	if r.sel.bulk() {
		var err error
		if job, selection, err = prepareBulkReplay(ctx, st, r.queue, r.sel, r.operator, r.job, &rc); err != nil {
			return consumer.ReplayReport{}, job, "", err
		}
		prefetch = 1000
	}
	if r.dryRun {
		prefetch = 1000
	}
	src, err := b.ToolSource(ctx, r.queue, prefetch)
	if err != nil {
		return consumer.ReplayReport{}, job, selection, b.fail("consume "+r.queue, err)
	}
	defer src.Close()
	pub, err := b.Publisher(ctx)
	if err != nil {
		return consumer.ReplayReport{}, job, selection, err
	}
	rc.DLQ, rc.Publisher = src, pub
	rep, err := consumer.Replay(ctx, rc)
	return rep, job, selection, err
}

// unfinishedJob returns a RUNNING job of the table on queue, if any: a new
// bulk replay of that queue is refused until it is resumed, since a new
// job would not know what the killed one sent.
func unfinishedJob(ctx context.Context, st *inbox.Store, queue string) (*inbox.ReplayJob, error) {
	jobs, err := st.ReplayJobs(ctx)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.Queue == queue && j.State == inbox.JobRunning {
			return &j, nil
		}
	}
	return nil, nil
}

// printJob prints a job's line after a run.
func printJob(w io.Writer, j inbox.ReplayJob) {
	fmt.Fprintf(w, "replay job %d %s: %d replayed in all its runs, %d left with a reason, %d failed again", j.ID, j.State, j.Replayed, j.Skipped, j.FailedAgain)
	if j.StopReason != "" {
		fmt.Fprintf(w, "; stopped: %s", j.StopReason)
	}
	fmt.Fprintln(w)
}

// printJobs is dlq replay --jobs.
func printJobs(w io.Writer, table string, jobs []inbox.ReplayJob) {
	fmt.Fprintf(w, "replay jobs of %s: %d\n", table, len(jobs))
	if len(jobs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tQUEUE\tOPERATOR\tREPLAYED\tSKIPPED\tFAILED AGAIN\tCREATED\tUPDATED\tSELECTION\t")
	for _, j := range jobs {
		sel := j.Selection
		var s replaySelection
		if json.Unmarshal([]byte(j.Selection), &s) == nil {
			sel = s.String()
		}
		if j.StopReason != "" {
			sel += "; stopped: " + j.StopReason
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", j.ID, j.State, j.Queue, j.Operator, j.Replayed, j.Skipped, j.FailedAgain,
			j.CreatedAt.UTC().Format(time.RFC3339), j.UpdatedAt.UTC().Format(time.RFC3339), sel)
	}
	tw.Flush()
	for _, j := range jobs {
		if j.State == inbox.JobRunning {
			fmt.Fprintf(w, "job %d is RUNNING: if no process runs it any more (killed), finish it with 'inboxctl dlq replay --resume %d'\n", j.ID, j.ID)
		}
	}
}

// jobOutcome is the error a job run ends with: ErrReplayStopped as exit 1
// with the way on.
func jobOutcome(stderr io.Writer, j inbox.ReplayJob, err error) error {
	if errors.Is(err, consumer.ErrReplayStopped) {
		fmt.Fprintf(stderr, "replay job %d stopped: %s; the rest stays in %s: fix the cause, then 'inboxctl dlq replay --resume %d'\n", j.ID, j.StopReason, j.Queue, j.ID)
		return errFindings
	}
	return err
}
