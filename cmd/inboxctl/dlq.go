package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
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
	Size                int        `json:"size"`
	BrokerMessageID     string     `json:"brokerMessageId,omitempty"`
	Body                string     `json:"body"`
	NotEnvelope         bool       `json:"notEnvelope,omitempty"`
}

func dlqEntryOf(m inboxkit.Message) dlqEntry {
	env, err := dlq.Parse(m.Headers, m.Body)
	if err != nil {
		return dlqEntry{EventID: m.Header("eventId"), CorrelationID: m.Header("correlationId"), Reason: foreignReason(m),
			OriginalDestination: orDefault(m.Header("original-destination"), m.Destination),
			Error:               "not an inboxkit dead letter: the broker or another program put it there; it cannot be replayed ('inboxctl dlq drop' removes it)",
			Size:                consumer.MessageSize(m), BrokerMessageID: consumer.BrokerID(m), Body: string(m.Body), NotEnvelope: true}
	}
	e := dlqEntry{
		EventID: env.EventID, CorrelationID: env.CorrelationID, Reason: env.Reason, Class: env.Class, Attempts: env.Attempts,
		Consumer: env.Consumer, OriginalDestination: env.OriginalDestination, Error: env.Error,
		Size: consumer.MessageSize(m), BrokerMessageID: consumer.BrokerID(m), Body: string(env.Body),
	}
	if !env.DeadLetteredAt.IsZero() {
		t := env.DeadLetteredAt
		e.DeadLetteredAt = &t
	}
	return e
}

// foreignReason is the reason of a message that is not an inboxkit
// envelope, as far as the message tells: the cause ActiveMQ records, a
// body over the consumer's default limit (maxPublishBody; the consumer
// hands such a message to the broker's dead-letter queue:
// inboxkit.ReasonMessageTooLarge), RabbitMQ's x-death reason, else
// "UNKNOWN".
func foreignReason(m inboxkit.Message) string {
	switch {
	case m.Header("dlqDeliveryFailureCause") != "":
		return "BROKER: " + m.Header("dlqDeliveryFailureCause")
	case consumer.MessageSize(m) > maxPublishBody:
		return inboxkit.ReasonMessageTooLarge
	case m.Header("x-first-death-reason") != "":
		return "BROKER: " + m.Header("x-first-death-reason")
	}
	return "UNKNOWN"
}

