package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

type auditRow struct {
	EventID       string     `json:"eventId"`
	Consumer      string     `json:"consumer"`
	CorrelationID string     `json:"correlationId"`
	Status        string     `json:"status"`
	Reason        string     `json:"reason,omitempty"`
	ErrorClass    string     `json:"errorClass,omitempty"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"lastError,omitempty"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     *time.Time `json:"updatedAt,omitempty"`
	FirstFailedAt *time.Time `json:"firstFailedAt,omitempty"`
	ProcessedAt   *time.Time `json:"processedAt,omitempty"`
	ReplayCount   int        `json:"replayCount"`
	PayloadHash   string     `json:"payloadHash,omitempty"`
	DLQTrace      string     `json:"dlqTrace,omitempty"`
	EventIDSource string     `json:"eventIdSource,omitempty"`
	OrderKey      string     `json:"orderKey,omitempty"`
	// Legacy is true for a row written before the second of the table's
	// baseline (its adoption by inboxctl migrate): a legacy consumer's.
	Legacy bool `json:"legacy,omitempty"`
	// Outbox are the outbox messages written while the event was handled.
	Outbox []outbox.Row `json:"outbox,omitempty"`
	// AttemptHistory (audit --event-id) are the row's failures recorded
	// in inbox.AttemptTable, in order, and, for a PROCESSED row, its
	// success as the last line (the row's attempt, replay count and
	// finish time: a success is not recorded apart).
	AttemptHistory []inbox.Attempt `json:"attemptHistory,omitempty"`
}

// idSource is where the row's event id came from: its EVENT_ID_SOURCE,
// "header" for inboxkit's rows without one, "-" (unknown) for a legacy
// consumer's.
func (a auditRow) idSource() string {
	switch {
	case a.EventIDSource != "":
		return a.EventIDSource
	case a.Legacy:
		return "-"
	}
	return "header"
}

// auditRows are the audit lines of recs, rows of st.
func auditRows(ctx context.Context, st *inbox.Store, recs []inbox.Record) ([]auditRow, error) {
	adopted, err := st.Baseline(ctx)
	if err != nil && !errors.Is(err, inbox.ErrNoBaseline) {
		return nil, err
	}
	rows := make([]auditRow, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, auditRowOf(r, adopted))
	}
	return rows, nil
}

// auditRowOf is the audit line of r. adopted is the table's baseline
// (inbox.Store.Baseline; zero: none recorded, every row is a legacy
// consumer's).
func auditRowOf(r inbox.Record, adopted time.Time) auditRow {
	a := auditRow{
		EventID: r.EventID, Consumer: r.ConsumerName, CorrelationID: r.CorrelationID, Status: string(r.Status),
		Reason: r.ReasonCode, ErrorClass: r.ErrorClass, Attempts: r.Attempts, LastError: r.LastError,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FirstFailedAt: r.FirstFailedAt, ProcessedAt: r.ProcessedAt,
		ReplayCount: r.ReplayCount, PayloadHash: r.PayloadHash, EventIDSource: r.EventIDSource,
		OrderKey: r.OrderKey,
	}
	a.Legacy = adopted.IsZero() || r.CreatedAt.Before(adopted.Truncate(time.Second))
	switch {
	case r.Status == "DEAD_LETTERED":
		a.DLQTrace = fmt.Sprintf("dead-lettered (%s, %s)", r.ErrorClass, r.ReasonCode)
	case r.ReplayCount > 0 && strings.HasPrefix(r.LastError, "rejected "):
		a.DLQTrace = "rejected, replayed from the reject queue after clarification"
	case r.ReplayCount > 0:
		a.DLQTrace = "replayed from the DLQ"
	}
	if r.ReplayCount > 0 {
		a.DLQTrace += fmt.Sprintf("; replayed %d time(s)", r.ReplayCount)
	}
	return a
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// queueEntry is a message the audit found on the DLQ or the reject queue.
type queueEntry struct {
	Queue string `json:"queue"`
	// Headers are the message's headers as the broker delivered them.
	Headers map[string]string `json:"headers,omitempty"`
	dlqEntry
}

// auditReport is audit's JSON with --broker.
type auditReport struct {
	Rows     []auditRow   `json:"rows"`
	Queues   []queueEntry `json:"queues"`
	Browsing string       `json:"browsing,omitempty"`
	// Actions are the operator actions recorded on the event (--event-id).
	Actions []inbox.Action `json:"actions,omitempty"`
}

func newAuditCmd() *cobra.Command {
	var f dbFlags
	var corr, eventID, orderKey, brokerURL, dlqName, rejectQueue, operator string
	var o outputFlags
	var of outboxFlags
	c := &cobra.Command{
		Use:   "audit --db URL (--correlation-id ID | --event-id ID | --order-key KEY | --operator NAME) [--broker URL] [-o json]",
		Short: "Show every inbox row of one correlation id or event id (and, with --broker, what the DLQ and reject queue hold)",
		Long: `audit prints every inbox row (of all consumers) with the correlation id, or with the
event id, oldest first: event id, where a derived id came from (--event-id-from;
"header" for the eventId header, "-" for a legacy consumer's row, written before
inboxctl migrate adopted the table), consumer, status, reason, attempts, times, the
last error and the DLQ trace (dead-lettered, replays), and the outbox messages each
event's handling wrote (where the outbox table exists): destination, key, status,
attempts, last error. --order-key KEY lists the rows of a business key instead: those
whose order key (run --order-key) is KEY, oldest first (through the index of migration
step 10; a full read of the table before it). It reads a table inboxctl migrate has not
upgraded yet as it is.

With --broker it also lists what the dead-letter queue (--dlq) and the reject queue
(--reject-queue) hold for the case: messages with the event id, or with the
correlation id of the case — including messages that had no event id and so have no
inbox row. On ActiveMQ (stomp://) the queues are read with a queue browser and nothing
is consumed. RabbitMQ and JetStream cannot browse through inboxctl: their messages are
received and handed back unacknowledged (nothing is lost, but each counts as
redelivered there); audit says so.

With --event-id it also lists the history of attempts of each row: every failure
recorded (technical failure, rejection, dead letter: attempt, replay count, when, the
status it led to, class, reason, error; a table before migration step 10 has none),
and for a PROCESSED row its success as the last line. With --event-id it also lists
the operator actions recorded on the event (dlq replay,
dlq drop, ...; see --operator). --operator NAME lists instead what that operator did,
oldest first: when, which action on which table, how many rows, which events, and the
selection (with --event-id: only the actions on that event).

Exit 1 when nothing is found.`,
		Example: `  inboxctl audit --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --correlation-id order-4711
  inboxctl audit --db sqlite:./inbox.db --event-id INV-42 --broker stomp://127.0.0.1:61613 --dlq DLQ.invoices --reject-queue invoices.rejected
  INBOXKIT_DB=sqlite:./inbox.db inboxctl audit --correlation-id order-4711 --json
  inboxctl audit --db sqlite:./inbox.db --operator alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			if operator != "" && corr == "" && orderKey == "" {
				return auditOperator(cmd, f, asJSON, inbox.ActionFilter{Operator: operator, EventID: eventID})
			}
			if countSet(corr != "", eventID != "", orderKey != "") != 1 || operator != "" {
				return usageErr("audit needs exactly one of --correlation-id ID (the correlationId header of the events), --event-id ID, --order-key KEY or --operator NAME")
			}
			ctx := cmd.Context()
			st, t, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer st.DB().Close()
			q := auditQuery{CorrelationID: corr, EventID: eventID, OrderKey: orderKey}
			var b *broker
			if brokerURL != "" {
				if b, err = openBroker(brokerURL, nil); err != nil {
					return err
				}
				defer b.Close()
			}
			rep, err := auditCase(ctx, st, t, of, q, b, []string{dlqName, rejectQueue}, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			rows, title := rep.Rows, q.title()
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, rep.printed(b != nil)); err != nil {
					return err
				}
			} else {
				printAudit(out, title, rows)
				printAttempts(out, rows)
				printAuditOutbox(out, rows)
				if len(rep.Actions) > 0 {
					fmt.Fprintf(out, "operator actions on %s: %d\n", title, len(rep.Actions))
					printActions(out, rep.Actions)
				}
				if brokerURL != "" {
					if rep.Browsing != "" {
						fmt.Fprintln(out, "note: "+rep.Browsing)
					}
					fmt.Fprintf(out, "queues (%s): %d message(s) for this case\n", strings.Join(nonEmpty(dlqName, rejectQueue), ", "), len(rep.Queues))
					tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
					if len(rep.Queues) > 0 {
						fmt.Fprintln(tw, "QUEUE\tEVENT\tCORRELATION\tREASON\tATTEMPTS\tERROR")
					}
					for _, e := range rep.Queues {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.Queue, orDefault(e.EventID, "(no event id)"), orDash(e.CorrelationID), e.Reason, e.Attempts, orDash(shorten(e.Error, 60)))
					}
					tw.Flush()
				}
			}
			if len(rows) == 0 && len(rep.Queues) == 0 {
				// Not found (exit 1); an unreachable database is exit 2 (see unreachable).
				fmt.Fprintf(cmd.ErrOrStderr(), "no row for %s in %s\n", title, st.Config().Table)
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	c.Flags().StringVar(&corr, "correlation-id", "", "the correlation id to audit")
	c.Flags().StringVar(&eventID, "event-id", "", "the event id to audit")
	c.Flags().StringVar(&orderKey, "order-key", "", "the business key to audit: the rows whose order key (run --order-key) is this")
	c.Flags().StringVar(&operator, "operator", "", "list the actions this operator did (recorded in "+inbox.ActionTable+")")
	c.Flags().StringVar(&brokerURL, "broker", "", "also list the case's messages on --dlq and --reject-queue of this broker")
	c.Flags().StringVar(&dlqName, "dlq", "DLQ.invoices", "dead-letter queue to look into (with --broker)")
	c.Flags().StringVar(&rejectQueue, "reject-queue", "", "reject queue to look into (with --broker)")
	of.register(c)
	o.register(c)
	return c
}

