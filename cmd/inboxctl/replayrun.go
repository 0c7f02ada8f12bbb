package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
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

// replayDLQ replays the dead letters r selects on queue r.Queue of b
// through consumer.Replay, the replay of 'dlq replay': the rows reset, the
// messages re-sent, each at most once per run, at most r.Rate a second.
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
	rc := consumer.ReplayConfig{Store: st, EventID: r.EventID, All: r.All, DryRun: r.DryRun, Limit: r.Limit, Rate: perSecond}
	selection := map[bool]string{true: "--all", false: "--event-id " + r.EventID}[r.All]
	switch {
	case r.Group != "":
		g, ids, err := st.GroupEvents(ctx, r.Group, inbox.FailureFilter{Consumer: r.Consumer})
		if err != nil {
			if errors.Is(err, inbox.ErrNoSuchGroup) {
				return rep, usageErr("%w", err)
			}
			return rep, err
		}
		in := make(map[string]bool, len(ids))
		for _, id := range ids {
			in[id] = true
		}
		rc.SelectFunc = func(e dlq.Envelope) bool { return in[e.EventID] }
		selection = fmt.Sprintf("--group %s (%s %s %s: %d row(s))", r.Group, g.ConsumerName, g.Status, orDash(g.ReasonCode), len(ids))
	case r.Reason != "":
		rc.SelectFunc = func(e dlq.Envelope) bool { return e.Reason == r.Reason }
		selection = "--reason " + r.Reason
	}
	if r.Limit > 0 {
		selection += fmt.Sprintf(", --limit %d", r.Limit)
	}
	if perSecond > 0 {
		selection += fmt.Sprintf(", --rate %g/s", perSecond)
	}
	if err := b.requireQueue(ctx, r.Queue); err != nil {
		return rep, err
	}
	// brokerurl's ToolSource directly, not broker.toolSource: that one
	// sets the shared AckWait, which the console's pages read meanwhile.
	src, err := b.ToolSource(ctx, r.Queue, 10)
	if err != nil {
		return rep, b.fail("consume "+r.Queue, err)
	}
	pub, err := b.Publisher(ctx)
	if err != nil {
		src.Close()
		return rep, err
	}
	rc.DLQ, rc.Publisher = src, pub
	cr, err := consumer.Replay(ctx, rc)
	src.Close()
	rep.Replayed = append(rep.Replayed, cr.Replayed...)
	rep.Left = append(rep.Left, cr.Skipped...)
	rep.NotSelected = cr.Kept
	if err != nil {
		rep.Error = err.Error()
	}
	if !r.DryRun && len(cr.Replayed) > 0 {
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
