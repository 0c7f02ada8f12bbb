package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

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
  inboxctl golden approve testdata/golden/producer-resend
  inboxctl golden record --black-box --exec 'java -cp "$CP" LegacyInvoiceEventMdb' --ready 'listening on' \
    --label java-legacy testdata/golden/happy-path`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageErr("golden needs a subcommand: verify DIR, approve DIR or record --black-box DIR")
		},
	}
	var backends string
	var bb blackBoxFlags
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
			if bb.on {
				b, opts, err := bb.config(cmd)
				if err != nil {
					return err
				}
				ms, err := golden.VerifyBlackBox(cmd.Context(), args[0], b, opts...)
				return reportGolden(cmd, args[0], bb.report("verified"), ms, err)
			}
			ms, err := invoicegolden.Verify(cmd.Context(), args[0], backendOpts(backends)...)
			return reportGolden(cmd, args[0], inProcessReport("verified", args[0]), ms, err)
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
			return reportGolden(cmd, args[0], inProcessReport("approved", args[0]), ms, err)
		},
	}
	record := &cobra.Command{
		Use:   "record --black-box --exec COMMAND [--db URL] [--broker URL] DIR",
		Short: "Record a running consumer process from the outside and write its approved files",
		Long: `record --black-box plays every case under DIR (or DIR itself) against a consumer
process: it starts --exec with sh -c (once per scenario instance), publishes the
scenario's messages to the broker (STOMP, as text messages), serves the letter service
over HTTP itself, injects faults from outside ("fail letter-service N": HTTP 503;
"crash during letter-service": kill -9 inside the call, then a restart), waits until
nothing changes, and writes approved.<label>.txt with the letter-service calls, the
invoice tables, the inbox table if the process made one, and the queue, DLQ.<queue>
and <queue>.REJECTED. Every recording gets a fresh schema and fresh queue names.

