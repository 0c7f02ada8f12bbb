package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

type dlqEntry struct {
	EventID             string     `json:"eventId"`
	CorrelationID       string     `json:"correlationId,omitempty"`
	Reason              string     `json:"reason"`
	Class               string     `json:"class,omitempty"`
	Attempts            int        `json:"attempts"`
	Consumer            string     `json:"consumer,omitempty"`
	OriginalDestination string     `json:"originalDestination,omitempty"`
	Error               string     `json:"error,omitempty"`
	DeadLetteredAt      *time.Time `json:"deadLetteredAt,omitempty"`
	Body                string     `json:"body"`
	NotEnvelope         bool       `json:"notEnvelope,omitempty"`
}

func dlqEntryOf(m inboxkit.Message) dlqEntry {
	env, err := dlq.Parse(m.Headers, m.Body)
	if err != nil {
		return dlqEntry{EventID: m.Header("eventId"), Reason: "(not an inboxkit envelope: " + err.Error() + ")", Body: string(m.Body), NotEnvelope: true}
	}
	e := dlqEntry{
		EventID: env.EventID, CorrelationID: env.CorrelationID, Reason: env.Reason, Class: env.Class, Attempts: env.Attempts,
		Consumer: env.Consumer, OriginalDestination: env.OriginalDestination, Error: env.Error, Body: string(env.Body),
	}
	if !env.DeadLetteredAt.IsZero() {
		t := env.DeadLetteredAt
		e.DeadLetteredAt = &t
	}
	return e
}

func printDLQ(w io.Writer, queue string, es []dlqEntry) {
	fmt.Fprintf(w, "dead-letter queue %s: %d message(s)\n", queue, len(es))
	if len(es) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tCORRELATION\tREASON\tCLASS\tATTEMPTS\tFROM\tERROR")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", orDash(e.EventID), orDash(e.CorrelationID), e.Reason, orDash(e.Class), e.Attempts,
			orDash(e.OriginalDestination), orDash(shorten(e.Error, 60)))
	}
	tw.Flush()
}

func newDLQCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "List or replay the dead-letter queue",
		Example: `  inboxctl dlq list --broker stomp://127.0.0.1:61613 --queue DLQ.invoices
  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --event-id ev-3 --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("dlq needs a subcommand: list or replay (see 'inboxctl dlq --help')")
		},
	}
	c.AddCommand(newDLQListCmd(), newDLQReplayCmd())
	return c
}

func newDLQListCmd() *cobra.Command {
	var brokerURL, queue string
	var o outputFlags
	var limit int
	c := &cobra.Command{
		Use:   "list --broker URL --queue NAME [-o json]",
		Short: "List the dead letters of a queue without removing them",
		Long: `list shows the dead letters with the envelope inboxkit puts on them: event id,
correlation id, reason, class, attempts, original destination and the last error.
On ActiveMQ it uses a queue browser; on RabbitMQ and JetStream the messages are
received and handed back unchanged.`,
		Example: `  inboxctl dlq list --broker stomp://127.0.0.1:61613 --queue DLQ.invoices
  inboxctl dlq list --broker amqp://guest:guest@127.0.0.1:5672/ --queue DLQ.invoices --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			if queue == "" {
				return usageErr("dlq list needs --queue NAME, the dead-letter queue (e.g. DLQ.invoices)")
			}
			ctx := cmd.Context()
			b, err := openLastingBroker(brokerURL, "dlq list")
			if err != nil {
				return err
			}
			defer b.Close()
			if err := b.requireQueue(ctx, queue); err != nil {
				return err
			}
			ms, err := b.Browse(ctx, queue, limit)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				b.noteSTOMPQueue(cmd.ErrOrStderr(), queue)
			}
			es := make([]dlqEntry, 0, len(ms))
			for _, m := range ms {
				es = append(es, dlqEntryOf(m))
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), es)
			}
			printDLQ(cmd.OutOrStdout(), queue, es)
			return nil
		},
	}
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "dead-letter queue (required)")
	o.register(c)
	c.Flags().IntVar(&limit, "limit", 1000, "list at most this many")
	return c
}

