package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

// purgeReport is what purge -o json prints. Rows counts the rows deleted (or,
// with dryRun, the rows that would be deleted).
type purgeReport struct {
	Database        string  `json:"database"`
	Table           string  `json:"table"`
	OlderThan       string  `json:"olderThan"`
	DryRun          bool    `json:"dryRun"`
	Rows            int64   `json:"rows"`
	DurationSeconds float64 `json:"durationSeconds"`
	Interrupted     bool    `json:"interrupted,omitempty"`
	// OutboxRows counts the SENT and DROPPED outbox rows deleted (or, with
	// dryRun, that would be); absent without an outbox table.
	OutboxRows *int64 `json:"outboxRows,omitempty"`
}

func newPurgeCmd() *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var olderThan time.Duration
	var dryRun bool
	var batch int
	var maxRate int
	var o outputFlags
	var of outboxFlags
	var outboxOlderThan time.Duration
	c := &cobra.Command{
		Use:   "purge --db URL --older-than DURATION [--dry-run] [-o json]",
		Short: "Delete terminal inbox rows older than a retention window",
		Long: `purge deletes terminal inbox rows (PROCESSED, REJECTED, DEAD_LETTERED) whose terminal
time (PROCESSED_AT; CREATED_AT where a legacy consumer left none) is older than
--older-than, in batches of --batch-size rows, each in its own short transaction.
TECHNICAL_FAILURE rows are never deleted. A run that deleted rows is recorded in
INBOXKIT_HISTORY (time, cutoff, window, horizon, rows): 'inboxctl check' ties a
duplicate it let through to it (purged-then-redelivered).

Purge runs beside live consumers: it deletes at most --max-rows-per-second rows
a second (pausing after each batch), so that the write-ahead log it writes
leaves the consumers their throughput. --max-rows-per-second -1 deletes batch
after batch without pauses, for a maintenance window.

The redelivery horizon guard: a window shorter than --horizon (default 168h = 7 days,
how long after an event the brokers and producers may still deliver it again) is
refused with exit 2, because a row deleted too early lets a late duplicate be
processed a second time.

Where the outbox table exists, its SENT and DROPPED rows written longer ago than
--outbox-older-than (default 7d) are deleted too, and the keys left with nothing;
PENDING and PARKED rows never are. Lower --horizon only if your brokers really cannot
redeliver that late. Durations take days or Go syntax: 30d, 1d12h, 720h.`,
		Example: `  inboxctl purge --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --older-than 720h --dry-run
  inboxctl purge --db sqlite:./inbox.db --older-than 720h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return usageErr("purge needs --older-than DURATION, a positive retention window such as 720h (30 days)")
			}
			if f.horizon <= 0 {
				return usageErr("--horizon must be positive (got %s); it defaults to 168h", f.horizon)
			}
			if maxRate == 0 {
				return usageErr("--max-rows-per-second must not be 0: a positive cap (default %d) or -1 for none", inbox.DefaultPurgeMaxRowsPerSecond)
			}
			j, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, t, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			start := time.Now()
			n, err := st.Purge(ctx, inbox.PurgeOptions{OlderThan: olderThan, BatchSize: batch, MaxRowsPerSecond: maxRate, DryRun: dryRun})
			rep := purgeReport{Database: t.Display, Table: st.Config().Table, OlderThan: olderThan.String(), DryRun: dryRun,
				Rows: n, DurationSeconds: time.Since(start).Seconds()}
			if errors.Is(err, inbox.ErrWindowTooShort) {
				return usageErr("refusing to purge: --older-than %s is shorter than the redelivery horizon %s; a late redelivery of a purged event would be processed twice.\n\tchoose --older-than %s or more (or lower --horizon if your brokers cannot redeliver that late)", olderThan, f.horizon, f.horizon)
			}
			if err != nil && ctx.Err() != nil && !dryRun {
				if j {
					rep.Interrupted = true
					_ = writeJSON(cmd.OutOrStdout(), rep)
				}
				return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: deleted %d terminal row(s) older than %s from %s before the interrupt (each batch is committed; run purge again to go on)", n, olderThan, st.Config().Table)}
			}
			if err != nil {
				return err
			}
			if !dryRun && n > 0 {
				if err := recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: op.who(), Action: "purge", Rows: n,
					Detail: "terminal rows older than " + olderThan.String() + ", horizon " + f.horizon.String()}, st.RecordAction); err != nil {
					return err
				}
			}
			if rep.OutboxRows, err = purgeOutbox(ctx, st.DB(), t, of, outbox.PurgeOptions{OlderThan: outboxOlderThan, BatchSize: batch, DryRun: dryRun}); err != nil {
				return err
			}
			if j {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			took := time.Duration(rep.DurationSeconds * float64(time.Second)).Round(time.Millisecond)
			if dryRun {
				fmt.Fprintf(cmd.OutOrStdout(), "dry run: %d terminal row(s) older than %s would be deleted from %s on %s (counted in %s)\n", n, olderThan, st.Config().Table, t.Display, took)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d terminal row(s) older than %s from %s on %s in %s\n", n, olderThan, st.Config().Table, t.Display, took)
			}
			if rep.OutboxRows != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %d SENT or DROPPED outbox row(s) older than %s in %s\n", map[bool]string{true: "dry run: would delete", false: "deleted"}[dryRun], *rep.OutboxRows, outboxOlderThan, of.table)
			}
			return nil
		},
	}
	f.register(c)
	op.register(c)
	c.Flags().Var(dayDuration{&olderThan}, "older-than", "retention window: delete terminal rows finished longer ago than this (required, e.g. 30d or 720h)")
	f.horizon = 7 * 24 * time.Hour
	c.Flags().Var(dayDuration{&f.horizon}, "horizon", "redelivery horizon: the shortest window allowed (e.g. 7d)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted, delete nothing")
	c.Flags().IntVar(&batch, "batch-size", 1000, "rows deleted per transaction")
	of.register(c)
	outboxOlderThan = 7 * 24 * time.Hour
	c.Flags().Var(dayDuration{&outboxOlderThan}, "outbox-older-than", "delete SENT and DROPPED outbox rows written longer ago than this (receivers deduplicate in their own inbox; the rows are kept for audit only)")
	c.Flags().IntVar(&maxRate, "max-rows-per-second", inbox.DefaultPurgeMaxRowsPerSecond, "cap on the rows deleted per second, so consumers running meanwhile keep their throughput (-1: no cap)")
	o.register(c)
	return c
}