// auditQuery is what audit looks up: one of a correlation id, an event
// id and an order key (a business key).
type auditQuery struct {
	CorrelationID string
	EventID       string
	OrderKey      string
}

func (q auditQuery) title() string {
	switch {
	case q.CorrelationID != "":
		return "correlation id " + q.CorrelationID
	case q.OrderKey != "":
		return "order key " + q.OrderKey
	}
	return "event id " + q.EventID
}

// auditCase is audit's report, for the command and the console: the rows
// of q with their outbox messages, the operator actions on an event id,
// and, with a broker b, the messages of the case on queues (empty names
// skipped). Notes (no actions table yet) go to notes.
func auditCase(ctx context.Context, st *inbox.Store, t target.DB, of outboxFlags, q auditQuery, b *broker, queues []string, notes io.Writer) (auditReport, error) {
	var recs []inbox.Record
	var err error
	switch {
	case q.CorrelationID != "":
		recs, err = st.ByCorrelation(ctx, q.CorrelationID)
	case q.OrderKey != "":
		recs, err = st.ByOrderKey(ctx, q.OrderKey)
	default:
		recs, err = st.ByEventID(ctx, q.EventID)
	}
	if err != nil {
		return auditReport{}, err
	}
	rows, err := auditRows(ctx, st, recs)
	if err != nil {
		return auditReport{}, err
	}
	if err := attachOutbox(ctx, st.DB(), t, of, rows); err != nil {
		return auditReport{}, err
	}
	rep := auditReport{Rows: rows, Queues: []queueEntry{}}
	if q.EventID != "" {
		if err := attachAttempts(ctx, st, q.EventID, rows); err != nil {
			return auditReport{}, err
		}
		if rep.Actions, err = st.Actions(ctx, inbox.ActionFilter{EventID: q.EventID}); err != nil {
			// A table before step 8 has no actions to show.
			fmt.Fprintf(notes, "note: no operator actions shown: %v\n", err)
		}
	}
	if b == nil {
		return rep, nil
	}
	corrs := map[string]bool{}
	if q.CorrelationID != "" {
		corrs[q.CorrelationID] = true
	}
	for _, r := range recs {
		if r.CorrelationID != "" {
			corrs[r.CorrelationID] = true
		}
	}
	if b.t.Kind != target.STOMP {
		rep.Browsing = b.t.Kind + " cannot be browsed by inboxctl: the queues' messages were received and handed back unacknowledged (each now counts as redelivered)"
	}
	for _, qn := range queues {
		if qn == "" {
			continue
		}
		ms, err := b.Browse(ctx, qn, 0)
		if err != nil {
			return rep, err
		}
		for _, m := range ms {
			e := dlqEntryOf(m)
			c := e.CorrelationID
			if c == "" {
				c = orDefault(m.Header("correlationId"), m.Header("correlation-id"))
			}
			if (q.EventID != "" && e.EventID == q.EventID) || (c != "" && corrs[c]) {
				rep.Queues = append(rep.Queues, queueEntry{Queue: qn, Headers: m.Headers, dlqEntry: e})
			}
		}
	}
	return rep, nil
}

