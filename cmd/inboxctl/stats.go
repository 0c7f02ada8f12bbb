package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/inbox"
)

// statsReport is the output of `inboxctl stats --json`.
type statsReport struct {
	Table       string              `json:"table"`
	At          time.Time           `json:"at"`
	MaxAttempts int                 `json:"maxAttempts"`
	Counts      []inbox.StatusCount `json:"counts"`
	// OldestNonTerminal is the CREATED_AT of the oldest RECEIVED,
	// IN_PROGRESS or TECHNICAL_FAILURE row, null when there is none.
	OldestNonTerminal           *time.Time `json:"oldestNonTerminal"`
	OldestNonTerminalAgeSeconds float64    `json:"oldestNonTerminalAgeSeconds"`
	AtThreshold                 int64      `json:"atThreshold"`
	NearThreshold               int64      `json:"nearThreshold"`
	DLQ                         *dlqDepth  `json:"dlq,omitempty"`
	// ParkedKeys are the order keys with dead letters not archived: parked
	// for a consumer run with --on-poison park-key (at most
	// maxParkedKeys of them).
	ParkedKeys []inbox.ParkedKey `json:"parkedKeys"`
	// Outbox is the outbox's rows, where its table exists.
	Outbox *outboxStats `json:"outbox,omitempty"`
}

type dlqDepth struct {
	Queue string `json:"queue"`
	// Depth is the number of messages, -1 when the broker cannot tell
	// without receiving them.
	Depth int    `json:"depth"`
	Note  string `json:"note,omitempty"`
}

func newStatsCmd() *cobra.Command {
	var f dbFlags
	var brokerURL, dlqName string
	var watch bool
	var o outputFlags
	var interval time.Duration
	var of outboxFlags
	c := &cobra.Command{
		Use:   "stats --db URL [-o json] [--watch]",
		Short: "Show the inbox: rows per consumer and status, the oldest open row, rows near the threshold",
		Long: `stats counts the inbox rows per consumer and status, shows the oldest row that is
not terminal (RECEIVED, IN_PROGRESS, TECHNICAL_FAILURE) and its age, and the rows at
or one attempt below the backout threshold (--max-attempts). With --broker and --dlq
it also shows the dead-letter queue's depth: ActiveMQ browsed (up to 10000), RabbitMQ
a passive declare's message count, JetStream the subject's messages in its stream;
AMQP 1.0 cannot tell (the protocol has no request for it). Where the outbox table
exists it also counts its rows per destination and status, with the oldest PENDING
row's age and the PARKED rows that wait for an operator. It lists the parked keys
(at most 100): order keys with DEAD_LETTERED rows not archived, which a consumer run
with --on-poison park-key holds until 'inboxctl dlq replay --key K'.

It reads a table inboxctl migrate has not upgraded yet as it is (attempts as 0).
--watch refreshes every --interval until interrupted (in place on a terminal).
Exit 0, or 2 when the database cannot be reached.`,
		Example: `  inboxctl stats --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl stats --db sqlite:./inbox.db --json
  inboxctl stats --watch --broker stomp://127.0.0.1:61613 --dlq DLQ.invoices`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			if interval <= 0 {
				return usageErr("--interval must be positive (got %s)", interval)
			}
			ctx := cmd.Context()
			st, t, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer st.DB().Close()
			var b *broker
			if dlqName != "" {
				if b, err = openBroker(brokerURL, nil); err != nil {
					return err
				}
				defer b.Close()
			}
			out := cmd.OutOrStdout()
			tty := isTerminal(out)
			for {
				r, err := collectStats(ctx, st, b, dlqName)
				if err == nil {
					r.Outbox, err = collectOutboxStats(ctx, st.DB(), t, of, r.At)
				}
				if err != nil {
					if ctx.Err() != nil && watch {
						return nil
					}
					return err
				}
				if watch && tty && !asJSON {
					fmt.Fprint(out, "\033[H\033[2J") // clear the screen, cursor home
				}
				if asJSON {
					if err := writeJSON(out, r); err != nil {
						return err
					}
				} else {
					printStats(out, r)
					printOutboxStats(out, r.Outbox)
					if watch {
						fmt.Fprintf(out, "\nrefreshing every %s; Ctrl-C ends\n", interval)
					}
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil // interrupting a watch is how it ends
				case <-time.After(interval):
				}
			}
		},
	}
	f.register(c)
	f.registerAttempts(c)
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL, for --dlq (default $"+envBroker+")")
	c.Flags().StringVar(&dlqName, "dlq", "", "dead-letter queue whose depth to show (needs a broker)")
	o.register(c)
	c.Flags().BoolVar(&watch, "watch", false, "refresh until interrupted")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval of --watch")
	of.register(c)
	return c
}

