package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
)

// finding is one kind of inconsistency found by check.
type finding struct {
	Check   string   `json:"check"`
	Meaning string   `json:"meaning"`
	Count   int      `json:"count"`
	Samples []string `json:"samples"`
	Skipped string   `json:"skipped,omitempty"`
	// Since is the baseline of a check that looks only at rows finished
	// at or after it (--since), in the database's clock.
	Since *time.Time `json:"since,omitempty"`
}

const maxSamples = 10

// checkConfig tells check how to find a consumer's business rows: the
// invoice consumer's is invoice/check.json, the claims example's
// examples/claims/check.json.
type checkConfig struct {
	// Consumer is the CONSUMER_NAME whose PROCESSED rows are checked.
	Consumer string `json:"consumer"`
	// BusinessRowExists: SQL returning a row when the business record of
	// the event {event_id} exists (split transactions when it does not).
	BusinessRowExists businessCheck `json:"businessRowExists"`
	// BusinessKeys: SQL returning the columns business_key and event_id of
	// every business record (double effects when a key has several).
	BusinessKeys businessCheck `json:"businessKeys"`
	// Since: businessRowExists looks only at rows finished at or after it
	// (--since); nil looks at every row.
	Since *time.Time `json:"-"`
	// OutboxRowExists: SQL returning the column event_id of every business
	// row whose handling must have written an outbox message (business rows
	// without it when none was written).
	OutboxRowExists businessCheck `json:"outboxRowExists"`
}

type businessCheck struct {
	Name    string `json:"name"`
	Meaning string `json:"meaning"`
	SQL     string `json:"sql"`
}

func loadCheckConfig(path, consumerName, rowSQL, keySQL string) (checkConfig, error) {
	raw := invoice.CheckConfig
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return checkConfig{}, usageErr("--config: %v", err)
		}
		raw = b
	}
	var cfg checkConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return checkConfig{}, usageErr("--config %s: %v\n\tsee invoice/check.json for the format", path, err)
	}
	if path != "" || rowSQL != "" || keySQL != "" {
		// Flags replace the file's (or, without a file, the invoice consumer's) SQL.
		if rowSQL != "" {
			cfg.BusinessRowExists = businessCheck{SQL: rowSQL}
		}
		if keySQL != "" {
			cfg.BusinessKeys = businessCheck{SQL: keySQL}
		}
		if path == "" && (rowSQL == "") != (keySQL == "") {
			if rowSQL == "" {
				cfg.BusinessRowExists = businessCheck{}
			} else {
				cfg.BusinessKeys = businessCheck{}
			}
		}
	}
	if consumerName != "" {
		cfg.Consumer = consumerName
	}
	if cfg.Consumer == "" {
		return cfg, usageErr("check: no consumer name: pass --consumer NAME or set \"consumer\" in --config")
	}
	if cfg.BusinessRowExists.Name == "" {
		cfg.BusinessRowExists.Name = "processed-without-business-row"
	}
	if cfg.BusinessRowExists.Meaning == "" {
		cfg.BusinessRowExists.Meaning = "PROCESSED event ids with no business row: split transactions"
	}
	if cfg.BusinessKeys.Name == "" {
		cfg.BusinessKeys.Name = "duplicate-business-keys"
	}
	if cfg.BusinessKeys.Meaning == "" {
		cfg.BusinessKeys.Meaning = "business keys with more than one business row: double effects"
	}
	if s := cfg.BusinessRowExists.SQL; s != "" && !strings.Contains(s, "{event_id}") {
		return cfg, usageErr("check: the business-row SQL must compare the event id column with {event_id}, e.g. SELECT 1 FROM claim_cases c WHERE c.event_id = {event_id}")
	}
	return cfg, nil
}

