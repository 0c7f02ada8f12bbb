package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// failureGroupsReport is the output of `inboxctl failures groups -o json`.
type failureGroupsReport struct {
	Table       string            `json:"table"`
	At          time.Time         `json:"at"`
	MaxAttempts int               `json:"maxAttempts"`
	Consumer    string            `json:"consumer,omitempty"`
	Since       *time.Time        `json:"since,omitempty"`
	Archived    bool              `json:"archived,omitempty"`
	Rows        int64             `json:"rows"`
	Groups      []failureGroupRow `json:"groups"`
	// DLQ is the dead-letter queue joined (--broker --dlq), nil without.
	DLQ *dlqJoin `json:"dlq,omitempty"`
}

// failureGroupRow is a failure group of the report with its dead letters
// on the joined queue.
type failureGroupRow struct {
	inbox.FailureGroup
	// DLQMessages is how many dead letters of the group's rows the browse
	// of the joined queue saw (nil: no queue joined).
	DLQMessages *int `json:"dlqMessages,omitempty"`
}

// dlqJoin is what the browse of the dead-letter queue of 'failures groups
// --broker --dlq' saw. Browsed = Grouped + Ungrouped + NotEnvelope.
type dlqJoin struct {
	Queue string `json:"queue"`
	// Limit is --browse; LimitReached says the queue held more than Limit
	// messages: only Limit were counted, so every count is a lower bound.
	Limit        int  `json:"limit"`
	LimitReached bool `json:"limitReached"`
	Browsed      int  `json:"browsed"`
	// Depth is the queue's depth asked before the read, where the broker
	// tells it without a browse (RabbitMQ over AMQP 0-9-1, JetStream; nil
	// elsewhere). A browse there reads no more than the unsettled
	// messages the broker hands one consumer, so a Depth above Browsed
	// says the counts are lower bounds too.
	Depth *int `json:"depth,omitempty"`
	// LowerBounds: the queue held more than was read (LimitReached, or
	// Depth above Browsed); each count is at least what it says.
	LowerBounds bool `json:"lowerBounds"`
	// Grouped are the inboxkit dead letters whose (consumer, event id)
	// row is in a listed group; Ungrouped the inboxkit dead letters whose
	// event has no row in any listed group (processed since, archived,
	// another consumer than --consumer, changed before --since, deleted);
	// NotEnvelope the messages without the inboxkit envelope (the broker
	// or another program put them there).
	Grouped     int `json:"grouped"`
	Ungrouped   int `json:"ungrouped"`
	NotEnvelope int `json:"notEnvelope"`
}

// dlqSource is the dead-letter queue a failure groups report joins: none
// where b is nil.
type dlqSource struct {
	b      *broker
	queue  string
	browse int
}

// defaultGroupsBrowse is the default of failures groups --browse.
const defaultGroupsBrowse = 10000

func newFailuresCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "failures",
		Short: "Failed rows grouped by cause",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newFailureGroupsCmd(), newFailureArchiveCmd(true), newFailureArchiveCmd(false))
	return c
}