func printDLQ(w io.Writer, queue string, es []dlqEntry) {
	fmt.Fprintf(w, "dead-letter queue %s: %d message(s)\n", queue, len(es))
	if len(es) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tCORRELATION\tREASON\tCLASS\tATTEMPTS\tSIZE\tFROM\tERROR")
	foreign := 0
	for _, e := range es {
		class, attempts := orDash(e.Class), strconv.Itoa(e.Attempts)
		errText := shorten(e.Error, 60)
		if e.NotEnvelope {
			foreign++
			class, attempts = "-", "-"
			errText = "not an inboxkit envelope; broker message id " + orDash(e.BrokerMessageID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", orDash(e.EventID), orDash(e.CorrelationID), e.Reason, class, attempts, e.Size,
			orDash(e.OriginalDestination), orDash(errText))
	}
	tw.Flush()
	if foreign > 0 {
		fmt.Fprintf(w, "%d message(s) are not inboxkit dead letters (the broker moved them itself, e.g. a body over the consumer's limit): they cannot be replayed;\n"+
			"\tremove them with 'inboxctl dlq drop --queue %s --not-envelope' (or one with --message-id ID), --dry-run first\n", foreign, queue)
	}
}

func newDLQCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "List, replay or drop the dead letters of a queue",
		Example: `  inboxctl dlq list --broker stomp://127.0.0.1:61613 --queue DLQ.invoices
  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --event-id ev-3 --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("dlq needs a subcommand: list, replay or drop (see 'inboxctl dlq --help')")
		},
	}
	c.AddCommand(newDLQListCmd(), newDLQReplayCmd(), newDLQDropCmd())
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
correlation id, reason, class, attempts, size, original destination and the last error.
A message without the envelope, which the broker moved there itself (the consumer hands a
message over its body limit to the broker's dead-letter queue: reason MESSAGE_TOO_LARGE),
is listed with the reason it tells, its size and its broker message id ('dlq drop'
removes it). On ActiveMQ it uses a queue browser; on RabbitMQ and JetStream the
messages are received and handed back unchanged.`,
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
			b.notes = cmd.ErrOrStderr()
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

// replayReport is what dlq replay -o json prints: the event ids replayed
// (with --dry-run: that would be), the dead letters selected and left on
// the queue (each with its reason), and how many others were left there.
type replayReport struct {
	Queue       string   `json:"queue"`
	DryRun      bool     `json:"dryRun"`
	Replayed    []string `json:"replayed"`
	Left        []string `json:"left"`
	NotSelected int      `json:"notSelected"`
	// Job is the replay job of a bulk replay (its state and counts after
	// the run).
	Job   *inbox.ReplayJob `json:"job,omitempty"`
	Error string           `json:"error,omitempty"`
}

func newDLQReplayCmd() *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var brokerURL, queue, eventID, dest, group, reason, key, groupConsumer, rate, since, until string
	var all, dryRun, jobs bool
	var limit int
	var stopAfterFlag string
	var resume, abandon int64
	var o outputFlags
	c := &cobra.Command{
		Use:   "replay --broker URL --queue NAME (--event-id ID | --group G | --reason R | --key K | --all | --since T --until T) --db URL [--consumer C] [--rate N/s] [--limit N] [--stop-after-failures N|P%] [--dry-run] [-o json] | --resume JOB | --abandon JOB | --jobs",
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
replayed: it stays on the queue and the command exits 1. So does a message that is
not an inboxkit dead letter (the broker moved it there itself): 'dlq drop' removes it.
--dry-run changes nothing and prints exactly the events a replay would take, and
their count.

--group G replays exactly the dead letters of a failure group ('inboxctl failures
groups' shows the ids; --max-attempts as there): the event ids of its rows now, so
a row that changed group since is not replayed. --reason R replays the dead letters
whose envelope has that reason (MAX_ATTEMPTS, POISON, ...). --key K replays the
dead letters of order key K (its DEAD_LETTERED rows, --consumer C one consumer's) in
the queue's order: the head first, then the messages parked behind it (KEY_PARKED,
run --on-poison park-key), which releases the key; not with --since/--until.
--since T and --until T
keep the failures whose row last changed in [T, T) (2026-01-31, RFC 3339, or a
duration ago: 24h), --consumer C one consumer's; they combine with --group,
--reason and --all, or select alone. Archived failures ('inboxctl failures
archive') are never selected by these. --limit N replays at most N, --rate N/s at
most N a second (a pause before each); the dead letters not replayed stay on the
queue.

A bulk replay (all but --event-id, without --dry-run) is a job, recorded in
INBOXKIT_REPLAY_JOB with each event it reopened in INBOXKIT_REPLAY_ITEM: killed
(kill -9) and resumed with --resume JOB it finishes the rest and reopens and sends
no event twice (one exception, at most one more send per kill: see
docs/operations.md). A new bulk replay of a queue with an unfinished (RUNNING) job
is refused. A job has one runner at a time: its process keeps a heartbeat in the
job's row, and a --resume (or a second one) while that heartbeat is fresh is refused
(exit 2) with its age; the job of a killed process is taken over once its heartbeat
is older than 30s ($INBOXKIT_REPLAY_STALE, the same for every inboxctl). --abandon
JOB gives a job up (state ABANDONED; refused while a process runs it): a new bulk
replay of its queue may start, and the events it reopened but did not mark sent are
listed, to be checked. --stop-after-failures N stops the job (state STOPPED, exit 1)
when N of its replayed events failed again, --stop-after-failures P% when more than
P percent of them did, judged once 20 were replayed; --resume continues it. --jobs
lists the jobs.
Each run is recorded with the operator (--operator, else $USER) in
INBOXKIT_OPERATOR_ACTION: 'inboxctl audit --operator'.`,
		Example: `  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --event-id ev-3 \
    --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl dlq replay --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --all --db sqlite:./inbox.db
  inboxctl dlq replay --broker amqp://guest:guest@127.0.0.1:5672/ --queue DLQ.invoices --db sqlite:./inbox.db \
    --since 2026-01-31T08:00:00Z --until 2026-01-31T09:00:00Z --rate 50/s --stop-after-failures 10
  inboxctl dlq replay --broker amqp://guest:guest@127.0.0.1:5672/ --db sqlite:./inbox.db --resume 7 --stop-after-failures 5%
  inboxctl dlq replay --db sqlite:./inbox.db --abandon 7 --operator alice
  inboxctl dlq replay --db sqlite:./inbox.db --jobs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if jobs {
				st, _, err := f.openStore(ctx)
				if err != nil {
					return err
				}
				defer st.DB().Close()
				js, err := st.ReplayJobs(ctx)
				if err != nil {
					return err
				}
				if j {
					return writeJSON(out, js)
				}
				stale, err := replayStale()
				if err != nil {
					return err
				}
				printJobs(out, st.Config().Table, js, stale)
				return nil
			}
			if abandon != 0 {
				if resume != 0 || countSet(eventID != "", all, group != "", reason != "", key != "", since != "", until != "", dryRun, stopAfterFlag != "") > 0 {
					return usageErr("--abandon JOB takes only --db and --operator: give no --resume, selection, --dry-run or --stop-after-failures")
				}
				return abandonJob(cmd, f, op.who(), abandon, j)
			}
			stopAfter, stopPct, err := parseStopAfter(stopAfterFlag)
			if err != nil {
				return err
			}
			sel := replaySelection{Group: group, Reason: reason, Key: key, All: all, Consumer: groupConsumer, To: dest, Limit: limit, StopAfterFailures: stopAfter, StopAfterPercent: stopPct}
			now := time.Now().UTC()
			if since != "" {
				if sel.Since, err = sinceTime(since, now); err != nil {
					return err
				}
			}
			if until != "" {
				if sel.Until, err = sinceTime(until, now); err != nil {
					return usageErr("--until %q: give a time (2026-01-31, 2026-01-31 08:00:00 in UTC, RFC 3339) or a duration ago (24h, 7d)", until)
				}
			}
			if sel.Rate, err = parseRate(rate); err != nil {
				return err
			}
			timed := since != "" || until != ""
			switch {
			case resume != 0:
				if countSet(eventID != "", all, group != "", reason != "", key != "", timed, dryRun) > 0 {
					return usageErr("--resume JOB takes the job's own selection: give no --event-id, --group, --reason, --key, --all, --since, --until or --dry-run")
				}
			case queue == "":
				return usageErr("dlq replay needs --queue NAME, the dead-letter queue (e.g. DLQ.invoices)")
			case countSet(eventID != "", all, group != "", reason != "", key != "") > 1 || ((eventID != "" || key != "") && timed) || (!sel.bulk() && eventID == ""):
				return usageErr("dlq replay needs one of --event-id ID (one event), --group G (a failure group), --reason R, --key K (an order key's dead letters, head first) or --all (every dead letter), or --since/--until (failures in a time window; they combine with --group, --reason and --all)")
			case limit < 0:
				return usageErr("--limit must not be negative (got %d); 0 means no limit", limit)
			case !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until):
				return usageErr("--since %s is not before --until %s: nothing would be selected", since, until)
			}
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
			var job *inbox.ReplayJob
			if resume != 0 {
				jb, err := st.ReplayJob(ctx, resume)
				if errors.Is(err, inbox.ErrNoSuchJob) {
					return usageErr("%v", err)
				}
				if err != nil {
					return err
				}
				if jb.State == inbox.JobAbandoned {
					return usageErr("replay job %d is ABANDONED (%s): it is not resumed; start a new replay of %s", jb.ID, jb.StopReason, jb.Queue)
				}
				if jb.State == inbox.JobDone {
					fmt.Fprintf(out, "replay job %d is DONE already: nothing to resume\n", jb.ID)
					printJob(out, jb)
					return nil
				}
				if queue != "" && queue != jb.Queue {
					return usageErr("replay job %d replays %s, not %s: leave --queue out with --resume", jb.ID, jb.Queue, queue)
				}
				if err := json.Unmarshal([]byte(jb.Selection), &sel); err != nil {
					return fmt.Errorf("replay job %d: its selection %q cannot be read: %w", jb.ID, jb.Selection, err)
				}
				if stopAfterFlag != "" {
					sel.StopAfterFailures, sel.StopAfterPercent = stopAfter, stopPct // may be changed on resume
				}
				queue, dest, limit, job = jb.Queue, sel.To, sel.Limit, &jb
			}
			rep, job, selection, err := replayRun{queue: queue, eventID: eventID, dest: dest, operator: op.who(), sel: sel, dryRun: dryRun, job: job}.run(ctx, st, b)
			if selection == "" {
				return err // nothing was tried
			}
			if resume != 0 {
				selection += " (resumed)"
			}
			var recErr error
			if !dryRun && (len(rep.Replayed) > 0 || job != nil) {
				detail := "queue " + queue + ", " + selection
				if dest != "" && resume == 0 {
					detail += ", to " + dest
				}
				recErr = recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: op.who(), Action: "dlq-replay", EventIDs: rep.Replayed,
					Rows: int64(len(rep.Replayed)), Detail: detail}, st.RecordAction)
			}
			if j {
				jr := replayReport{Queue: queue, DryRun: dryRun, Replayed: append([]string{}, rep.Replayed...), Left: append([]string{}, rep.Skipped...), NotSelected: rep.Kept, Job: job}
				if err != nil {
					jr.Error = err.Error()
				}
				if werr := writeJSON(out, jr); werr != nil && err == nil {
					err = werr
				}
			} else {
				printReplay(out, queue, eventID, dryRun, rep)
				if job != nil {
					printJob(out, *job)
				}
			}
			if job != nil {
				err = jobOutcome(cmd.ErrOrStderr(), *job, err)
			}
			if err != nil {
				return err
			}
			looked := len(rep.Replayed) + len(rep.Skipped) + rep.Kept + rep.Settled + rep.FailedAgain
			if looked == 0 {
				b.noteSTOMPQueue(cmd.ErrOrStderr(), queue)
			}
			if len(rep.Skipped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d message(s) could not be replayed and were left in %s (see above)\n", len(rep.Skipped), queue)
				return errFindings
			}
			if eventID != "" && len(rep.Replayed) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no dead letter with event id %q in %s (%s); nothing was changed\n", eventID, queue, holds(rep.Kept))
				return errFindings
			}
			return recErr
		},
	}
	f.register(c)
	op.register(c)
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "dead-letter queue (required, except with --resume and --jobs)")
	c.Flags().StringVar(&eventID, "event-id", "", "replay the dead letters of this event id")
	c.Flags().BoolVar(&all, "all", false, "replay every dead letter (archived failures excepted)")
	c.Flags().StringVar(&group, "group", "", "replay the dead letters of this failure group (an id 'inboxctl failures groups' shows)")
	c.Flags().StringVar(&groupConsumer, "consumer", "", "only this consumer's failures (with --group: the consumer the groups were listed for)")
	c.Flags().StringVar(&reason, "reason", "", "replay the dead letters of this reason code")
	c.Flags().StringVar(&key, "key", "", "replay the dead letters of this order key, head first (releases a key parked by run --on-poison park-key)")
	c.Flags().StringVar(&since, "since", "", "only failures whose row last changed at or after a time (2026-01-31, RFC 3339) or a duration ago (24h)")
	c.Flags().StringVar(&until, "until", "", "only failures whose row last changed before a time (2026-01-31, RFC 3339) or a duration ago (1h)")
	c.Flags().IntVar(&limit, "limit", 0, "replay at most this many (0: no limit)")
	c.Flags().StringVar(&rate, "rate", "", "replay at most this many a second: 50/s or 50 (default: no limit)")
	c.Flags().StringVar(&stopAfterFlag, "stop-after-failures", "", "stop the job when N of its replayed events failed again, or (P%) more than P percent of them, judged after 20 (default: never)")
	c.Flags().Int64Var(&resume, "resume", 0, "finish the unfinished or stopped replay job with this id (--jobs lists them)")
	c.Flags().Int64Var(&abandon, "abandon", 0, "give up the unfinished or stopped replay job with this id (refused while a process runs it)")
	c.Flags().BoolVar(&jobs, "jobs", false, "list the replay jobs and their states")
	f.registerAttempts(c)
	c.Flags().StringVar(&dest, "to", "", "send to this queue instead of the original destination")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: say which dead letters would be replayed, and which left")
	o.register(c)
	return c
}

