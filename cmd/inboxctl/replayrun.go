package main

import (
	"context"
	"fmt"

	"github.com/inboxkit/inboxkit/inbox"
)

// replayRequest is one replay of dead letters as the console's forms and
// POST /api/dlq/replay give it: the selection of 'dlq replay' (exactly one
// of EventID, Group, Reason, All), with its --limit, --rate and --dry-run.
type replayRequest struct {
	// Queue is the dead-letter queue (the console's --dlq when empty).
	Queue   string `json:"queue,omitempty"`
	EventID string `json:"eventId,omitempty"`
	Group   string `json:"group,omitempty"`
	// Consumer is the consumer the group was listed for (with Group).
	Consumer string `json:"consumer,omitempty"`
	Reason   string `json:"reason,omitempty"`
	All      bool   `json:"all,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	// Rate is --rate: "50/s", "50" or "" (no limit).
	Rate   string `json:"rate,omitempty"`
	DryRun bool   `json:"dryRun,omitempty"`
}

// check validates r as 'dlq replay' validates its flags and returns the
// rate a second (0: none).
func (r replayRequest) check() (float64, error) {
	switch {
	case r.Queue == "":
		return 0, usageErr("a replay needs the dead-letter queue: start the console with --dlq NAME, or give queue")
	case countSet(r.EventID != "", r.All, r.Group != "", r.Reason != "") != 1:
		return 0, usageErr("a replay needs one of eventId (one event), group (a failure group), reason or all (every dead letter)")
	case r.Limit < 0:
		return 0, usageErr("limit must not be negative (got %d); 0 means no limit", r.Limit)
	}
	return parseRate(r.Rate)
}

// replayDLQ replays the dead letters r selects on queue r.Queue of b by
// the replay of 'dlq replay' (replayRun: a group, reason or all as a
// resumable job): the rows reset, the messages re-sent, each at most once
// per job, at most r.Rate a second.
// A replay that changed something is recorded in inbox.ActionTable with
// operator who, its detail starting with via (where it was asked). The
// report is what 'dlq replay -o json' prints; err is the replay's error
// (the report then says what was done before it), or the failure to
// record a replay that was done.
func replayDLQ(ctx context.Context, st *inbox.Store, b *broker, r replayRequest, who, via string) (replayReport, error) {
	rep := replayReport{Queue: r.Queue, DryRun: r.DryRun, Replayed: []string{}, Left: []string{}}
	perSecond, err := r.check()
	if err != nil {
		return rep, err
	}
	sel := replaySelection{Group: r.Group, Consumer: r.Consumer, Reason: r.Reason, All: r.All, Limit: r.Limit, Rate: perSecond}
	cr, job, selection, err := replayRun{queue: r.Queue, eventID: r.EventID, operator: who, sel: sel, dryRun: r.DryRun}.run(ctx, st, b)
	rep.Job = job
	if selection == "" {
		return rep, err // nothing was tried
	}
	rep.Replayed = append(rep.Replayed, cr.Replayed...)
	rep.Left = append(rep.Left, cr.Skipped...)
	rep.NotSelected = cr.Kept
	if err != nil {
		rep.Error = err.Error()
	}
	if !r.DryRun && (len(cr.Replayed) > 0 || job != nil) {
		// The replay took effect: recorded whatever its error, with a
		// context that outlives a cancelled request.
		a := inbox.Action{Operator: who, Action: "dlq-replay", EventIDs: cr.Replayed, Rows: int64(len(cr.Replayed)),
			Detail: via + "queue " + r.Queue + ", " + selection}
		if rerr := st.RecordAction(context.WithoutCancel(ctx), a); rerr != nil && err == nil {
			err = fmt.Errorf("the replay was done but not recorded in %s: %w", inbox.ActionTable, rerr)
		}
	}
	return rep, err
}
