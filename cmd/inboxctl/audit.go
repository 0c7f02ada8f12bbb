package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
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
}

func auditRowOf(r inbox.Record) auditRow {
	a := auditRow{
		EventID: r.EventID, Consumer: r.ConsumerName, CorrelationID: r.CorrelationID, Status: string(r.Status),
		Reason: r.ReasonCode, ErrorClass: r.ErrorClass, Attempts: r.Attempts, LastError: r.LastError,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FirstFailedAt: r.FirstFailedAt, ProcessedAt: r.ProcessedAt,
		ReplayCount: r.ReplayCount, PayloadHash: r.PayloadHash,
	}
	switch {
	case r.Status == "DEAD_LETTERED":
		a.DLQTrace = fmt.Sprintf("dead-lettered (%s, %s)", r.ErrorClass, r.ReasonCode)
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

func newAuditCmd() *cobra.Command {
	var f dbFlags
	var corr string
	var asJSON bool
	c := &cobra.Command{
		Use:   "audit --db URL --correlation-id ID [--json]",
		Short: "Show every inbox row of one correlation id, oldest first",
		Long: `audit prints every inbox row (of all consumers) with the correlation id, oldest
first: event id, consumer, status, reason, attempts, times, the last error and the
DLQ trace (dead-lettered, replays). Exit 1 when no row has the correlation id.`,
		Example: `  inboxctl audit --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --correlation-id order-4711
  INBOXKIT_DB=sqlite:./inbox.db inboxctl audit --correlation-id order-4711 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if corr == "" {
				return usageErr("audit needs --correlation-id ID (the correlationId header of the events)")
			}
			ctx := cmd.Context()
			st, _, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			recs, err := st.ByCorrelation(ctx, corr)
			if err != nil {
				return err
			}
			rows := make([]auditRow, 0, len(recs))
			for _, r := range recs {
				rows = append(rows, auditRowOf(r))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rows); err != nil {
					return err
				}
			} else {
				printAudit(out, corr, rows)
			}
			if len(rows) == 0 {
				if !asJSON {
					fmt.Fprintf(cmd.ErrOrStderr(), "no inbox row has correlation id %q\n", corr)
				}
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	c.Flags().StringVar(&corr, "correlation-id", "", "the correlation id to audit (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printAudit(w interface{ Write([]byte) (int, error) }, corr string, rows []auditRow) {
	fmt.Fprintf(w, "audit of correlation id %s: %d row(s)\n", corr, len(rows))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tCONSUMER\tSTATUS\tREASON\tATTEMPTS\tCREATED\tFINISHED\tDLQ TRACE\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.EventID, r.Consumer, r.Status, orDash(r.Reason), r.Attempts,
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
