package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

// cutoverCheck is one condition that must hold before the legacy bean
// stops: whether it holds, why, and what to do when it does not.
type cutoverCheck struct {
	Check   string `json:"check"`
	Holds   bool   `json:"holds"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
}

// The cutover checks, in the order they are listed.
const (
	checkShadowDiff    = "shadow-diff-clean"
	checkInboxAdopted  = "inbox-adopted"
	checkRetention     = "retention-covers-windows"
	checkDLQReplayable = "legacy-dlq-replayable"
	checkOutbox        = "outbox-relays-healthy"
)

var cutoverChecks = []string{checkShadowDiff, checkInboxAdopted, checkRetention, checkDLQReplayable, checkOutbox}

type cutoverFlags struct {
	db           dbFlags
	report       string
	minEvents    int64
	minDays      float64
	maxAge       time.Duration
	retention    time.Duration
	redelivery   time.Duration
	rollback     time.Duration
	broker       string
	legacyDLQ    string
	eventIDFrom  string
	consumerName string
	outboxTable  string
	outboxAge    time.Duration
	outboxMax    int64
	skip         []string
	now          func() time.Time
}

func newCutoverCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cutover",
		Short: "Switch from the legacy bean to the new consumer: what must hold first",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newCutoverCheckCmd())
	return c
}

func newCutoverCheckCmd() *cobra.Command {
	f := cutoverFlags{now: time.Now, maxAge: 24 * time.Hour, outboxAge: 5 * time.Minute}
	var o outputFlags
	c := &cobra.Command{
		Use:   "check --db URL --shadow-report FILE --retention D --redelivery-window D --rollback-window D [--broker URL --legacy-dlq QUEUE]",
		Short: "List what must hold before the legacy bean stops, and which holds (exit 0 only when all do)",
		Long: `cutover check lists the conditions of the switch from the legacy bean to the new
consumer and says for each whether it holds, why, and the fix:

  shadow-diff-clean         a saved 'shadow diff --report' with 0 unexpected events, at least
                            --min-events events over at least --min-days days, not older than --max-report-age
  inbox-adopted             the inbox table is at this build's schema version, no drift, no
                            unknown status values ('inboxctl migrate status')
  retention-covers-windows  --retention (the purge window the team runs) covers the broker's
                            --redelivery-window and the --rollback-window, and no recorded
                            purge ran with a shorter window
  legacy-dlq-replayable     every message of the legacy dead-letter (backout) queue has an
                            event id the new consumer reads (--event-id-from), so that moved
                            to its queue each is processed once (a processed one is a duplicate)
  outbox-relays-healthy     no parked outbox message, the oldest unsent one younger than
                            --outbox-max-age, at most --outbox-max-backlog unsent

--skip NAME,... leaves a check out (shown, not counted): e.g. legacy-dlq-replayable when
the legacy bean has no dead-letter queue. Exit 0 only when every other check holds.
The sequence it guards (shadow, switch, reverse shadow, remove): docs/shadow.md.`,
		Example: `  inboxctl cutover check --db postgres://app@db/prod --shadow-report diff.json \
    --retention 14d --redelivery-window 1d --rollback-window 7d \
    --broker stomp://mq:61613 --legacy-dlq ActiveMQ.DLQ`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			for _, s := range f.skip {
				if !slices.Contains(cutoverChecks, s) {
					return usageErr("--skip %q: not a check; the checks are %s", s, strings.Join(cutoverChecks, ", "))
				}
			}
			if f.retention <= 0 || f.redelivery <= 0 || f.rollback <= 0 {
				if !slices.Contains(f.skip, checkRetention) {
					return usageErr("--retention, --redelivery-window and --rollback-window are required (e.g. 14d, 1d, 7d): the purge window you run, the broker's redelivery window and how long a switch back must stay possible")
				}
			}
			checks := runCutoverChecks(cmd.Context(), &f)
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, checks); err != nil {
					return err
				}
			} else {
				writeCutover(out, checks)
			}
			for _, ch := range checks {
				if !ch.Holds && !ch.Skipped {
					return errFindings
				}
			}
			return nil
		},
	}
	f.db.register(c)
	c.Flags().StringVar(&f.report, "shadow-report", "", "a JSON report of 'inboxctl shadow diff --report FILE' (or -o json)")
	c.Flags().Int64Var(&f.minEvents, "min-events", 10000, "events the shadow diff must have compared")
	c.Flags().Float64Var(&f.minDays, "min-days", 7, "days the shadow diff's rows must span")
	c.Flags().Var(dayDuration{&f.maxAge}, "max-report-age", "the oldest the shadow diff report may be")
	c.Flags().Var(dayDuration{&f.retention}, "retention", "the purge window the team runs (purge --older-than), e.g. 14d")
	c.Flags().Var(dayDuration{&f.redelivery}, "redelivery-window", "how long the broker may redeliver a message, e.g. 1d")
	c.Flags().Var(dayDuration{&f.rollback}, "rollback-window", "how long a switch back to the legacy bean must stay possible, e.g. 7d")
	c.Flags().StringVar(&f.broker, "broker", "", "the broker holding the legacy dead-letter queue (default $"+envBroker+")")
	c.Flags().StringVar(&f.legacyDLQ, "legacy-dlq", "", "the legacy bean's dead-letter or backout queue (ActiveMQ.DLQ, the backout queue)")
	c.Flags().StringVar(&f.eventIDFrom, "event-id-from", "", "where the new consumer reads the event id (as run's --event-id-from; default the eventId header)")
	c.Flags().StringVar(&f.consumerName, "consumer", "invoice-consumer", "the new consumer's CONSUMER_NAME")
	c.Flags().StringVar(&f.outboxTable, "outbox-table", outbox.DefaultTable, "the outbox table")
	c.Flags().Var(dayDuration{&f.outboxAge}, "outbox-max-age", "the oldest an unsent outbox message may be")
	c.Flags().Int64Var(&f.outboxMax, "outbox-max-backlog", 1000, "the most unsent outbox messages")
	c.Flags().StringSliceVar(&f.skip, "skip", nil, "checks to leave out: "+strings.Join(cutoverChecks, ", "))
	o.register(c)
	return c
}