func newCheckCmd() *cobra.Command {
	var f dbFlags
	var consumerName, configPath, rowSQL, keySQL, since, brokerURL, copyQueue string
	var o outputFlags
	var of outboxFlags
	var stuckAfter time.Duration
	c := &cobra.Command{
		Use:   "check --db URL [--config FILE] [-o json]",
		Short: "Find the typical inbox inconsistencies in the data (exit 1 when found)",
		Long: `check looks for the legacy consumer's typical errors in the data. Two checks read the
consumer's own business tables, through SQL from --config FILE (or the flags); without
them, the invoice consumer's (invoice/check.json):

  businessRowExists  (invoice: processed-without-letter) PROCESSED events without their
                     business row: the inbox row and the business write were in separate
                     transactions. SQL returning a row when the record of {event_id} exists.
                     Only rows finished since --since are looked at: by default the
                     table's baseline, when inboxctl migrate first ran on it (a legacy
                     consumer's rows, older, have their business rows elsewhere);
                     --since all looks at every row, --since 2026-01-31 from that day.
  businessKeys       (invoice: duplicate-letters) business keys with more than one business
                     row: a purge inside the redelivery horizon, or a resend with a new event
                     id. SQL returning the columns business_key and event_id.
  purged-then-redelivered  events processed again after a purge run deleted their inbox
                     row: two business rows for one event id, or a business row beside an
                     inbox row that is not PROCESSED (the business table refused the second
                     row, as the invoice consumer's letter id keyed by the event does; what
                     the handler did outside the database may have happened again). The duplicates
                     that appear shortly after a cleanup; each names the purge run (its
                     time, window and horizon) recorded in INBOXKIT_HISTORY.

and on the inbox table of every consumer:

  unknown-status            rows in a status the state machine does not know (a legacy
                            consumer's FAILED, a lower-case processed) or RECEIVED/IN_PROGRESS
                            rows no worker will process: their messages are dead-lettered with
                            UNKNOWN_STATUS; map them with inboxctl migrate --map-status
  payload-hash-reuse        the same payload hash under different event ids (a resend with a new id)
  derived-id-payload-reuse  ... where an id was derived (--event-id-from): the derivation did not
                            catch that resend
  message-id-event-ids      event ids derived from the broker message id: they do not survive a
                            producer resend or a DLQ replay
  stuck-technical-failure   TECHNICAL_FAILURE rows at or over the backout threshold (--max-attempts)
                            that were never dead-lettered (consumer down, DLQ publish failing)

and, where the outbox table exists:

  outbox-stuck-pending      outbox messages still PENDING after --outbox-stuck-after (no relay
                            runs, or a destination has been failing that long)
  outbox-parked             outbox messages PARKED: waiting for inboxctl outbox retry or drop
  outboxRowExists           (from --config) business rows whose handling must have written an
                            outbox message, without one: SQL returning the column event_id

and, with --copy-queue Q --broker URL (Q a copy of the consumer's messages: a second queue
the producer also feeds, a DLQ; browsed, its messages stay):

  missing-from-database     messages on Q whose event (header eventId) has no inbox row: lost
                            with a commit that never reached the database in use (a failover
                            with asynchronous replication), or not consumed yet

A config file (JSON):
  {"consumer": "claims-service",
   "businessRowExists": {"name": "processed-without-case", "sql": "SELECT 1 FROM claim_cases c WHERE c.event_id = {event_id}"},
   "businessKeys": {"name": "duplicate-cases", "sql": "SELECT claim_no AS business_key, event_id FROM claim_cases"}}

It prints counts and up to 10 sample ids per check. Exit 0 when nothing is found,
1 when anything is found, 2 on a usage or connection error, and when a check cannot
run (its SQL fails: the message names the check and quotes the SQL).`,
		Example: `  inboxctl check --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl check --db sqlite:./inbox.db --json --max-attempts 5
  inboxctl check --db sqlite:./claims.db --config examples/claims/check.json
  inboxctl check --db sqlite:./claims.db --consumer claims-service \
    --business-row-sql 'SELECT 1 FROM claim_cases c WHERE c.event_id = {event_id}' \
    --business-key-sql 'SELECT claim_no AS business_key, event_id FROM claim_cases'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			cfg, err := loadCheckConfig(configPath, consumerName, rowSQL, keySQL)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, t, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			if cfg.Since, err = checkSince(ctx, st, since); err != nil {
				return err
			}
			fs, err := runChecks(ctx, st, cfg)
			if err != nil {
				// Exit 1 means findings: a check that could not run (its
				// SQL is wrong, the database failed) is exit 2.
				return &exitError{code: exitUsage, err: err}
			}
			ofs, err := outboxChecks(ctx, st.DB(), t, of, cfg.OutboxRowExists, stuckAfter)
			if err != nil {
				return err
			}
			fs = append(fs, ofs...)
			if copyQueue != "" {
				if brokerURL == "" {
					return usageErr("check --copy-queue %s: needs --broker, the broker that holds it", copyQueue)
				}
				cf, err := copyQueueCheck(ctx, st, cfg.Consumer, brokerURL, copyQueue)
				if err != nil {
					return err
				}
				fs = append(fs, cf)
			}
			found := 0
			for _, x := range fs {
				found += x.Count
			}
			if asJSON {
				for i := range fs {
					if fs[i].Samples == nil {
						fs[i].Samples = []string{} // "samples": [], as every empty list of -o json
					}
				}
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"findings": fs, "total": found}); err != nil {
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
	c.Flags().StringVar(&consumerName, "consumer", "", "consumer name (CONSUMER_NAME) whose business rows are checked (default: the config's, invoice-consumer)")
	c.Flags().StringVar(&configPath, "config", "", "JSON file with the consumer's business-table SQL (default: the invoice consumer's)")
	c.Flags().StringVar(&rowSQL, "business-row-sql", "", "SQL returning a row when the business record of {event_id} exists")
	c.Flags().StringVar(&keySQL, "business-key-sql", "", "SQL returning business_key, event_id of every business record")
	c.Flags().StringVar(&since, "since", "", "look for split transactions in rows finished since this time (2026-01-31, RFC 3339) or all (default: the table's baseline, when inboxctl migrate first ran on it)")
	of.register(c)
	c.Flags().DurationVar(&stuckAfter, "outbox-stuck-after", 15*time.Minute, "an outbox message still PENDING after this long is a finding")
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL of --copy-queue")
	c.Flags().StringVar(&copyQueue, "copy-queue", "", "a queue holding copies of the consumer's messages (left there): report those whose event has no inbox row (lost in a database failover)")
	o.register(c)
	return c
}

// checkSince is the baseline of the split-transaction check: --since, or
// the table's baseline (inbox.Store.Baseline); nil for all rows.
func checkSince(ctx context.Context, st *inbox.Store, v string) (*time.Time, error) {
	switch v {
	case "all":
		return nil, nil
	case "":
		b, err := st.Baseline(ctx)
		if errors.Is(err, inbox.ErrNoBaseline) {
			return nil, nil
		}
		return &b, err
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return &t, nil
		}
	}
	return nil, usageErr("--since %q: give a time (2026-01-31, 2026-01-31 08:00:00 in UTC, or RFC 3339) or all", v)
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
		if x.Since != nil && x.Skipped == "" {
			fmt.Fprintf(w, "        (only rows finished since %s; --since all looks at every row)\n", x.Since.UTC().Format("2006-01-02 15:04:05"))
		}
	}
	if total > 0 {
		fmt.Fprintf(w, "%d finding(s)\n", total)
	} else {
		fmt.Fprintln(w, "no findings")
	}
}

func runChecks(ctx context.Context, st *inbox.Store, cfg checkConfig) ([]finding, error) {
	db, d, table := st.DB(), st.Dialect(), st.Config().Table
	var out []finding

	// 1. PROCESSED events without their business row.
	if br := cfg.BusinessRowExists; br.SQL != "" {
		f1 := finding{Check: br.Name, Meaning: br.Meaning, Since: cfg.Since}
		exists := strings.ReplaceAll(br.SQL, "{event_id}", "i.EVENT_ID")
		q, args := `SELECT i.EVENT_ID FROM `+table+` i WHERE i.STATUS = 'PROCESSED' AND i.CONSUMER_NAME = ?`, []any{cfg.Consumer}
		if cfg.Since != nil {
			// Rows finished before the baseline are a legacy consumer's.
			// Those of the baseline's own second are looked at (a time
			// without a fraction, as SQLite's CURRENT_TIMESTAMP writes, is
			// of that second): a split transaction is never hidden.
			q += ` AND COALESCE(i.PROCESSED_AT, i.CREATED_AT) > ?`
			args = append(args, d.TimeArg(cfg.Since.Truncate(time.Second).Add(-time.Microsecond)))
		}
		q = d.Rebind(q + ` AND NOT EXISTS (` + exists + `) ORDER BY i.EVENT_ID`)
		ids, err := queryStrings(ctx, db, q, args...)
		if err != nil {
			if br.Name == "processed-without-letter" && !hasInvoiceTables(ctx, db) {
				f1.Skipped = "no invoice tables (shipping_letters): run inboxctl migrate"
			} else {
				return nil, fmt.Errorf("check %s: %w\n\tSQL: %s", br.Name, err, br.SQL)
			}
		}
		f1.Count, f1.Samples = len(ids), sample(ids)
		out = append(out, f1)
	}

	// 2. Double effects: more than one business row for one business key.
	if bk := cfg.BusinessKeys; bk.SQL != "" {
		f2 := finding{Check: bk.Name, Meaning: bk.Meaning}
		if len(out) > 0 && out[0].Skipped != "" {
			f2.Skipped = out[0].Skipped
		} else {
			rows, err := db.QueryContext(ctx, `SELECT k.business_key, COUNT(*) FROM (`+bk.SQL+`) k GROUP BY k.business_key HAVING COUNT(*) > 1 ORDER BY k.business_key`)
			if err != nil {
				return nil, fmt.Errorf("check %s: %w\n\tSQL: %s (it must return the columns business_key and event_id)", bk.Name, err, bk.SQL)
			}
			type dup struct {
				key string
				n   int
			}
			var dups []dup
			for rows.Next() {
				var x dup
				if err := rows.Scan(&x.key, &x.n); err != nil {
					rows.Close()
					return nil, fmt.Errorf("check %s: %w", bk.Name, err)
				}
				dups = append(dups, x)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, fmt.Errorf("check %s: %w", bk.Name, err)
			}
			f2.Count = len(dups)
			for i, x := range dups {
				if i == maxSamples {
					break
				}
				evs, err := queryStrings(ctx, db, d.Rebind(`SELECT COALESCE(k.event_id, '(none)') FROM (`+bk.SQL+`) k WHERE k.business_key = ? ORDER BY 1`), x.key)
				if err != nil {
					return nil, fmt.Errorf("check %s: %w", bk.Name, err)
				}
				f2.Samples = append(f2.Samples, fmt.Sprintf("%s: %d rows, event ids %s", x.key, x.n, strings.Join(evs, ", ")))
			}
		}
		out = append(out, f2)
		fp, err := purgedThenRedelivered(ctx, st, cfg, f2.Skipped)
		if err != nil {
			return nil, err
		}
		out = append(out, fp)
	}

	// 3. The same payload hash under different event ids; and where ids
	// were derived, the derivation did not catch that resend.
	f3 := finding{Check: "payload-hash-reuse", Meaning: "one payload under several event ids: a resend with a new event id"}
	f3d := finding{Check: "derived-id-payload-reuse", Meaning: "one payload under several derived event ids: the --event-id-from sources did not catch a resend"}
	reuse, err := st.PayloadHashReuse(ctx)
	if err != nil {
		return nil, fmt.Errorf("check payload-hash-reuse: %w", err)
	}
	for _, h := range reuse {
		line := fmt.Sprintf("hash %s… (%s): event ids %s", h.PayloadHash[:min(12, len(h.PayloadHash))], h.ConsumerName, strings.Join(h.EventIDs, ", "))
		f3.Count++
		if len(f3.Samples) < maxSamples {
			f3.Samples = append(f3.Samples, line)
		}
		derived := false
		var srcs []string
		for i, s := range h.Sources {
			if s != "" {
				derived = true
			}
			srcs = append(srcs, h.EventIDs[i]+" from "+orDefault(s, "the eventId header"))
		}
		if derived {
			f3d.Count++
			if len(f3d.Samples) < maxSamples {
				f3d.Samples = append(f3d.Samples, fmt.Sprintf("hash %s… (%s): %s", h.PayloadHash[:min(12, len(h.PayloadHash))], h.ConsumerName, strings.Join(srcs, ", ")))
			}
		}
	}
	out = append(out, f3, f3d)

	// 4. Event ids derived from the broker message id.
	f5 := finding{Check: "message-id-event-ids", Meaning: "event ids from the broker message id: a producer resend or a DLQ replay is processed again"}
	mids, err := st.MessageIDEventIDs(ctx, 1000)
	if err != nil {
		return nil, fmt.Errorf("check message-id-event-ids: %w", err)
	}
	f5.Count = len(mids)
	for i, r := range mids {
		if i == maxSamples {
			break
		}
		f5.Samples = append(f5.Samples, fmt.Sprintf("%s (%s): %s, correlation id %s", r.EventID, r.ConsumerName, r.Status, orDash(r.CorrelationID)))
	}
	out = append(out, f5)

	// 5. Stuck technical failures.
	f4 := finding{Check: "stuck-technical-failure", Meaning: fmt.Sprintf("TECHNICAL_FAILURE with attempts >= %d, never dead-lettered", st.Config().Retry.MaxAttempts)}
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

	// 6. Rows in a status the state machine does not know.
	f6 := finding{Check: "unknown-status", Meaning: "rows in a status the state machine does not know, or RECEIVED/IN_PROGRESS rows no worker will process: " +
		"their messages are dead-lettered (UNKNOWN_STATUS); map them with inboxctl migrate --map-status"}
	unknown, err := st.UnknownStatuses(ctx)
	if err != nil {
		return nil, fmt.Errorf("check unknown-status: %w", err)
	}
	for _, u := range unknown {
		f6.Count += int(u.Rows)
	}
	if f6.Count > 0 {
		samples, err := st.UnknownStatusRows(ctx, maxSamples)
		if err != nil {
			return nil, fmt.Errorf("check unknown-status: %w", err)
		}
		for _, u := range unknown {
			f6.Samples = append(f6.Samples, "status "+u.String())
		}
		for _, r := range samples {
			f6.Samples = append(f6.Samples, fmt.Sprintf("%s (%s): %s, created %s", r.EventID, r.ConsumerName, r.Status, fmtTime(&r.CreatedAt)))
		}
	}
	out = append(out, f6)
	return out, nil
}

// purgedThenRedelivered finds the events a recorded purge run let
// through a second time: a business key with more than one business row
// for one event id (processed twice), or an event whose business row
// exists while its inbox row is not PROCESSED (processed again, and the
// business table refused the second row: a unique key derived from the
// event, as the invoice consumer's letter id; what the handler did outside
// the database may have happened again). Each is tied to the run last before its current
// inbox row was created (the last run, when that row is gone too); one with
// no run before it is left to the other checks. skipped carries the
// business checks' reason to skip.
func purgedThenRedelivered(ctx context.Context, st *inbox.Store, cfg checkConfig, skipped string) (finding, error) {
	const name = "purged-then-redelivered"
	f := finding{Check: name, Skipped: skipped,
		Meaning: "events processed again after a purge deleted their inbox row: a purge inside the redelivery horizon, the duplicates shortly after a cleanup"}
	if skipped != "" {
		return f, nil
	}
	runs, err := st.PurgeRuns(ctx)
	if err != nil || len(runs) == 0 {
		return f, err
	}
	// tie returns the purge run that let event through, and what became of
	// it, or nil.
	tie := func(event string) (*inbox.PurgeRun, *inbox.Record, error) {
		r, err := st.Get(ctx, event, cfg.Consumer)
		if errors.Is(err, inbox.ErrNotFound) {
			return &runs[len(runs)-1], nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		var run *inbox.PurgeRun
		for i := range runs {
			if !runs[i].At.After(r.CreatedAt) {
				run = &runs[i]
			}
		}
		return run, &r, nil
	}
	add := func(line string) {
		f.Count++
		if len(f.Samples) < maxSamples {
			f.Samples = append(f.Samples, line)
		}
	}
	db, d := st.DB(), st.Dialect()
	if bk := cfg.BusinessKeys.SQL; bk != "" {
		rows, err := db.QueryContext(ctx, `SELECT k.business_key, k.event_id, COUNT(*) FROM (`+bk+`) k WHERE k.event_id IS NOT NULL GROUP BY k.business_key, k.event_id HAVING COUNT(*) > 1 ORDER BY 1, 2`)
		if err != nil {
			return f, fmt.Errorf("check %s: %w\n\tSQL: %s", name, err, bk)
		}
		type twice struct {
			key, event string
			n          int
		}
		var found []twice
		for rows.Next() {
			var x twice
			if err := rows.Scan(&x.key, &x.event, &x.n); err != nil {
				rows.Close()
				return f, fmt.Errorf("check %s: %w", name, err)
			}
			found = append(found, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return f, fmt.Errorf("check %s: %w", name, err)
		}
		for _, x := range found {
			run, r, err := tie(x.event)
			if err != nil {
				return f, fmt.Errorf("check %s: %w", name, err)
			}
			if run == nil {
				continue // no purge before it came again: a hand-made row, or a split transaction
			}
			again := "its inbox row is gone too"
			if r != nil {
				again = "processed again at " + fmtTime(&r.CreatedAt)
			}
			add(fmt.Sprintf("%s: %d rows for event %s; its first inbox row was deleted by the %s; %s", x.key, x.n, x.event, run, again))
		}
	}
	if br := cfg.BusinessRowExists.SQL; br != "" {
		exists := strings.ReplaceAll(br, "{event_id}", "i.EVENT_ID")
		q := d.Rebind(`SELECT i.EVENT_ID FROM ` + st.Config().Table + ` i WHERE i.STATUS <> 'PROCESSED' AND i.CONSUMER_NAME = ? AND EXISTS (` + exists + `) ORDER BY i.EVENT_ID`)
		ids, err := queryStrings(ctx, db, q, cfg.Consumer)
		if err != nil {
			return f, fmt.Errorf("check %s: %w\n\tSQL: %s", name, err, br)
		}
		for _, id := range ids {
			run, r, err := tie(id)
			if err != nil {
				return f, fmt.Errorf("check %s: %w", name, err)
			}
			if run == nil || r == nil {
				continue
			}
			add(fmt.Sprintf("%s: has its business row, but its inbox row, created again at %s after the %s, is %s%s: it ran a second time",
				id, fmtTime(&r.CreatedAt), run, r.Status, map[bool]string{true: " (" + r.ReasonCode + ")"}[r.ReasonCode != ""]))
		}
	}
	return f, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