// replayReport is what dlq replay -o json prints: the event ids replayed and
// the dead letters left on the queue (each with its reason).
type replayReport struct {
	Queue    string   `json:"queue"`
	Replayed []string `json:"replayed"`
	Left     []string `json:"left"`
	Error    string   `json:"error,omitempty"`
}

func newDLQReplayCmd() *cobra.Command {
	var f dbFlags
	var brokerURL, queue, eventID, dest string
	var all bool
	var o outputFlags
	c := &cobra.Command{
		Use:   "replay --broker URL --queue NAME (--event-id ID | --all) --db URL [-o json]",
		Short: "Send dead letters back to their original queue, to be processed once more",
		Long: `replay moves dead letters back to their original destination (or --to) with the
same event id, and resets their inbox rows (DEAD_LETTERED -> TECHNICAL_FAILURE,
attempts 0, replay count + 1) so that the consumer processes them once more. For
each dead letter: the row is reset, the message is published (confirmed), then the
dead letter is removed. Dead letters not selected stay in the DLQ.

On a reject queue (--queue invoices.rejected) replay reopens the REJECTED row of a
rejection whose business case was clarified (e.g. the customer now exists): the
event is processed once, and its audit shows the rejection, the replay and the
processing. A message whose row is in another state (already processed) is not
replayed: it stays on the queue and the command exits 1.`,
		Example: `  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --event-id ev-3 \
    --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --all --db sqlite:./inbox.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case queue == "":
				return usageErr("dlq replay needs --queue NAME, the dead-letter queue (e.g. DLQ.invoices)")
			case eventID == "" && !all:
				return usageErr("dlq replay needs --event-id ID (one event) or --all (every dead letter)")
			case eventID != "" && all:
				return usageErr("dlq replay takes --event-id or --all, not both")
			}
			j, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b, err := openLastingBroker(brokerURL, "dlq replay")
			if err != nil {
				return err
			}
			defer b.Close()
			st, _, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			if err := b.requireQueue(ctx, queue); err != nil {
				return err
			}
			src, err := b.Source(ctx, queue, "inboxctl-dlq", 10)
			if err != nil {
				return err
			}
			pub, err := b.Publisher(ctx)
			if err != nil {
				src.Close()
				return err
			}
			rep, err := consumer.Replay(ctx, consumer.ReplayConfig{DLQ: src, Publisher: pub, Store: st, EventID: eventID, All: all, Destination: dest})
			src.Close()
			out := cmd.OutOrStdout()
			if j {
				jr := replayReport{Queue: queue, Replayed: append([]string{}, rep.Replayed...), Left: append([]string{}, rep.Skipped...)}
				if err != nil {
					jr.Error = err.Error()
				}
				if werr := writeJSON(out, jr); werr != nil && err == nil {
					err = werr
				}
			} else {
				for _, id := range rep.Replayed {
					fmt.Fprintf(out, "replayed %s\n", id)
				}
				for _, s := range rep.Skipped {
					fmt.Fprintf(out, "left in the DLQ: %s\n", s)
				}
				fmt.Fprintf(out, "%d replayed, %d left in %s\n", len(rep.Replayed), len(rep.Skipped), queue)
			}
			if err != nil {
				return err
			}
			if len(rep.Replayed) == 0 && len(rep.Skipped) == 0 {
				b.noteSTOMPQueue(cmd.ErrOrStderr(), queue)
			}
			if len(rep.Skipped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d message(s) could not be replayed and were left in %s (see above)\n", len(rep.Skipped), queue)
				return errFindings
			}
			if eventID != "" && len(rep.Replayed) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no dead letter with event id %q in %s\n", eventID, queue)
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "dead-letter queue (required)")
	c.Flags().StringVar(&eventID, "event-id", "", "replay the dead letters of this event id")
	c.Flags().BoolVar(&all, "all", false, "replay every dead letter")
	c.Flags().StringVar(&dest, "to", "", "send to this queue instead of the original destination")
	o.register(c)
	return c
}
