package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/golden"
)

func newShadowDiffCmd() *cobra.Command {
	var legacyURL, shadowURL, copyURL, configPath, reportPath string
	var calibrate, write, legacyEvents bool
	var samples int
	var o outputFlags
	c := &cobra.Command{
		Use:   "diff --legacy URL --shadow URL --config FILE [-o json]",
		Short: "Compare the legacy side's effects with the shadow's per event: identical, expected (a named rule) or unexpected (exit 1)",
		Long: `shadow diff compares, per event (event id, or a business key), what the legacy consumer
left in its database (business rows, its calls and messages as recorded, its dead letters)
with what the shadow consumer left in its own, and sorts every event into identical, an
expected difference (a built-in rule: duplicate-suppressed, rejection-not-retried,
poison-dead-lettered-at-once, sent-once-not-per-retry; or one of the config's rules) or
unexpected. The config (JSON) names the tables, keys, columns, noise to scrub and rules:
docs/shadow.md, "Reconcile".

Exit 0 when no event is unexpected, 1 naming the unexpected events and their columns.

--calibrate compares the legacy side with a second legacy copy (--legacy-copy) that
consumed the same messages: every column that differs is noise (timestamps, generated
ids), printed as scrub entries for the config (--write puts them there).

--legacy-events compares only the events the legacy side has a row of: the reverse
shadow's diff, where the legacy bean on the copy saw only the messages since it
started and production (--shadow) holds the events before them too (docs/shadow.md,
"Switch over"). The events left out are counted as skipped.`,
		Example: `  inboxctl shadow diff --legacy postgres://app@db/legacy --shadow postgres://app@db/shadow --config shadow.json
  inboxctl shadow diff --legacy postgres://app@db/legacy --shadow postgres://app@db/shadow --config shadow.json -o json --report diff.json
  inboxctl shadow diff --calibrate --legacy postgres://app@db/legacy --legacy-copy postgres://app@db/legacy2 --config shadow.json --write`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			switch {
			case configPath == "":
				return usageErr("--config FILE is required: the tables, keys and columns to compare (docs/shadow.md, \"Reconcile\")")
			case legacyURL == "":
				return usageErr("--legacy URL is required: the legacy consumer's database")
			case calibrate && copyURL == "":
				return usageErr("--calibrate needs --legacy-copy URL: a second legacy copy that consumed the same messages")
			case calibrate && shadowURL != "":
				return usageErr("--calibrate compares --legacy with --legacy-copy: leave out --shadow")
			case !calibrate && shadowURL == "":
				return usageErr("--shadow URL is required: the shadow consumer's database")
			case !calibrate && (copyURL != "" || write):
				return usageErr("--legacy-copy and --write belong to --calibrate")
			case calibrate && legacyEvents:
				return usageErr("--legacy-events belongs to a diff, not to --calibrate (the legacy copies saw the same messages)")
			}
			raw, err := os.ReadFile(configPath)
			if err != nil {
				return usageErr("--config: %v", err)
			}
			cfg, err := golden.ParseReconcileConfig(raw)
			if err != nil {
				return usageErr("--config %s: %v", configPath, err)
			}
			ctx := cmd.Context()
			other := shadowURL
			if calibrate {
				other = copyURL
			}
			ldb, lt, err := openDB(ctx, legacyURL)
			if err != nil {
				return err
			}
			defer ldb.Close()
			sdb, st, err := openDB(ctx, other)
			if err != nil {
				return err
			}
			defer sdb.Close()
			rep, err := golden.Reconcile(ctx, cfg,
				golden.Side{DB: ldb, Dialect: lt.Dialect, Name: lt.Display},
				golden.Side{DB: sdb, Dialect: st.Dialect, Name: st.Display},
				golden.ReconcileOptions{Samples: samples, Calibrate: calibrate, LegacyEvents: legacyEvents})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if reportPath != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(reportPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--report: %w", err)
				}
			}
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				rep.WriteText(out, cfg)
			}
			if write && len(rep.Noise) > 0 {
				if err := writeScrub(configPath, raw, rep.Scrub); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d scrub entries to %s\n", len(rep.Scrub), configPath)
			}
			if rep.Counts.Unexpected > 0 {
				if asJSON { // the text report named them already
					fmt.Fprintf(cmd.ErrOrStderr(), "unexpected differences in %d events: %s\n", rep.Counts.Unexpected, unexpectedSummary(rep))
				}
				return errFindings
			}
			return nil
		},
	}
	c.Flags().StringVar(&legacyURL, "legacy", "", "the legacy consumer's database URL")
	c.Flags().StringVar(&shadowURL, "shadow", "", "the shadow consumer's database URL")
	c.Flags().StringVar(&copyURL, "legacy-copy", "", "with --calibrate: a second legacy copy's database URL")
	c.Flags().StringVar(&configPath, "config", "", "the reconciliation config (JSON; docs/shadow.md)")
	c.Flags().StringVar(&reportPath, "report", "", "also write the JSON report to this file (what cutover check --shadow-report reads)")
	c.Flags().BoolVar(&calibrate, "calibrate", false, "compare --legacy with --legacy-copy and report the noise columns as scrub entries")
	c.Flags().BoolVar(&write, "write", false, "with --calibrate: add the noise columns to the config's \"scrub\" list")
	c.Flags().BoolVar(&legacyEvents, "legacy-events", false, "compare only the events the legacy side has a row of (the reverse shadow: docs/shadow.md)")
	c.Flags().IntVar(&samples, "samples", 10, "events shown per category with their differences")
	o.register(c)
	return c
}

// unexpectedSummary names the first unexpected events with their columns.
func unexpectedSummary(rep *golden.ReconcileReport) string {
	var parts []string
	for _, s := range rep.Samples["unexpected"] {
		var cols []string
		for _, d := range s.Differences {
			col := d.Table + "." + d.Column
			if !slices.Contains(cols, col) {
				cols = append(cols, col)
			}
		}
		parts = append(parts, s.Event+" ("+strings.Join(cols, ", ")+")")
	}
	if n := rep.Counts.Unexpected - int64(len(parts)); n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more (-o json lists up to 1000)", n))
	}
	return strings.Join(parts, ", ")
}

// writeScrub sets the config file's "scrub" list, keeping its other
// fields as they are.
func writeScrub(path string, raw []byte, scrub []string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("--write: %w", err)
	}
	b, err := json.Marshal(scrub)
	if err != nil {
		return err
	}
	m["scrub"] = b
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("--write: %w", err)
	}
	return nil
}