// attachAttempts sets the attempt history of the rows of event id (one
// query for all its consumers).
func attachAttempts(ctx context.Context, st *inbox.Store, id string, rows []auditRow) error {
	as, err := st.Attempts(ctx, id, "")
	if err != nil {
		return err
	}
	for i := range rows {
		r := &rows[i]
		for _, a := range as {
			if a.ConsumerName == r.Consumer {
				r.AttemptHistory = append(r.AttemptHistory, a)
			}
		}
		if r.Status == string(inboxkit.StatusProcessed) && r.ProcessedAt != nil {
			r.AttemptHistory = append(r.AttemptHistory, inbox.Attempt{EventID: r.EventID, ConsumerName: r.Consumer, Attempt: r.Attempts,
				ReplayCount: r.ReplayCount, Status: inboxkit.StatusProcessed, At: *r.ProcessedAt})
		}
	}
	return nil
}

// printAttempts prints the attempt history of the rows that have one.
func printAttempts(w io.Writer, rows []auditRow) {
	for _, r := range rows {
		if len(r.AttemptHistory) == 0 {
			continue
		}
		fmt.Fprintf(w, "attempts of %s (%s): %d\n", r.EventID, r.Consumer, len(r.AttemptHistory))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tREPLAY\tAT\tOUTCOME\tCLASS\tREASON\tERROR")
		for _, a := range r.AttemptHistory {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.ReplayCount, fmtTime(&a.At), a.Status, orDash(string(a.Class)), orDash(a.Reason), orDash(shorten(a.Error, 80)))
		}
		tw.Flush()
	}
}