// holds says how many other messages a queue held, for "not found".
func holds(others int) string {
	if others == 0 {
		return "it holds no message"
	}
	return fmt.Sprintf("it holds %d other message(s)", others)
}

// printReplay prints what dlq replay did: a line per dead letter replayed
// and per one left with its reason, then the counts of what the queue
// held.
func printReplay(out io.Writer, queue, eventID string, dryRun bool, rep consumer.ReplayReport) {
	verb := "replayed"
	if dryRun {
		verb = "would replay"
	}
	for _, id := range rep.Replayed {
		fmt.Fprintf(out, "%s %s\n", verb, id)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(out, "left in the DLQ: %s\n", s)
	}
	if rep.Settled > 0 {
		fmt.Fprintf(out, "removed %d dead letter(s) without a send: copies of events the job sent already (a run killed before it removed them)\n", rep.Settled)
	}
	if rep.FailedAgain > 0 {
		fmt.Fprintf(out, "left in the DLQ: %d dead letter(s) of events the job replayed that failed again\n", rep.FailedAgain)
	}
	line := fmt.Sprintf("%d %s", len(rep.Replayed), verb)
	if dryRun {
		line = fmt.Sprintf("dry run, nothing changed: %d would be replayed", len(rep.Replayed))
	}
	if rep.Stopped != "" {
		fmt.Fprintf(out, "%d replayed; stopped: the dead letters not looked at stay in %s\n", len(rep.Replayed), queue)
		return
	}
	left := len(rep.Skipped) + rep.Kept + rep.FailedAgain
	if dryRun {
		left += len(rep.Replayed) // all of them are still there
	}
	switch {
	case len(rep.Skipped) > 0 && rep.Kept > 0:
		line += fmt.Sprintf("; %d left in %s (%d could not be replayed, %d not selected)", left, queue, len(rep.Skipped), rep.Kept)
	case rep.Kept > 0 && eventID != "":
		line += fmt.Sprintf("; %d left in %s (none has event id %s)", left, queue, eventID)
	default:
		line += fmt.Sprintf("; %d left in %s", left, queue)
	}
	fmt.Fprintln(out, line)
}

