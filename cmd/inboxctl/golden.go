package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

func newGoldenCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "golden",
		Short: "Verify or approve the invoice consumers' approval (golden-master) cases",
		Long: `golden plays approval cases (a directory with a "scenario" file and approved transcripts)
through the legacy invoice consumer and the refactored one, and compares each
transcript with approved.legacy.txt and approved.refactored.txt.`,
		Example: `  inboxctl golden verify testdata/golden
  inboxctl golden approve testdata/golden/producer-resend`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageErr("golden needs a subcommand: verify DIR or approve DIR")
		},
	}
	var backends string
	verify := &cobra.Command{
		Use:   "verify DIR",
		Short: "Play the cases under DIR and compare with the approved files (exit 1 on a difference)",
		Long: `verify plays every case under DIR (or DIR itself when it is a case) for both consumers
and compares the transcripts with the approved files. For a difference it writes
received.<label>.txt beside the approved file, prints the diff and exits 1. It never
writes approved files.`,
		Example: `  inboxctl golden verify testdata/golden
  inboxctl golden verify testdata/golden --backends sqlite,postgres`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, err := invoicegolden.Verify(cmd.Context(), args[0], backendOpts(backends)...)
			return reportGolden(cmd, args[0], "verified", ms, err)
		},
	}
	approve := &cobra.Command{
		Use:   "approve DIR",
		Short: "Play the cases under DIR and write their approved files",
		Long: `approve plays every case under DIR and writes the transcripts as approved.legacy.txt
and approved.refactored.txt (from the first backend), then checks the other backends
against them. Read the diff (git diff) before you commit: approving is the decision.
It refuses to run with CI=true.`,
		Example: `  inboxctl golden approve testdata/golden/producer-resend
  git diff testdata/golden`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, err := invoicegolden.Approve(cmd.Context(), args[0], backendOpts(backends)...)
			if errors.Is(err, golden.ErrCI) {
				return usageErr("%v", err)
			}
			return reportGolden(cmd, args[0], "approved", ms, err)
		},
	}
	for _, sub := range []*cobra.Command{verify, approve} {
		sub.Flags().StringVar(&backends, "backends", "", "comma-separated databases to play on: sqlite, postgres (default sqlite, or $INBOXKIT_GOLDEN_BACKENDS)")
		c.AddCommand(sub)
	}
	return c
}

func backendOpts(list string) []golden.Option {
	if list == "" {
		return nil
	}
	return []golden.Option{golden.Backends(strings.Split(list, ",")...)}
}

func reportGolden(cmd *cobra.Command, dir, verb string, ms []golden.Mismatch, err error) error {
	out := cmd.OutOrStdout()
	for _, m := range ms {
		fmt.Fprintln(out, m.String())
	}
	if err != nil {
		if _, serr := os.Stat(dir); serr != nil {
			return usageErr("golden: %v", serr)
		}
		return err
	}
	if len(ms) > 0 {
		fmt.Fprintf(out, "%d case transcript(s) differ; read the diff, then approve with: inboxctl golden approve %s\n", len(ms), dir)
		return errFindings
	}
	cases, _ := golden.Cases(dir)
	fmt.Fprintf(out, "%s %d case(s) under %s for the legacy and the refactored consumer\n", verb, len(cases), dir)
	return nil
}