func collectStats(ctx context.Context, st *inbox.Store, b *broker, dlqName string) (statsReport, error) {
	s, err := st.Stats(ctx)
	if err != nil {
		return statsReport{}, &exitError{code: exitUsage, err: fmt.Errorf("%v\n\tcheck that the database runs and 'inboxctl migrate' created the table", err)}
	}
	r := statsReport{Table: st.Config().Table, At: s.At, MaxAttempts: s.MaxAttempts, Counts: s.Counts}
	if oldest, ok := s.OldestNonTerminal(""); ok {
		r.OldestNonTerminal = &oldest
		r.OldestNonTerminalAgeSeconds = max(s.At.Sub(oldest).Seconds(), 0)
	}
	if r.ParkedKeys, err = st.ParkedKeys(ctx, "", maxParkedKeys); err != nil {
		return r, err
	}
	for _, c := range s.Counts {
		if !c.Status.Terminal() {
			r.AtThreshold += c.AtThreshold
			r.NearThreshold += c.NearThreshold
		}
	}
	if b != nil {
		d := &dlqDepth{Queue: dlqName, Depth: -1}
		n, atLeast, err := b.Depth(ctx, dlqName)
		switch {
		case errors.Is(err, brokerurl.ErrDepthUnknown):
			d.Note = "not counted on " + b.t.Kind + ": the protocol has no request for a queue's depth ('inboxctl dlq list' receives the messages and hands them back)"
		case errors.Is(err, brokerurl.ErrNoSuchQueue):
			d.Note = "the queue does not exist"
		case err != nil:
			return r, b.fail("depth of "+dlqName, err)
		default:
			d.Depth = n
			switch {
			case atLeast:
				d.Note = fmt.Sprintf("at least %d (browsing stops there)", n)
			case b.t.Kind == target.AMQP:
				d.Note = "ready messages; those delivered and not yet acknowledged are not counted"
			}
		}
		r.DLQ = d
	}
	return r, nil
}

// maxParkedKeys bounds the parked keys stats and the console list.
const maxParkedKeys = 100

// printParkedKeys prints the parked keys of r, if any.
func printParkedKeys(w io.Writer, r statsReport) {
	if len(r.ParkedKeys) == 0 {
		return
	}
	fmt.Fprintf(w, "\nparked keys (dead letters of an order key; 'run --on-poison park-key' holds their later messages): %d", len(r.ParkedKeys))
	if len(r.ParkedKeys) == maxParkedKeys {
		fmt.Fprintf(w, " (the first %d)", maxParkedKeys)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "consumer\tkey\tdead letters\tparked behind\thead\tsince\t")
	for _, k := range r.ParkedKeys {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t\n", k.ConsumerName, k.OrderKey, k.DeadLetters, k.Parked, orDash(k.Head), k.Since.UTC().Format(time.RFC3339))
	}
	tw.Flush()
	fmt.Fprintln(w, "release a key: inboxctl dlq replay --queue DLQ --key KEY (head first)")
}

func printStats(w io.Writer, r statsReport) {
	fmt.Fprintf(w, "inbox %s at %s (backout threshold %d attempts)\n\n", r.Table, r.At.UTC().Format(time.RFC3339), r.MaxAttempts)
	if len(r.Counts) == 0 {
		fmt.Fprintln(w, "no rows")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "consumer\tstatus\trows\tat threshold\tnear threshold\toldest\t")
		for _, c := range r.Counts {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", c.ConsumerName, c.Status, c.Rows, c.AtThreshold, c.NearThreshold, c.Oldest.UTC().Format(time.RFC3339))
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	if r.OldestNonTerminal == nil {
		fmt.Fprintln(w, "oldest non-terminal row: none (nothing waits)")
	} else {
		fmt.Fprintf(w, "oldest non-terminal row: %s, %s old\n", r.OldestNonTerminal.UTC().Format(time.RFC3339),
			(time.Duration(r.OldestNonTerminalAgeSeconds) * time.Second).String())
	}
	fmt.Fprintf(w, "open rows at the threshold: %d, one attempt below it: %d\n", r.AtThreshold, r.NearThreshold)
	if r.DLQ != nil {
		if r.DLQ.Depth >= 0 {
			fmt.Fprintf(w, "dead-letter queue %s: %d message(s)", r.DLQ.Queue, r.DLQ.Depth)
		} else {
			fmt.Fprintf(w, "dead-letter queue %s: depth unknown", r.DLQ.Queue)
		}
		if r.DLQ.Note != "" {
			fmt.Fprintf(w, " (%s)", r.DLQ.Note)
		}
		fmt.Fprintln(w)
	}
	printParkedKeys(w, r)
}

// writeJSON writes v as indented JSON without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