// runCutoverChecks runs every check; one that cannot run (a database
// unreachable) does not hold, with the reason.
func runCutoverChecks(ctx context.Context, f *cutoverFlags) []cutoverCheck {
	var out []cutoverCheck
	add := func(name string, fn func() cutoverCheck) {
		if slices.Contains(f.skip, name) {
			out = append(out, cutoverCheck{Check: name, Skipped: true, Detail: "skipped (--skip)"})
			return
		}
		ch := fn()
		ch.Check = name
		out = append(out, ch)
	}
	add(checkShadowDiff, func() cutoverCheck { return f.shadowDiff() })
	st, dbErr := f.openInbox(ctx)
	if st != nil {
		defer st.DB().Close()
	}
	add(checkInboxAdopted, func() cutoverCheck {
		if dbErr != nil {
			return cutoverCheck{Detail: dbErr.Error(), Fix: "give the new consumer's database with --db (or $" + envDB + ")"}
		}
		return inboxAdopted(ctx, st)
	})
	add(checkRetention, func() cutoverCheck { return f.retentionCheck(ctx, st) })
	add(checkDLQReplayable, func() cutoverCheck { return f.dlqReplayable(ctx, st) })
	add(checkOutbox, func() cutoverCheck {
		if dbErr != nil {
			return cutoverCheck{Detail: dbErr.Error(), Fix: "give the new consumer's database with --db (or $" + envDB + ")"}
		}
		return f.outboxHealthy(ctx, st)
	})
	return out
}

func (f *cutoverFlags) openInbox(ctx context.Context) (*inbox.Store, error) {
	st, _, err := f.db.openStoreUnchecked(ctx)
	return st, err
}

func (f *cutoverFlags) shadowDiff() cutoverCheck {
	run := "inboxctl shadow diff --legacy URL --shadow URL --config FILE --report FILE"
	if f.report == "" {
		return cutoverCheck{Detail: "no shadow diff report given", Fix: "run " + run + " and pass it with --shadow-report FILE"}
	}
	b, err := os.ReadFile(f.report)
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "run " + run}
	}
	var rep golden.ReconcileReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.GeneratedAt.IsZero() {
		return cutoverCheck{Detail: fmt.Sprintf("%s is not a shadow diff report (%v)", f.report, err), Fix: "run " + run}
	}
	if rep.Calibration {
		return cutoverCheck{Detail: f.report + " is a calibration (legacy against a legacy copy), not a shadow diff", Fix: "run " + run}
	}
	days := 0.0
	if rep.Span != nil {
		days = rep.Span.To.Sub(rep.Span.From).Hours() / 24
	}
	age := f.now().Sub(rep.GeneratedAt)
	detail := fmt.Sprintf("%d events over %.1f days, %d unexpected (report of %s)", rep.Counts.Events, days, rep.Counts.Unexpected, rep.GeneratedAt.Format(time.RFC3339))
	switch {
	case rep.Counts.Unexpected > 0:
		return cutoverCheck{Detail: detail + ": unexpected events " + strings.Join(first(rep.UnexpectedEvents, 5), ", "),
			Fix: "fix the new consumer (or add a rule for a difference that is intended) and run shadow diff again"}
	case rep.Counts.Events < f.minEvents:
		return cutoverCheck{Detail: fmt.Sprintf("%s: fewer than --min-events %d", detail, f.minEvents), Fix: "keep the shadow running and run shadow diff again later"}
	case days < f.minDays:
		return cutoverCheck{Detail: fmt.Sprintf("%s: shorter than --min-days %g (the config's effects need a \"time\" column for the span)", detail, f.minDays), Fix: "keep the shadow running and run shadow diff again later"}
	case age > f.maxAge:
		return cutoverCheck{Detail: fmt.Sprintf("%s: older than --max-report-age %s", detail, f.maxAge), Fix: "run " + run + " again"}
	}
	return cutoverCheck{Holds: true, Detail: detail}
}

