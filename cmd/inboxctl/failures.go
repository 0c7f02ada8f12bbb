package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
)

// failureGroupsReport is the output of `inboxctl failures groups -o json`.
type failureGroupsReport struct {
	Table       string               `json:"table"`
	At          time.Time            `json:"at"`
	MaxAttempts int                  `json:"maxAttempts"`
	Consumer    string               `json:"consumer,omitempty"`
	Since       *time.Time           `json:"since,omitempty"`
	Archived    bool                 `json:"archived,omitempty"`
	Rows        int64                `json:"rows"`
	Groups      []inbox.FailureGroup `json:"groups"`
}

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
	var consumer, since string
	var archived bool
	c := &cobra.Command{
		Use:   "groups --db URL [--consumer C] [--since T] [--archived] [-o json]",
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
is. Exit 0 (with or without groups), or 2 when the database cannot be reached.`,
		Example: `  inboxctl failures groups --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl failures groups --db sqlite:./inbox.db --consumer invoice-consumer --since 24h -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, _, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer st.DB().Close()
			r, err := failureGroups(ctx, st, consumer, since, archived, time.Now().UTC())
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
	return c
}

// failureGroups is the report of 'failures groups' (and the console's
// /api/failures/groups): the failed rows of st grouped, for one consumer
// ("" all), changed since (a --since value, "" all), the archived ones
// instead of the others when archived, at now.
func failureGroups(ctx context.Context, st *inbox.Store, consumer, since string, archived bool, now time.Time) (failureGroupsReport, error) {
	r := failureGroupsReport{Table: st.Config().Table, At: now, MaxAttempts: st.Config().Retry.MaxAttempts, Consumer: consumer, Archived: archived}
	filter := inbox.FailureFilter{Consumer: consumer, Archived: archived}
	if since != "" {
		t, err := sinceTime(since, r.At)
		if err != nil {
			return r, err
		}
		r.Since, filter.Since = &t, t
	}
	var err error
	if r.Groups, err = st.FailureGroups(ctx, filter); err != nil {
		return r, &exitError{code: exitUsage, err: fmt.Errorf("%v\n\tcheck that the database runs and 'inboxctl migrate' created the table", err)}
	}
	for _, g := range r.Groups {
		r.Rows += g.Rows
	}
	return r, nil
}

// newFailureArchiveCmd is failures archive (archive) or failures restore.
func newFailureArchiveCmd(archive bool) *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var o outputFlags
	var group, consumer string
	name, short := "restore", "Show an archived failure group again"
	action, done := "failures-restore", "restored"
	long := `restore undoes 'inboxctl failures archive': the archived rows of the group (listed by
'inboxctl failures groups --archived', same id) are shown by 'failures groups' and
selected by 'dlq replay --all', '--group' and '--since' again. It changes no status.
The restore is recorded with the operator in INBOXKIT_OPERATOR_ACTION. Exit 2 for an
unknown group.`
	if archive {
		name, short = "archive", "Hide a failure group from failures groups and from bulk replays"
		action, done = "failures-archive", "archived"
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
			do := st.RestoreGroup
			if archive {
				do = st.ArchiveGroup
			}
			g, ids, err := do(ctx, group, inbox.FailureFilter{Consumer: consumer})
			if errors.Is(err, inbox.ErrNoSuchGroup) {
				return usageErr("%v", err)
			}
			recErr := error(nil)
			if len(ids) > 0 {
				recErr = recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: op.who(), Action: action, EventIDs: ids, Rows: int64(len(ids)),
					Detail: fmt.Sprintf("--group %s (%s %s %s)", group, g.ConsumerName, g.Status, orDash(g.ReasonCode))}, st.RecordAction)
			}
			if asJSON {
				if werr := writeJSON(cmd.OutOrStdout(), map[string]any{"group": g, done: ids, "error": errText(err)}); werr != nil && err == nil {
					err = werr
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s group %s (%s %s %s, %s): %d row(s)\n", done, group, g.ConsumerName, g.Status, orDash(g.ReasonCode), orDash(g.Fingerprint), len(ids))
			}
			if err != nil {
				return err
			}
			return recErr
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
	fmt.Fprintln(tw, "group\tconsumer\tstatus\treason\tclass\trows\treplays\tfirst\tlast\terror\t")
	for _, g := range r.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n", g.ID, g.ConsumerName, g.Status, orDash(g.ReasonCode), orDash(g.ErrorClass),
			g.Rows, g.Replays, g.FirstFailed.UTC().Format(time.RFC3339), g.LastFailed.UTC().Format(time.RFC3339), orDash(g.Fingerprint))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d failed row(s) in %d group(s)\n", r.Rows, len(r.Groups))
}