func newFailureGroupsCmd() *cobra.Command {
	var f dbFlags
	var o outputFlags
	var consumer, since, brokerURL, dlqName string
	var archived bool
	var browse int
	c := &cobra.Command{
		Use:   "groups --db URL [--consumer C] [--since T] [--archived] [--broker URL --dlq QUEUE [--browse N]] [-o json]",
		Short: "Group DEAD_LETTERED, REJECTED and stuck rows by consumer, status, reason, class and error",
		Long: `failures groups groups the failed rows — DEAD_LETTERED, REJECTED, and TECHNICAL_FAILURE
at the backout threshold (--max-attempts) — by consumer, status, reason code, error class
and the fingerprint of the last error (ids, numbers and quoted values scrubbed, so
"customer K-100 unknown" and "customer K-200 unknown" are one group). Each group shows
its rows, its first and last failure, how often its rows were replayed, an example
error, and its id (12 hex digits, stable: 'inboxctl dlq replay --group ID' takes it).
The largest group comes first.

--since keeps the rows that changed at or after a time (2026-01-31, RFC 3339) or a
duration ago (24h, 7d). Archived rows ('inboxctl failures archive') are left out;
--archived lists them instead, by group ('failures restore' takes the ids). It reads a table inboxctl migrate has not upgraded yet as it
is.

--broker URL --dlq QUEUE joins the dead-letter queue: up to --browse N (default
10000) of its messages are read, each inboxkit dead letter finds its row by the
envelope's consumer and event id, and each group shows how many of its dead
letters are on the queue (column DLQ, dlqMessages in JSON). A line below counts
the dead letters whose event has no row in the groups listed and the messages
that are not inboxkit dead letters. When the queue holds more than N messages the
counts are lower bounds, and the line says so. On ActiveMQ a queue browser reads
them; on RabbitMQ and JetStream the messages are received and handed back
unchanged, so they count as redelivered there (as with 'dlq list'); the queue's
depth is asked first, and when it is above what was read the line says the
counts are lower bounds.

Exit 0 (with or without groups), or 2 when the database or broker cannot be reached.`,
		Example: `  inboxctl failures groups --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl failures groups --db sqlite:./inbox.db --consumer invoice-consumer --since 24h -o json
  inboxctl failures groups --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --broker stomp://127.0.0.1:61613 --dlq DLQ.invoices`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			src := dlqSource{queue: dlqName, browse: browse}
			switch {
			case dlqName == "" && (brokerURL != "" || cmd.Flags().Changed("browse")):
				return usageErr("failures groups --broker and --browse need --dlq QUEUE, the dead-letter queue to join (e.g. DLQ.invoices)")
			case browse < 1:
				return usageErr("--browse %d: give how many messages of the dead-letter queue to read, 1 or more (default %d)", browse, defaultGroupsBrowse)
			}
			ctx := cmd.Context()
			if dlqName != "" {
				b, err := openLastingBroker(brokerURL, "failures groups")
				if err != nil {
					return err
				}
				defer b.Close()
				src.b = b
			}
			st, _, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer st.DB().Close()
			r, err := failureGroups(ctx, st, consumer, since, archived, time.Now().UTC(), src)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			printFailureGroups(cmd.OutOrStdout(), r)
			return nil
		},
	}
	f.register(c)
	f.registerAttempts(c)
	o.register(c)
	c.Flags().StringVar(&consumer, "consumer", "", "only this consumer's rows")
	c.Flags().StringVar(&since, "since", "", "only rows changed since a time (2026-01-31, RFC 3339) or a duration ago (24h, 7d)")
	c.Flags().BoolVar(&archived, "archived", false, "list the archived failures instead")
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL of --dlq (default $"+envBroker+")")
	c.Flags().StringVar(&dlqName, "dlq", "", "dead-letter queue whose messages each group counts")
	c.Flags().IntVar(&browse, "browse", defaultGroupsBrowse, "read at most this many messages of --dlq")
	return c
}

// failureGroups is the report of 'failures groups' (and the console's
// /api/failures/groups): the failed rows of st grouped, for one consumer
// ("" all), changed since (a --since value, "" all), the archived ones
// instead of the others when archived, at now; with the dead letters on
// the queue of src counted (joinDLQ) where src has a broker.
func failureGroups(ctx context.Context, st *inbox.Store, consumer, since string, archived bool, now time.Time, src dlqSource) (failureGroupsReport, error) {
	r := failureGroupsReport{Table: st.Config().Table, At: now, MaxAttempts: st.Config().Retry.MaxAttempts, Consumer: consumer, Archived: archived}
	filter := inbox.FailureFilter{Consumer: consumer, Archived: archived}
	if since != "" {
		t, err := sinceTime(since, r.At)
		if err != nil {
			return r, err
		}
		r.Since, filter.Since = &t, t
	}
	groups, err := st.FailureGroups(ctx, filter)
	if err != nil {
		return r, &exitError{code: exitUsage, err: fmt.Errorf("%v\n\tcheck that the database runs and 'inboxctl migrate' created the table", err)}
	}
	r.Groups = make([]failureGroupRow, len(groups))
	for i, g := range groups {
		r.Groups[i].FailureGroup = g
		r.Rows += g.Rows
	}
	if src.b != nil {
		return r, joinDLQ(ctx, st, filter, src, &r)
	}
	return r, nil
}