func inboxAdopted(ctx context.Context, st *inbox.Store) cutoverCheck {
	s, err := st.SchemaStatus(ctx)
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "inboxctl migrate status --db URL shows what is wrong"}
	}
	detail := fmt.Sprintf("inbox table %s at schema version %d of %d", s.Table, s.Current, s.Latest)
	switch {
	case s.Current == 0 || len(s.Pending) > 0 || len(s.Drift) > 0:
		return cutoverCheck{Detail: fmt.Sprintf("%s, %d step(s) pending, %d drift", detail, len(s.Pending), len(s.Drift)), Fix: "inboxctl migrate --db URL (inboxctl migrate --dry-run prints the SQL for a DBA)"}
	case len(s.Unknown) > 0:
		var vals []string
		for _, u := range s.Unknown {
			vals = append(vals, fmt.Sprintf("%s (%d rows)", u.Status, u.Rows))
		}
		return cutoverCheck{Detail: detail + ", status values the state machine does not know: " + strings.Join(vals, ", "), Fix: "inboxctl migrate --db URL --map-status FROM=TO,..."}
	}
	return cutoverCheck{Holds: true, Detail: detail + ", nothing pending, no unknown status"}
}

func (f *cutoverFlags) retentionCheck(ctx context.Context, st *inbox.Store) cutoverCheck {
	need := max(f.redelivery, f.rollback)
	detail := fmt.Sprintf("retention %s, redelivery window %s, rollback window %s", days(f.retention), days(f.redelivery), days(f.rollback))
	if f.retention < need {
		return cutoverCheck{Detail: detail + ": the retention is shorter than " + days(need) + "; a message redelivered (or replayed after a switch back) later than the retention finds no row and is processed twice",
			Fix: "purge with --older-than " + days(need) + " or more, and pass it as --retention"}
	}
	if st != nil {
		runs, err := st.PurgeRuns(ctx)
		if err == nil {
			for i := len(runs) - 1; i >= 0; i-- {
				if runs[i].Window < need {
					return cutoverCheck{Detail: detail + ": but the last " + runs[i].String() + " used a shorter window",
						Fix: "run purge with --older-than " + days(need) + " or more (a scheduled purge's flags too)"}
				}
			}
			if len(runs) > 0 {
				detail += fmt.Sprintf("; %d recorded purge run(s), the last with window %s", len(runs), days(runs[len(runs)-1].Window))
			}
		}
	}
	return cutoverCheck{Holds: true, Detail: detail}
}

