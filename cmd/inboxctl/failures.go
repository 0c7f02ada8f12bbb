package main

import (
	"context"
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
	c.AddCommand(newFailureGroupsCmd())
	return c
}

func newFailureGroupsCmd() *cobra.Command {
	var f dbFlags
	var o outputFlags
	var consumer, since string
	c := &cobra.Command{
		Use:   "groups --db URL [--consumer C] [--since T] [-o json]",
		Short: "Group DEAD_LETTERED, REJECTED and stuck rows by consumer, status, reason, class and error",
		Long: `failures groups groups the failed rows — DEAD_LETTERED, REJECTED, and TECHNICAL_FAILURE
at the backout threshold (--max-attempts) — by consumer, status, reason code, error class
and the fingerprint of the last error (ids, numbers and quoted values scrubbed, so
"customer K-100 unknown" and "customer K-200 unknown" are one group). Each group shows
its rows, its first and last failure, how often its rows were replayed, an example
error, and its id (12 hex digits, stable: 'inboxctl dlq replay --group ID' takes it).
The largest group comes first.

--since keeps the rows that changed at or after a time (2026-01-31, RFC 3339) or a
duration ago (24h, 7d). It reads a table inboxctl migrate has not upgraded yet as it
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
			r, err := failureGroups(ctx, st, consumer, since, time.Now().UTC())
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
	return c
}

// failureGroups is the report of 'failures groups' (and the console's
// /api/failures/groups): the failed rows of st grouped, for one consumer
// ("" all), changed since (a --since value, "" all), at now.
func failureGroups(ctx context.Context, st *inbox.Store, consumer, since string, now time.Time) (failureGroupsReport, error) {
	r := failureGroupsReport{Table: st.Config().Table, At: now, MaxAttempts: st.Config().Retry.MaxAttempts, Consumer: consumer}
	filter := inbox.FailureFilter{Consumer: consumer}
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
	fmt.Fprintf(w, "failures in %s at %s (technical failures at %d attempts or more)\n\n", r.Table, r.At.Format(time.RFC3339), r.MaxAttempts)
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