// joinDLQ browses up to src.browse messages of src.queue and counts them
// into r: per group the inboxkit dead letters whose (consumer, event id)
// row is in it (inbox.Store.GroupsOf, rows of the same filter), the other
// dead letters, the messages that are not inboxkit dead letters. A dead
// letter whose envelope names no consumer matches its event id's row when
// exactly one consumer's row has it.
func joinDLQ(ctx context.Context, st *inbox.Store, filter inbox.FailureFilter, src dlqSource, r *failureGroupsReport) error {
	if err := src.b.requireQueue(ctx, src.queue); err != nil {
		return err
	}
	j := &dlqJoin{Queue: src.queue, Limit: src.browse}
	if src.b.t.Kind != target.STOMP { // ActiveMQ's depth is a browse itself
		if n, atLeast, err := src.b.Depth(ctx, src.queue); err == nil && !atLeast {
			j.Depth = &n
		}
	}
	ms, err := src.b.Browse(ctx, src.queue, src.browse+1) // one more tells whether the queue holds more
	if err != nil {
		return err
	}
	if len(ms) > src.browse {
		ms, j.LimitReached = ms[:src.browse], true
	}
	j.Browsed = len(ms)
	j.LowerBounds = j.LimitReached || (j.Depth != nil && *j.Depth > j.Browsed)
	type key struct{ consumer, event string }
	var letters []key
	var ids []string
	seen := map[string]bool{}
	for _, m := range ms {
		env, err := dlq.Parse(m.Headers, m.Body)
		if err != nil {
			j.NotEnvelope++
			continue
		}
		letters = append(letters, key{env.Consumer, env.EventID}) // no event id: no row, not grouped
		if env.EventID != "" && !seen[env.EventID] {
			seen[env.EventID] = true
			ids = append(ids, env.EventID)
		}
	}
	rows, err := st.GroupsOf(ctx, filter, ids)
	if err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("%v\n\tcheck that the database runs", err)}
	}
	group := map[key]string{}
	byEvent := map[string][]string{} // event id -> the groups of its rows, one per consumer
	for _, x := range rows {
		group[key{x.ConsumerName, x.EventID}] = x.Group
		byEvent[x.EventID] = append(byEvent[x.EventID], x.Group)
	}
	counts := map[string]int{}
	for _, l := range letters {
		g := group[l]
		if l.consumer == "" && len(byEvent[l.event]) == 1 {
			g = byEvent[l.event][0]
		}
		counts[g]++
	}
	for i := range r.Groups {
		n := counts[r.Groups[i].ID]
		r.Groups[i].DLQMessages = &n
		j.Grouped += n
	}
	j.Ungrouped = len(letters) - j.Grouped // a group listed a moment ago is gone: not listed either
	r.DLQ = j
	return nil
}

// newFailureArchiveCmd is failures archive (archive) or failures restore.
func newFailureArchiveCmd(archive bool) *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var o outputFlags
	var group, consumer string
	name, short := "restore", "Show an archived failure group again"
	long := `restore undoes 'inboxctl failures archive': the archived rows of the group (listed by
'inboxctl failures groups --archived', same id) are shown by 'failures groups' and
selected by 'dlq replay --all', '--group' and '--since' again. It changes no status.
The restore is recorded with the operator in INBOXKIT_OPERATOR_ACTION. Exit 2 for an
unknown group.`
	if archive {
		name, short = "archive", "Hide a failure group from failures groups and from bulk replays"
		long = `archive hides the rows of a failure group (an id 'inboxctl failures groups' shows):
'failures groups' leaves them out, and 'dlq replay --all', '--group', '--reason' and
'--since' do not select their dead letters, until 'inboxctl failures restore'. It
marks the group's rows as they are now (ARCHIVED_AT): a failure of the same cause
that comes later shows as the group again. Their dead letters stay on the queue and
their status is unchanged; a replay of one by --event-id unarchives its row. The
archive is recorded with the operator in INBOXKIT_OPERATOR_ACTION. Exit 2 for an
unknown group.`
	}
	c := &cobra.Command{
		Use:     name + " --db URL --group G [--consumer C] [-o json]",
		Short:   short,
		Long:    long,
		Example: "  inboxctl failures " + name + " --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --group 3f2a9c0d1e4b --operator alice",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			if group == "" {
				return usageErr("failures %s needs --group G, a failure group's id ('inboxctl failures groups%s' lists them)", name, map[bool]string{true: "", false: " --archived"}[archive])
			}
			ctx := cmd.Context()
			st, _, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			rep, err := archiveGroup(ctx, st, archive, group, consumer, op.who(), "", cmd.ErrOrStderr())
			if errors.Is(err, inbox.ErrNoSuchGroup) {
				return usageErr("%v", err)
			}
			if asJSON {
				if werr := writeJSON(cmd.OutOrStdout(), rep); werr != nil && err == nil {
					err = werr
				}
			} else {
				g := rep.Group
				fmt.Fprintf(cmd.OutOrStdout(), "%s group %s (%s %s %s, %s): %d row(s)\n", rep.done(), group, g.ConsumerName, g.Status, orDash(g.ReasonCode), orDash(g.Fingerprint), len(rep.IDs))
			}
			return err
		},
	}
	f.register(c)
	f.registerAttempts(c)
	op.register(c)
	o.register(c)
	c.Flags().StringVar(&group, "group", "", "the failure group's id (required)")
	c.Flags().StringVar(&consumer, "consumer", "", "the consumer the groups were listed for")
	return c
}