func (f *cutoverFlags) dlqReplayable(ctx context.Context, st *inbox.Store) cutoverCheck {
	if f.legacyDLQ == "" {
		return cutoverCheck{Detail: "no --legacy-dlq given", Fix: "give --broker URL --legacy-dlq QUEUE (or --skip " + checkDLQReplayable + " when the legacy bean has no dead-letter queue)"}
	}
	idFn, err := parseEventIDFrom(f.eventIDFrom)
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "correct --event-id-from"}
	}
	b, err := openBroker(f.broker, nil)
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "give the broker with --broker (or $" + envBroker + ")"}
	}
	defer b.Close()
	msgs, err := b.Browse(ctx, f.legacyDLQ, 0)
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "check --broker and --legacy-dlq"}
	}
	var missing []string
	ids := map[string]bool{}
	for i, m := range msgs {
		id := m.Header("eventId")
		if idFn != nil {
			id, _ = idFn(m)
		}
		if id == "" {
			name := m.BrokerMessageID
			if name == "" {
				name = fmt.Sprintf("#%d", i+1)
			}
			missing = append(missing, name)
			continue
		}
		ids[id] = true
	}
	detail := fmt.Sprintf("%s holds %d message(s)", f.legacyDLQ, len(msgs))
	if len(missing) > 0 {
		return cutoverCheck{Detail: fmt.Sprintf("%s, %d without an event id (%s): the new consumer dead-letters them MISSING_EVENT_ID instead of processing them", detail, len(missing), strings.Join(first(missing, 5), ", ")),
			Fix: "give --event-id-from the sources the new consumer runs with (e.g. header:JMSCorrelationID,json:invoiceNo), or replay those by hand"}
	}
	if st != nil && len(ids) > 0 {
		done := 0
		for id := range ids {
			e, err := st.Get(ctx, id, f.consumerName)
			if err == nil && e.Status == inboxkit.StatusProcessed {
				done++
			}
		}
		if done > 0 {
			detail += fmt.Sprintf(" (%d already PROCESSED by %s: a replay acknowledges them as duplicates)", done, f.consumerName)
		}
	}
	return cutoverCheck{Holds: true, Detail: detail + ", each with an event id: moved to the new consumer's queue, each is processed once"}
}

func (f *cutoverFlags) outboxHealthy(ctx context.Context, st *inbox.Store) cutoverCheck {
	ob, err := outbox.New(st.DB(), st.Dialect(), outbox.Config{Table: f.outboxTable})
	if err != nil {
		return cutoverCheck{Detail: err.Error(), Fix: "check --outbox-table"}
	}
	counts, err := ob.Stats(ctx, false)
	if err != nil {
		if ok, terr := st.Dialect().TableExists(ctx, st.DB(), f.outboxTable); terr == nil && !ok {
			return cutoverCheck{Holds: true, Detail: "no outbox table " + f.outboxTable + ": the consumer sends nothing through an outbox"}
		}
		return cutoverCheck{Detail: err.Error(), Fix: "check --db and --outbox-table"}
	}
	var pending, parked int64
	var oldest time.Time
	for _, c := range counts {
		switch c.Status {
		case outbox.StatusParked:
			parked += c.Rows
		case outbox.StatusPending:
			pending += c.Rows
			if c.Oldest != nil && (oldest.IsZero() || c.Oldest.Before(oldest)) {
				oldest = *c.Oldest
			}
		}
	}
	age := time.Duration(0)
	if !oldest.IsZero() {
		age = f.now().Sub(oldest).Round(time.Second)
	}
	detail := fmt.Sprintf("%d unsent, %d parked", pending, parked)
	if pending > 0 {
		detail += fmt.Sprintf(", the oldest unsent %s old", age)
	}
	switch {
	case parked > 0:
		return cutoverCheck{Detail: detail + ": parked messages wait for an operator", Fix: "inboxctl outbox list --status PARKED, then outbox retry (or drop) them"}
	case age > f.outboxAge:
		return cutoverCheck{Detail: fmt.Sprintf("%s: older than --outbox-max-age %s: the relays do not keep up or do not run", detail, f.outboxAge), Fix: "start or scale the relays (inboxctl relay), check the destination with inboxctl outbox stats"}
	case pending > f.outboxMax:
		return cutoverCheck{Detail: fmt.Sprintf("%s: more than --outbox-max-backlog %d", detail, f.outboxMax), Fix: "start or scale the relays (inboxctl relay)"}
	}
	return cutoverCheck{Holds: true, Detail: detail}
}

func writeCutover(w io.Writer, checks []cutoverCheck) {
	holding := 0
	counted := 0
	for _, c := range checks {
		mark := "✗"
		switch {
		case c.Skipped:
			mark = "-"
		case c.Holds:
			mark = "✓"
		}
		if !c.Skipped {
			counted++
			if c.Holds {
				holding++
			}
		}
		fmt.Fprintf(w, "%s %-26s %s\n", mark, c.Check, c.Detail)
		if !c.Holds && !c.Skipped && c.Fix != "" {
			fmt.Fprintf(w, "  %-26s fix: %s\n", "", c.Fix)
		}
	}
	if holding == counted {
		fmt.Fprintf(w, "all %d checks hold: the legacy bean may stop (docs/shadow.md, \"Switch over\")\n", counted)
		return
	}
	fmt.Fprintf(w, "%d of %d checks hold: do not stop the legacy bean yet\n", holding, counted)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// days writes a duration in days where it is whole days ("7d"), else as Go does.
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}
