package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// replaySelection is what a bulk dlq replay selects, as its job records it
// (inbox.ReplayJob.Selection, JSON) and --resume reads it back.
type replaySelection struct {
	Group  string `json:"group,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Key is --key: the dead letters of an order key (a parked key).
	Key      string    `json:"key,omitempty"`
	All      bool      `json:"all,omitempty"`
	Consumer string    `json:"consumer,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Until    time.Time `json:"until,omitzero"`
	To       string    `json:"to,omitempty"`
	Limit    int       `json:"limit,omitempty"`
	Rate     float64   `json:"rate,omitempty"`
	// StopAfterFailures is --stop-after-failures N, StopAfterPercent
	// --stop-after-failures P%.
	StopAfterFailures int     `json:"stopAfterFailures,omitempty"`
	StopAfterPercent  float64 `json:"stopAfterPercent,omitempty"`
}

// envReplayStale sets the stale time of a replay job's heartbeat (a
// duration; default inbox.DefaultJobStale): the same for every inboxctl
// that runs or abandons the jobs of a schema.
const envReplayStale = "INBOXKIT_REPLAY_STALE"

// replayStale reads $INBOXKIT_REPLAY_STALE.
func replayStale() (time.Duration, error) {
	v := os.Getenv(envReplayStale)
	if v == "" {
		return inbox.DefaultJobStale, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < inbox.MinJobStale {
		return 0, usageErr("$%s=%q: give a duration of at least %s (default %s), the same for every inboxctl that runs replay jobs", envReplayStale, v, inbox.MinJobStale, inbox.DefaultJobStale)
	}
	return d, nil
}

// parseStopAfter reads --stop-after-failures: "N" (events failed again)
// or "P%" (more than P percent of the events replayed, 0 < P < 100).
func parseStopAfter(v string) (n int, pct float64, err error) {
	if v == "" {
		return 0, 0, nil
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		pct, err = strconv.ParseFloat(p, 64)
		if err != nil || !(pct > 0 && pct < 100) {
			return 0, 0, usageErr("--stop-after-failures %q: give a percentage above 0 and below 100, e.g. 10%%, or a count, e.g. 10", v)
		}
		return 0, pct, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, 0, usageErr("--stop-after-failures %q: give a count of events failed again (10; 0: never stop) or a percentage of the events replayed (10%%)", v)
	}
	return n, 0, nil
}

// bulk tells whether the selection is a bulk one (a job), not --event-id.
func (s replaySelection) bulk() bool {
	return s.Group != "" || s.Reason != "" || s.Key != "" || s.All || !s.Since.IsZero() || !s.Until.IsZero()
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
	case s.Key != "":
		add("--key %s", s.Key)
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
	if s.StopAfterPercent > 0 {
		add("--stop-after-failures %g%%", s.StopAfterPercent)
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
	case s.Key != "":
		// The key's dead letters as its rows tell (inboxctl dlq replay
		// --key): the DLQ's order is their arrival order, the head first,
		// and the job replays in the DLQ's order.
		keys, err := st.KeyEvents(ctx, s.Consumer, s.Key)
		if err != nil {
			return nil, "", err
		}
		desc += fmt.Sprintf(" (%d dead-lettered row(s))", len(keys))
		rows = keySet{}
		for _, k := range keys {
			rows.add(k.EventID, k.ConsumerName)
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
		if u != nil && u.StopReason == "" && time.Since(u.UpdatedAt) < rc.JobStale {
			age := time.Since(u.UpdatedAt)
			return nil, "", usageErr("replay job %d of %s is unfinished and being run (heartbeat %s ago): wait until it ends, then start a new one;\n\tif its process is gone, 'inboxctl dlq replay --resume %d' takes it over once the heartbeat is %s old",
				u.ID, queue, max(age, 0).Round(time.Second), u.ID, rc.JobStale)
		}
		if u != nil {
			return nil, "", usageErr("replay job %d of %s is unfinished (RUNNING, last updated %s): its process was killed or ended on an error;\n\tfinish it with 'inboxctl dlq replay --resume %d' (it sends nothing twice), or give it up with --abandon %d, then start a new one",
				u.ID, queue, u.UpdatedAt.UTC().Format(time.RFC3339), u.ID, u.ID)
		}
	}
	selectFunc, selection, err := sel.selectFunc(ctx, st, job)
	if err != nil {
		return nil, "", err
	}
	rc.SelectFunc, rc.All = selectFunc, sel.All
	rc.Limit, rc.Rate, rc.StopAfterFailures, rc.StopAfterPercent, rc.Destination = sel.Limit, sel.Rate, sel.StopAfterFailures, sel.StopAfterPercent, sel.To
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
		if err := yieldToEarlierJob(ctx, st, &jb); err != nil {
			return nil, "", err
		}
		job = &jb
	} else if err := st.ClaimReplayJob(ctx, job, rc.JobStale); err != nil {
		if refused(err) {
			return nil, "", usageErr("%v", err)
		}
		return nil, "", err
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
	stale, err := replayStale()
	if err != nil {
		return consumer.ReplayReport{}, r.job, "", err
	}
	rc := consumer.ReplayConfig{Store: st, EventID: r.eventID, Destination: r.dest, DryRun: r.dryRun, Limit: r.sel.Limit, Rate: r.sel.Rate, JobStale: stale}
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
	// release gives the job's claim back when the run ends before it
	// started: the job stays RUNNING, resumable at once.
	release := func(err error) error {
		if job != nil && job.Held() {
			job.StopReason = "the run ended unfinished: " + err.Error()
			if uerr := st.UpdateReplayJob(context.WithoutCancel(ctx), job); uerr != nil {
				return errors.Join(err, uerr)
			}
		}
		return err
	}
	src, err := b.ToolSource(ctx, r.queue, prefetch)
	if err != nil {
		return consumer.ReplayReport{}, job, selection, release(b.fail("consume "+r.queue, err))
	}
	defer src.Close()
	pub, err := b.Publisher(ctx)
	if err != nil {
		return consumer.ReplayReport{}, job, selection, release(err)
	}
	rc.DLQ, rc.Publisher = src, pub
	rep, err := consumer.Replay(ctx, rc)
	if refused(err) {
		return rep, job, "", usageErr("%v", err) // nothing was tried
	}
	return rep, job, selection, err
}

// refused tells whether err is a job's claim refused: another runner holds
// it, or it is DONE or ABANDONED.
func refused(err error) bool {
	var held *inbox.JobHeldError
	return errors.As(err, &held) || errors.Is(err, inbox.ErrJobClosed)
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

// yieldToEarlierJob closes j, just created, when the table has another
// RUNNING job of j's queue with a lower id: two new bulk replays of one
// queue started at the same moment both pass unfinishedJob's check, and
// the lower id goes on. It is race-free because ids are the highest
// committed id plus one (CreateReplayJob): a job with a lower id committed
// before j was inserted, so j's check sees it. j is left ABANDONED with the
// reason, having sent nothing.
func yieldToEarlierJob(ctx context.Context, st *inbox.Store, j *inbox.ReplayJob) error {
	jobs, err := st.ReplayJobs(ctx)
	if err != nil {
		return err
	}
	for _, o := range jobs {
		if o.Queue != j.Queue || o.State != inbox.JobRunning || o.ID >= j.ID {
			continue
		}
		j.State, j.StopReason = inbox.JobAbandoned, fmt.Sprintf("withdrawn before it sent anything: job %d of the queue started at the same moment", o.ID)
		if err := st.UpdateReplayJob(ctx, j); err != nil {
			return err
		}
		return usageErr("replay job %d of %s started at the same moment as this one (job %d, withdrawn): wait until job %d ends, then start a new one",
			o.ID, j.Queue, j.ID, o.ID)
	}
	return nil
}

// printJob prints a job's line after a run.
func printJob(w io.Writer, j inbox.ReplayJob) {
	fmt.Fprintf(w, "replay job %d %s: %d replayed in all its runs, %d left with a reason, %d failed again", j.ID, j.State, j.Replayed, j.Skipped, j.FailedAgain)
	if j.StopReason != "" {
		fmt.Fprintf(w, "; stopped: %s", j.StopReason)
	}
	fmt.Fprintln(w)
}

// printJobs is dlq replay --jobs; stale is the heartbeat's stale time.
func printJobs(w io.Writer, table string, jobs []inbox.ReplayJob, stale time.Duration) {
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
	now := time.Now()
	for _, j := range jobs {
		switch {
		case j.State != inbox.JobRunning:
		case j.StopReason != "":
			fmt.Fprintf(w, "job %d is RUNNING, its last run ended unfinished: finish it with 'inboxctl dlq replay --resume %d' (or give it up with --abandon %d)\n", j.ID, j.ID, j.ID)
		case now.Sub(j.UpdatedAt) < stale:
			fmt.Fprintf(w, "job %d is RUNNING (heartbeat %s ago): a process runs it; if that process is gone, --resume %d takes it over once the heartbeat is %s old\n",
				j.ID, max(now.Sub(j.UpdatedAt), 0).Round(time.Second), j.ID, stale)
		default:
			fmt.Fprintf(w, "job %d is RUNNING with a stale heartbeat (%s ago; its process was killed): finish it with 'inboxctl dlq replay --resume %d' (or give it up with --abandon %d)\n",
				j.ID, now.Sub(j.UpdatedAt).Round(time.Second), j.ID, j.ID)
		}
	}
}

// abandonJob is dlq replay --abandon id: the job given up for operator
// who, the action recorded, the events reopened but not sent printed (exit
// 1 when there are: the operator checks them).
func abandonJob(cmd *cobra.Command, f dbFlags, who string, id int64, asJSON bool) error {
	ctx := cmd.Context()
	stale, err := replayStale()
	if err != nil {
		return err
	}
	st, _, err := f.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.DB().Close()
	j, unsent, err := st.AbandonReplayJob(ctx, id, who, stale)
	switch {
	case errors.Is(err, inbox.ErrNoSuchJob) || refused(err):
		return usageErr("%v", err)
	case err != nil:
		return err
	}
	ids := make([]string, 0, len(unsent))
	for _, k := range unsent {
		ids = append(ids, k.EventID)
	}
	sel := j.Selection
	var rs replaySelection
	if json.Unmarshal([]byte(j.Selection), &rs) == nil {
		sel = rs.String()
	}
	recErr := recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: who, Action: "dlq-replay-abandon", EventIDs: ids, Rows: int64(len(ids)),
		Detail: fmt.Sprintf("queue %s, job %d: %s; %d replayed, %d reopened but not sent", j.Queue, j.ID, sel, j.Replayed, len(ids))}, st.RecordAction)
	out := cmd.OutOrStdout()
	if asJSON {
		if unsent == nil {
			unsent = []inbox.EventKey{}
		}
		if err := writeJSON(out, struct {
			Job             inbox.ReplayJob  `json:"job"`
			ReopenedNotSent []inbox.EventKey `json:"reopenedNotSent"`
		}{j, unsent}); err != nil {
			return err
		}
	} else {
		printAbandoned(out, j, unsent)
	}
	if len(unsent) > 0 {
		return errFindings
	}
	return recErr
}

// printAbandoned prints what dlq replay --abandon did, and what the
// operator must check: the events the job reopened but did not mark sent.
func printAbandoned(w io.Writer, j inbox.ReplayJob, unsent []inbox.EventKey) {
	fmt.Fprintf(w, "replay job %d ABANDONED (%s): %d replayed in all its runs, %d failed again; a new bulk replay of %s may start\n", j.ID, j.StopReason, j.Replayed, j.FailedAgain, j.Queue)
	if len(unsent) == 0 {
		fmt.Fprintln(w, "every event it reopened was sent")
		return
	}
	fmt.Fprintf(w, "%d event(s) reopened (TECHNICAL_FAILURE, attempts 0) but not marked sent: each was sent once or not at all (killed in between).\n", len(unsent))
	fmt.Fprintf(w, "\tcheck each with 'inboxctl audit --event-id ID': not PROCESSED and its dead letter still in %s ('inboxctl dlq list'): replay it with --event-id;\n"+
		"\tPROCESSED (it was sent): a dead letter of it still there is spent, 'inboxctl dlq drop --event-id ID' removes it\n", j.Queue)
	for _, k := range unsent {
		fmt.Fprintf(w, "reopened, not sent: %s (consumer %s)\n", k.EventID, k.ConsumerName)
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