// printed is what audit -o json prints: the report with a broker, else
// its rows alone.
func (r auditReport) printed(withBroker bool) any {
	if withBroker {
		return r
	}
	return r.Rows
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func printAudit(w interface{ Write([]byte) (int, error) }, title string, rows []auditRow) {
	fmt.Fprintf(w, "audit of %s: %d row(s)\n", title, len(rows))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tID SOURCE\tCONSUMER\tSTATUS\tREASON\tATTEMPTS\tCREATED\tFINISHED\tDLQ TRACE\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.EventID, r.idSource(), r.Consumer, r.Status, orDash(r.Reason), r.Attempts,
			fmtTime(&r.CreatedAt), fmtTime(r.ProcessedAt), orDash(r.DLQTrace), orDash(shorten(r.LastError, 60)))
	}
	tw.Flush()
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// auditOperator is audit --operator: the actions an operator did.
func auditOperator(cmd *cobra.Command, f dbFlags, asJSON bool, filter inbox.ActionFilter) error {
	ctx := cmd.Context()
	st, _, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer st.DB().Close()
	as, err := st.Actions(ctx, filter)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		if err := writeJSON(out, as); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "actions of operator %s: %d\n", filter.Operator, len(as))
		printActions(out, as)
	}
	if len(as) == 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "no action of operator %q recorded in %s\n", filter.Operator, inbox.ActionTable)
		return errFindings
	}
	return nil
}

func printActions(w io.Writer, as []inbox.Action) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tOPERATOR\tACTION\tTABLE\tROWS\tEVENTS\tDETAIL")
	for _, a := range as {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", fmtTime(&a.At), a.Operator, a.Action, a.Table, a.Rows,
			orDash(shorten(strings.Join(a.EventIDs, " "), 60)), orDash(a.Detail))
	}
	tw.Flush()
}
