package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
)

// finding is one kind of inconsistency found by check.
type finding struct {
	Check   string   `json:"check"`
	Meaning string   `json:"meaning"`
	Count   int      `json:"count"`
	Samples []string `json:"samples"`
	Skipped string   `json:"skipped,omitempty"`
}

const maxSamples = 10

func newCheckCmd() *cobra.Command {
	var f dbFlags
	var consumerName string
	var asJSON bool
	c := &cobra.Command{
		Use:   "check --db URL [--json]",
		Short: "Find the typical inbox inconsistencies in the data (exit 1 when found)",
		Long: `check looks for the legacy consumer's typical errors in the data:

  processed-without-letter  a PROCESSED invoice event without its shipping letter
                            (the inbox row and the business write were in separate transactions)
  duplicate-letters         more than one shipping letter for one invoice
                            (a purge inside the redelivery horizon, or a resend with a new event id)
  payload-hash-reuse        the same payload hash under different event ids (a resend with a new id)
  stuck-technical-failure   TECHNICAL_FAILURE rows at or over the backout threshold (--max-attempts)
                            that were never dead-lettered (consumer down, DLQ publish failing)

It prints counts and up to 10 sample ids per check. Exit 0 when nothing is found,
1 when anything is found, 2 on a usage or connection error.`,
		Example: `  inboxctl check --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl check --db sqlite:./inbox.db --json --max-attempts 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			fs, err := runChecks(ctx, st, consumerName)
			if err != nil {
				return err
			}
			found := 0
			for _, x := range fs {
				found += x.Count
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"findings": fs, "total": found}); err != nil {
					return err
				}
			} else {
				printFindings(cmd.OutOrStdout(), fs, found)
			}
			if found > 0 {
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	f.registerAttempts(c)
	c.Flags().StringVar(&consumerName, "consumer", defaultConsumer, "consumer name (CONSUMER_NAME) of the invoice consumer")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printFindings(w io.Writer, fs []finding, total int) {
	for _, x := range fs {
		switch {
		case x.Skipped != "":
			fmt.Fprintf(w, "SKIP  %-26s %s\n", x.Check, x.Skipped)
		case x.Count == 0:
			fmt.Fprintf(w, "ok    %-26s 0\n", x.Check)
		default:
			fmt.Fprintf(w, "FOUND %-26s %d  (%s)\n", x.Check, x.Count, x.Meaning)
			for _, s := range x.Samples {
				fmt.Fprintf(w, "        %s\n", s)
			}
		}
	}
	if total > 0 {
		fmt.Fprintf(w, "%d finding(s)\n", total)
	} else {
		fmt.Fprintln(w, "no findings")
	}
}

func runChecks(ctx context.Context, st *inbox.Store, consumerName string) ([]finding, error) {
	db, d, table := st.DB(), st.Dialect(), st.Config().Table
	var out []finding

	// 1. PROCESSED invoice events without their shipping letter.
	f1 := finding{Check: "processed-without-letter", Meaning: "PROCESSED event ids with no shipping letter: split transactions"}
	q := d.Rebind(`SELECT i.EVENT_ID FROM ` + table + ` i WHERE i.STATUS = 'PROCESSED' AND i.CONSUMER_NAME = ?
		AND NOT EXISTS (SELECT 1 FROM shipping_letters l WHERE l.event_id = i.EVENT_ID) ORDER BY i.EVENT_ID`)
	ids, err := queryStrings(ctx, db, q, consumerName)
	if err != nil {
		if !hasInvoiceTables(ctx, db) {
			f1.Skipped = "no invoice tables (shipping_letters): run inboxctl migrate"
		} else {
			return nil, fmt.Errorf("check processed-without-letter: %w", err)
		}
	}
	f1.Count, f1.Samples = len(ids), sample(ids)
	out = append(out, f1)

	// 2. Business duplicates: more than one letter for one invoice.
	f2 := finding{Check: "duplicate-letters", Meaning: "invoices with more than one shipping letter"}
	if f1.Skipped != "" {
		f2.Skipped = f1.Skipped
	} else {
		rows, err := db.QueryContext(ctx, `SELECT invoice_no, COUNT(*) FROM shipping_letters GROUP BY invoice_no HAVING COUNT(*) > 1 ORDER BY invoice_no`)
		if err != nil {
			return nil, fmt.Errorf("check duplicate-letters: %w", err)
		}
		type dup struct {
			inv string
			n   int
		}
		var dups []dup
		for rows.Next() {
			var x dup
			if err := rows.Scan(&x.inv, &x.n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("check duplicate-letters: %w", err)
			}
			dups = append(dups, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("check duplicate-letters: %w", err)
		}
		f2.Count = len(dups)
		for i, x := range dups {
			if i == maxSamples {
				break
			}
			evs, err := queryStrings(ctx, db, d.Rebind(`SELECT COALESCE(event_id, '(none)') FROM shipping_letters WHERE invoice_no = ? ORDER BY created_at, letter_id`), x.inv)
			if err != nil {
				return nil, fmt.Errorf("check duplicate-letters: %w", err)
			}
			f2.Samples = append(f2.Samples, fmt.Sprintf("invoice %s: %d letters, event ids %s", x.inv, x.n, strings.Join(evs, ", ")))
		}
	}
	out = append(out, f2)

	// 3. The same payload hash under different event ids.
	f3 := finding{Check: "payload-hash-reuse", Meaning: "one payload under several event ids: a resend with a new event id"}
	reuse, err := st.PayloadHashReuse(ctx)
	if err != nil {
		return nil, fmt.Errorf("check payload-hash-reuse: %w", err)
	}
	f3.Count = len(reuse)
	for i, h := range reuse {
		if i == maxSamples {
			break
		}
		f3.Samples = append(f3.Samples, fmt.Sprintf("hash %s… (%s): event ids %s", h.PayloadHash[:min(12, len(h.PayloadHash))], h.ConsumerName, strings.Join(h.EventIDs, ", ")))
	}
	out = append(out, f3)

	// 4. Stuck technical failures.
	f4 := finding{Check: "stuck-technical-failure", Meaning: fmt.Sprintf("TECHNICAL_FAILURE with attempts >= %d, never dead-lettered", st.Config().MaxAttempts)}
	stuck, err := st.StuckFailures(ctx, 1000)
	if err != nil {
		return nil, fmt.Errorf("check stuck-technical-failure: %w", err)
	}
	f4.Count = len(stuck)
	for i, r := range stuck {
		if i == maxSamples {
			break
		}
		f4.Samples = append(f4.Samples, fmt.Sprintf("%s (%s): %d attempts, %s", r.EventID, r.ConsumerName, r.Attempts, orDash(shorten(r.LastError, 80))))
	}
	out = append(out, f4)
	return out, nil
}

func hasInvoiceTables(ctx context.Context, db *sql.DB) bool {
	var n int
	return db.QueryRowContext(ctx, `SELECT COUNT(*) FROM shipping_letters WHERE 1 = 0`).Scan(&n) == nil
}

func sample(ids []string) []string {
	if len(ids) > maxSamples {
		return ids[:maxSamples]
	}
	return ids
}

func queryStrings(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