// archiveReport is what 'failures archive' and 'failures restore' print
// with -o json: the group, the event ids of the rows archived (restored)
// under "archived" ("restored"), and the error that stopped it part-way.
type archiveReport struct {
	Archive bool
	Group   inbox.FailureGroup
	IDs     []string
	Err     string
}

func (r archiveReport) done() string {
	if r.Archive {
		return "archived"
	}
	return "restored"
}

func (r archiveReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"group": r.Group, r.done(): r.IDs, "error": r.Err})
}

// archiveGroup archives (restores, archive false) failure group id of
// consumer ("" any) and records it for operator, its detail prefixed by
// via ("" from the command line): 'inboxctl failures archive|restore',
// for the command and the console. An unknown group is
// inbox.ErrNoSuchGroup; an action done but not recorded is errFindings,
// said on stderr.
func archiveGroup(ctx context.Context, st *inbox.Store, archive bool, id, consumer, operator, via string, stderr io.Writer) (archiveReport, error) {
	rep := archiveReport{Archive: archive}
	do, action := st.RestoreGroup, "failures-restore"
	if archive {
		do, action = st.ArchiveGroup, "failures-archive"
	}
	g, ids, err := do(ctx, id, inbox.FailureFilter{Consumer: consumer})
	if errors.Is(err, inbox.ErrNoSuchGroup) {
		return rep, err
	}
	rep.Group, rep.IDs, rep.Err = g, ids, errText(err)
	recErr := error(nil)
	if len(ids) > 0 {
		recErr = recorded(ctx, stderr, inbox.Action{Operator: operator, Action: action, EventIDs: ids, Rows: int64(len(ids)),
			Detail: fmt.Sprintf("%s--group %s (%s %s %s)", via, id, g.ConsumerName, g.Status, orDash(g.ReasonCode))}, st.RecordAction)
	}
	if err != nil {
		return rep, err
	}
	return rep, recErr
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sinceTime parses --since: a time (UTC where no zone is given) or a
// duration before now.
func sinceTime(v string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	if d, err := parseDays(v); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErr("--since %q: give a time (2026-01-31, 2026-01-31 08:00:00 in UTC, RFC 3339) or a duration ago (24h, 7d)", v)
}

func printFailureGroups(w io.Writer, r failureGroupsReport) {
	what := "failures"
	if r.Archived {
		what = "archived failures"
	}
	fmt.Fprintf(w, "%s in %s at %s (technical failures at %d attempts or more)\n\n", what, r.Table, r.At.Format(time.RFC3339), r.MaxAttempts)
	if len(r.Groups) == 0 {
		fmt.Fprintln(w, "no failed rows")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	dlqHead := ""
	if r.DLQ != nil {
		dlqHead = "DLQ\t"
	}
	fmt.Fprintln(tw, "group\tconsumer\tstatus\treason\tclass\trows\treplays\t"+dlqHead+"first\tlast\terror\t")
	for _, g := range r.Groups {
		dlqCol := ""
		if g.DLQMessages != nil {
			dlqCol = strconv.Itoa(*g.DLQMessages) + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s%s\t%s\t%s\t\n", g.ID, g.ConsumerName, g.Status, orDash(g.ReasonCode), orDash(g.ErrorClass),
			g.Rows, g.Replays, dlqCol, g.FirstFailed.UTC().Format(time.RFC3339), g.LastFailed.UTC().Format(time.RFC3339), orDash(g.Fingerprint))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d failed row(s) in %d group(s)\n", r.Rows, len(r.Groups))
	if r.DLQ != nil {
		fmt.Fprintln(w, r.DLQ.Summary())
	}
}

// Summary is the line under the groups that tells what the browse of the
// queue saw.
func (j *dlqJoin) Summary() string {
	s := fmt.Sprintf("dead-letter queue %s: %d message(s) read, %d in the groups above, %d inboxkit dead letter(s) whose event has no row in them, %d not inboxkit dead letter(s)",
		j.Queue, j.Browsed, j.Grouped, j.Ungrouped, j.NotEnvelope)
	switch {
	case j.LimitReached:
		s += fmt.Sprintf("\n\tthe queue holds more than --browse %d: the counts are lower bounds (raise --browse to count them all)", j.Limit)
	case j.LowerBounds:
		s += fmt.Sprintf("\n\tthe queue held %d message(s) but the broker handed %d to the browse (it hands one consumer a bounded number of unsettled messages): the counts are lower bounds", *j.Depth, j.Browsed)
	}
	return s
}
