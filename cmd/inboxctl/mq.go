package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/mqsc"
)

func newMQCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "mq",
		Short: "Check IBM MQ settings a migration must carry over",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("mq needs a subcommand: lint (see 'inboxctl mq --help')")
		},
	}
	c.AddCommand(newMQLintCmd())
	return c
}

func newMQLintCmd() *cobra.Command {
	var o outputFlags
	c := &cobra.Command{
		Use:   "lint FILE [-o json]",
		Short: "Check the backout settings of IBM MQ queues, from saved DISPLAY QLOCAL(*) ALL output",
		Long: `lint reads MQSC text ('-' for stdin): the saved output of

  echo 'DISPLAY QLOCAL(*) ALL' | runmqsc QM > queues.txt

or a dmpmqcfg script of DEFINE commands, and checks the backout settings of every
local queue an application reads (SYSTEM.* queues, transmission queues and the
backout queues themselves are left out). It exits 1 naming each queue with
  - BOTHRESH(0), or none set (MQ's default): MQ never moves a message that keeps
    failing; it is redelivered for ever and blocks the queue;
  - no BOQNAME: a message over the threshold goes to the queue manager's
    dead-letter queue, or is discarded, not to a queue of its own;
  - a BOQNAME that is not defined in the file.
For each queue it prints the inboxkit --max-attempts that matches its BOTHRESH.

BOTHRESH and --max-attempts count differently, and come out equal. MQ counts
backouts: a message's BackoutCount is 0 on its first delivery and rises by one
with each rollback, and IBM MQ classes for JMS (the legacy bean's MDB) deliver it
while BackoutCount < BOTHRESH, so BOTHRESH(n) gives a message n deliveries and
moves it to BOQNAME instead of delivering it an n+1-th time. inboxkit counts
attempts (handler runs, in the inbox table) and dead-letters a message when its
n-th attempt fails with --max-attempts n. So BOTHRESH(n) is --max-attempts n;
MQ's BackoutCount is inboxkit's ATTEMPTS - 1. BOTHRESH(0) has no counterpart:
inboxkit needs at least one attempt, and then dead-letters.

Exit codes: 0 no problem, 1 problems found, 2 a file that cannot be read or holds
no queue definition.`,
		Example: `  echo 'DISPLAY QLOCAL(*) ALL' | runmqsc QM.INVOICE > queues.txt
  inboxctl mq lint queues.txt
  dmpmqcfg -m QM.INVOICE -x queue | inboxctl mq lint - -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			name := args[0]
			r := cmd.InOrStdin()
			if name != "-" {
				f, err := os.Open(name)
				if err != nil {
					return usageErr("mq lint: %v", err)
				}
				defer f.Close()
				r = f
			} else {
				name = "stdin"
			}
			qs, err := mqsc.Parse(r)
			var pe *mqsc.ParseError
			if errors.As(err, &pe) {
				return usageErr("mq lint: %s %v (nothing was checked)", name, err)
			}
			if err != nil {
				return usageErr("mq lint: read %s: %v", name, err)
			}
			if len(qs) == 0 {
				return usageErr("mq lint: %s holds no queue definition: save the output of 'DISPLAY QLOCAL(*) ALL' (echo 'DISPLAY QLOCAL(*) ALL' | runmqsc QM > FILE) or a dmpmqcfg script", name)
			}
			rep := mqsc.Lint(qs)
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"file": name, "queues": rep.Queues, "skipped": rep.Skipped, "problems": rep.Problems()}); err != nil {
					return err
				}
			} else {
				printMQLint(cmd.OutOrStdout(), name, rep)
			}
			if rep.Problems() > 0 {
				return errFindings
			}
			return nil
		},
	}
	o.register(c)
	return c
}

func printMQLint(w io.Writer, name string, rep mqsc.Report) {
	fmt.Fprintf(w, "backout settings in %s: %d queue(s) checked, %d left out\n", name, len(rep.Queues), len(rep.Skipped))
	if len(rep.Queues) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "QUEUE\tBOTHRESH\tBOQNAME\t--max-attempts\tCHECK")
		for _, q := range rep.Queues {
			attempts, check := "-", "ok"
			if q.MaxAttempts > 0 {
				attempts = fmt.Sprint(q.MaxAttempts)
			}
			if len(q.Problems) > 0 {
				check = fmt.Sprintf("%d problem(s)", len(q.Problems))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", q.Queue, q.Threshold, orDash(q.RequeueQueue), attempts, check)
		}
		tw.Flush()
	}
	for _, q := range rep.Queues {
		for _, p := range q.Problems {
			fmt.Fprintf(w, "PROBLEM %s (line %d): %s\n", q.Queue, q.Line, p)
		}
	}
	if len(rep.Skipped) > 0 {
		var s []string
		for _, k := range rep.Skipped {
			s = append(s, k.Queue+" ("+k.Reason+")")
		}
		fmt.Fprintf(w, "left out: %s\n", strings.Join(s, ", "))
	}
	if n := rep.Problems(); n > 0 {
		fmt.Fprintf(w, "%d problem(s)\n", n)
	} else {
		fmt.Fprintln(w, "no problems")
	}
	fmt.Fprintln(w, "BOTHRESH(n) gives a message n deliveries (MQ counts backouts from 0), as --max-attempts n gives it n attempts: see 'inboxctl mq lint --help'")
}