The process reads its settings from the environment: INBOXKIT_DB (postgres URL with
search_path), INBOXKIT_JDBC_URL, INBOXKIT_BROKER, INBOXKIT_OPENWIRE_URL, INBOXKIT_QUEUE,
INBOXKIT_DLQ, INBOXKIT_REJECT_QUEUE, INBOXKIT_MAX_ATTEMPTS, INBOXKIT_MAX_REDELIVERIES,
INBOXKIT_INSTANCE and INBOXKIT_LETTER_SERVICE (the URL to POST letters to).
It refuses to run with CI=true; verify --black-box checks a record without writing.`,
		Example: `  inboxctl golden record --black-box --label java-legacy --ready 'listening on' \
    --exec 'exec java -cp "$(scripts/legacy-java classpath)" LegacyInvoiceEventMdb' testdata/golden/happy-path
  inboxctl golden verify --black-box --label inboxctl --ready 'consumer started' \
    --exec 'inboxctl migrate && exec inboxctl run --queue "$INBOXKIT_QUEUE" --max-attempts "$INBOXKIT_MAX_ATTEMPTS"' testdata/golden/happy-path`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !bb.on {
				return usageErr("record needs --black-box (the in-process harness approves with: inboxctl golden approve DIR)")
			}
			b, opts, err := bb.config(cmd)
			if err != nil {
				return err
			}
			ms, err := golden.RecordBlackBox(cmd.Context(), args[0], b, opts...)
			if errors.Is(err, golden.ErrCI) {
				return usageErr("%v", err)
			}
			return reportGolden(cmd, args[0], bb.report("recorded"), ms, err)
		},
	}
	for _, sub := range []*cobra.Command{verify, approve} {
		sub.Flags().StringVar(&backends, "backends", "", "comma-separated databases to play on: sqlite, postgres, mysql (MariaDB or MySQL) (default sqlite, or $INBOXKIT_GOLDEN_BACKENDS)")
		c.AddCommand(sub)
	}
	for _, sub := range []*cobra.Command{verify, record} {
		bb.register(sub)
	}
	c.AddCommand(record)
	return c
}

// blackBoxFlags are the flags of verify --black-box and record --black-box.
type blackBoxFlags struct {
	on                         bool
	exec, db, broker, openwire string
	label, ready, only         string
	quiet                      time.Duration
}

func (f *blackBoxFlags) register(c *cobra.Command) {
	c.Flags().BoolVar(&f.on, "black-box", false, "play the cases against the process --exec starts, from the outside")
	c.Flags().StringVar(&f.exec, "exec", "", "black box: shell command that starts one consumer instance")
	c.Flags().StringVar(&f.db, "db", "", "black box: PostgreSQL server; each recording makes a fresh schema (default $"+envDB+", else postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	c.Flags().StringVar(&f.broker, "broker", "", "black box: the broker's STOMP URL (default $"+envBroker+", else stomp://127.0.0.1:61613)")
	c.Flags().StringVar(&f.openwire, "openwire", "", "black box: the broker's OpenWire URL handed to the process (default tcp://<broker host>:61616 when --broker is at port 61613; else none: give it for a JMS bean)")
	c.Flags().StringVar(&f.label, "label", "black-box", "black box: approved.<label>.txt")
	c.Flags().StringVar(&f.ready, "ready", "", "black box: regular expression the process prints once it consumes (default: wait --quiet after the start)")
	c.Flags().StringVar(&f.only, "case", "", "black box: comma-separated case names under DIR to play (default all)")
	c.Flags().DurationVar(&f.quiet, "quiet", 2*time.Second, "black box: how long nothing may change before a step counts as settled")
}

func (f *blackBoxFlags) config(cmd *cobra.Command) (golden.BlackBox, []golden.Option, error) {
	if strings.TrimSpace(f.exec) == "" {
		return golden.BlackBox{}, nil, usageErr("--black-box needs --exec COMMAND, the shell command that starts one consumer instance")
	}
	b := invoicegolden.BlackBox(f.label, f.exec) // named by the label: --exec holds paths of this machine
	b.DB, b.Broker, b.OpenWire, b.Ready, b.Quiet = orEnv(f.db, envDB), orEnv(f.broker, envBroker), f.openwire, f.ready, f.quiet
	b.Output, b.Log = cmd.ErrOrStderr(), cmd.ErrOrStderr()
	if b.Broker != "" && !strings.HasPrefix(b.Broker, "stomp://") {
		return b, nil, usageErr("--broker %q: the black-box recorder speaks STOMP to ActiveMQ: use stomp://host:61613", b.Broker)
	}
	opts := []golden.Option{golden.Label(f.label)}
	if f.only != "" {
		opts = append(opts, golden.Only(strings.Split(f.only, ",")...))
	}
	return b, opts, nil
}

func backendOpts(list string) []golden.Option {
	if list == "" {
		return nil
	}
	return []golden.Option{golden.Backends(strings.Split(list, ",")...)}
}

// goldenReport is what reportGolden says after the mismatches.
type goldenReport struct {
	again string // the command that approves, after a difference
	done  string // the line when nothing differs
}

func inProcessReport(verb, dir string) goldenReport {
	cases, _ := golden.Cases(dir)
	return goldenReport{
		again: "inboxctl golden approve " + dir,
		done:  fmt.Sprintf("%s %d case(s) under %s for the legacy and the refactored consumer", verb, len(cases), dir),
	}
}

func (f *blackBoxFlags) report(verb string) goldenReport {
	return goldenReport{
		again: "inboxctl golden record --black-box (same flags)",
		done:  fmt.Sprintf("%s the black-box cases as approved.%s.txt", verb, f.label),
	}
}

func reportGolden(cmd *cobra.Command, dir string, rep goldenReport, ms []golden.Mismatch, err error) error {
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
		fmt.Fprintf(out, "%d case transcript(s) differ; read the diff, then approve with: %s\n", len(ms), rep.again)
		return errFindings
	}
	fmt.Fprintln(out, rep.done)
	return nil
}