func newDLQDropCmd() *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var brokerURL, queue, eventID, messageID string
	var notEnvelope, all, dryRun, archive bool
	var o outputFlags
	c := &cobra.Command{
		Use:   "drop --broker URL --queue NAME (--event-id ID | --message-id ID | --not-envelope | --all) [--archive --db URL] [--dry-run] [-o json]",
		Short: "Remove dead letters that cannot or need not be replayed",
		Long: `drop removes messages from a dead-letter queue for good: what cannot be replayed,
such as a message the broker moved there itself (not an inboxkit envelope: a body over
the consumer's limit goes to the broker's dead-letter queue, reason MESSAGE_TOO_LARGE),
or a dead letter that is given up. Without --archive it changes no inbox row: the event stays
DEAD_LETTERED (replay it instead to have it processed). Select by --event-id (the
envelope's, or the eventId header of a message without one), --message-id (the broker
message id 'dlq list' shows), --not-envelope (every message that is not an inboxkit
dead letter) or --all. --dry-run removes nothing and lists what would go. Every message
not selected stays on the queue. Exit 1 when nothing matched.

--archive (with --db) also archives the DEAD_LETTERED rows of the dropped dead
letters, as 'failures archive' does for a group: they leave 'failures groups' and
bulk replays, and the head of a key parked by 'run --on-poison park-key' no longer
parks it (replay the messages parked behind it with 'dlq replay --key K').`,
		Example: `  inboxctl dlq drop --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --not-envelope --dry-run
  inboxctl dlq drop --broker stomp://127.0.0.1:61613 --queue DLQ.invoices --message-id 'ID:host-1:1:1:1:7'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, set := range []bool{eventID != "", messageID != "", notEnvelope, all} {
				if set {
					n++
				}
			}
			switch {
			case queue == "":
				return usageErr("dlq drop needs --queue NAME, the dead-letter queue (e.g. DLQ.invoices)")
			case n != 1:
				return usageErr("dlq drop takes one of --event-id ID, --message-id ID, --not-envelope or --all")
			case archive && orEnv(orEnv(f.url, envDB), envDatabaseURL) == "":
				return usageErr("dlq drop --archive archives the dropped dead letters' inbox rows: give --db URL")
			}
			j, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// The drop is recorded where a database is given: it changes
			// no row, so it does not need one otherwise.
			var st *inbox.Store
			if orEnv(orEnv(f.url, envDB), envDatabaseURL) != "" && !dryRun {
				if st, _, err = f.openStore(ctx); err != nil {
					return err
				}
				defer st.DB().Close()
			}
			b, err := openLastingBroker(brokerURL, "dlq drop")
			if err != nil {
				return err
			}
			defer b.Close()
			if err := b.requireQueue(ctx, queue); err != nil {
				return err
			}
			src, err := b.toolSource(ctx, queue, 10, 0)
			if err != nil {
				return err
			}
			sel := func(m inboxkit.Message) bool {
				e := dlqEntryOf(m)
				switch {
				case eventID != "":
					return e.EventID == eventID
				case messageID != "":
					return e.BrokerMessageID == messageID || m.BrokerMessageID == messageID
				case notEnvelope:
					return e.NotEnvelope
				}
				return all
			}
			rep, err := consumer.Drop(ctx, consumer.DropConfig{DLQ: src, SelectFunc: sel, DryRun: dryRun})
			src.Close()
			es := make([]dlqEntry, 0, len(rep.Dropped))
			ids := make([]string, 0, len(rep.Dropped))
			var rows []inbox.EventKey // the dropped dead letters' rows, for --archive
			for _, m := range rep.Dropped {
				e := dlqEntryOf(m)
				es = append(es, e)
				ids = append(ids, orDefault(e.EventID, orDash(e.BrokerMessageID)))
				if !e.NotEnvelope && e.EventID != "" && e.Consumer != "" {
					rows = append(rows, inbox.EventKey{EventID: e.EventID, ConsumerName: e.Consumer})
				}
			}
			var archived []inbox.EventKey
			if archive && !dryRun && st != nil && err == nil {
				if archived, err = st.ArchiveEvents(ctx, rows); err != nil {
					err = fmt.Errorf("%w (the dead letters were dropped; archive their rows with 'inboxctl failures archive')", err)
				}
			}
			var recErr error
			switch {
			case dryRun || len(es) == 0:
			case st != nil:
				detail := "queue " + queue
				if archive {
					detail += fmt.Sprintf(", %d row(s) archived", len(archived))
				}
				recErr = recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: op.who(), Action: "dlq-drop", EventIDs: ids,
					Rows: int64(len(es)), Detail: detail}, st.RecordAction)
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "note: the drop is not recorded in %s: give --db to record who dropped what\n", inbox.ActionTable)
			}
			out := cmd.OutOrStdout()
			if j {
				jr := map[string]any{"queue": queue, "dryRun": dryRun, "dropped": es, "left": rep.Kept}
				if archive {
					jr["archived"] = append([]inbox.EventKey{}, archived...)
				}
				if err != nil {
					jr["error"] = err.Error()
				}
				if werr := writeJSON(out, jr); werr != nil && err == nil {
					err = werr
				}
			} else {
				verb := "dropped"
				if dryRun {
					verb = "would drop"
				}
				for _, e := range es {
					fmt.Fprintf(out, "%s %s (event id %s, reason %s, %d bytes)\n", verb, orDash(e.BrokerMessageID), orDash(e.EventID), e.Reason, e.Size)
				}
				if dryRun {
					fmt.Fprintf(out, "dry run, nothing changed: %d would be dropped; %d left in %s\n", len(es), len(es)+rep.Kept, queue)
				} else {
					fmt.Fprintf(out, "%d dropped; %d left in %s\n", len(es), rep.Kept, queue)
				}
				if archive && !dryRun {
					fmt.Fprintf(out, "%d inbox row(s) archived (DEAD_LETTERED rows of the dropped dead letters)\n", len(archived))
				}
			}
			if err != nil {
				return err
			}
			if len(es) == 0 {
				if rep.Kept == 0 {
					b.noteSTOMPQueue(cmd.ErrOrStderr(), queue)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no message in %s matched (%s); nothing was changed\n", queue, holds(rep.Kept))
				return errFindings
			}
			return recErr
		},
	}
	f.register(c)
	op.register(c)
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "dead-letter queue (required)")
	c.Flags().StringVar(&eventID, "event-id", "", "drop the messages of this event id")
	c.Flags().StringVar(&messageID, "message-id", "", "drop the message with this broker message id (as 'dlq list' shows it)")
	c.Flags().BoolVar(&notEnvelope, "not-envelope", false, "drop every message that is not an inboxkit dead letter")
	c.Flags().BoolVar(&all, "all", false, "drop every message")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing: list what would be dropped")
	c.Flags().BoolVar(&archive, "archive", false, "also archive the dropped dead letters' DEAD_LETTERED rows (needs --db; releases a parked key's head)")
	o.register(c)
	return c
}

// countSet counts the true values.
func countSet(set ...bool) int {
	n := 0
	for _, s := range set {
		if s {
			n++
		}
	}
	return n
}

// parseRate reads --rate: "50/s", "50" or "0.5/s"; "" is no limit (0).
func parseRate(v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(v, "/s"), 64)
	if err != nil || n <= 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, usageErr("--rate %q: give a positive number of dead letters a second, e.g. 50/s", v)
	}
	return n, nil
}
