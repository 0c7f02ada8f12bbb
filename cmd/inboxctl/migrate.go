package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
)

// migrateReport is what migrate -o json prints: the steps applied (with
// --dry-run: the steps and statements that would run).
type migrateReport struct {
	Database          string                `json:"database"`
	Table             string                `json:"table"`
	Dialect           string                `json:"dialect"`
	DryRun            bool                  `json:"dryRun"`
	From              int                   `json:"from"`
	To                int                   `json:"to"`
	Prelude           []string              `json:"prelude,omitempty"`
	Steps             []inbox.PlannedStep   `json:"steps"`
	UnknownStatuses   []inbox.UnknownStatus `json:"unknownStatuses"`
	Mapping           []string              `json:"mapping"`
	InvoiceTables     bool                  `json:"invoiceTables"`
	InvoiceStatements []string              `json:"invoiceStatements"`
	SeededCustomers   int                   `json:"seededCustomers"`
	// Outbox is the outbox tables' plan (dry run) or what ran; nil with
	// --no-outbox.
	Outbox *inbox.Plan `json:"outbox,omitempty"`
}

func newMigrateCmd() *cobra.Command {
	var f dbFlags
	var op operatorFlag
	var seed, dryRun, noInvoice, noOutbox bool
	var mapStatus string
	var o outputFlags
	var of outboxFlags
	c := &cobra.Command{
		Use:   "migrate --db URL [--dry-run] [-o json]",
		Short: "Create or upgrade the inbox table (versioned steps, under a lock) and create the invoice tables",
		Long: `migrate brings the inbox table (INBOX_EVENT_PROCESSING, or --table) to the version this
build needs, creates or upgrades the outbox tables (INBOXKIT_OUTBOX and its key table,
or --outbox-table; leave them out with --no-outbox), and creates the invoice consumer's
business tables (invoice_customers, shipping_letters, archived_documents) if they do
not exist.

Any earlier state is upgraded in place: a table created from the design document's
seed DDL (seven columns, primary key PK_INBOX_EVENT) gets the missing columns
(nullable or with defaults, so running consumers of the old version keep working)
and indexes; every row and the existing primary key are kept; ATTEMPTS and
UPDATED_AT are backfilled. Each step is recorded in INBOXKIT_SCHEMA_VERSION.
The steps run under a database lock (PostgreSQL advisory lock, MySQL GET_LOCK,
SQLite's write lock), so several instances starting at once are safe.
Running it again changes nothing.

Status values the inbox's state machine does not know (a legacy FAILED, a
lower-case processed) and the RECEIVED or IN_PROGRESS rows a legacy consumer left
(no payload, no lease) are listed with their row counts, and migrate changes
nothing (exit 1) until each is mapped with --map-status FROM=TO[,FROM=TO...], TO
one of TECHNICAL_FAILURE (processed when its message comes again), PROCESSED,
REJECTED or DEAD_LETTERED (a redelivery is a duplicate). The mapping runs after
the steps, under the same lock, and is recorded in INBOXKIT_HISTORY; --dry-run
shows its statements.

--dry-run prints the SQL it would run on this database and changes nothing: that
script is what a DBA applies through Flyway or Liquibase instead.
'migrate status' prints the version, the pending steps and the status values to map.

Every other command but the read-only audit and stats checks the version at
start and exits 2 with "run inboxctl migrate" when the schema is behind.`,
		Example: `  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --dry-run > V2__inboxkit.sql
  inboxctl migrate status --db sqlite:./inbox.db --json
  inboxctl migrate --db sqlite:./inbox.db --seed-customers
  inboxctl migrate --db sqlite:./legacy.db --map-status 'FAILED=TECHNICAL_FAILURE,IN_PROGRESS=TECHNICAL_FAILURE,processed=PROCESSED'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := o.json()
			if err != nil {
				return err
			}
			opt, err := parseMapStatus(mapStatus)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, t, err := f.openStoreUnchecked(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			out := cmd.OutOrStdout()
			rep := migrateReport{Database: t.Display, Table: st.Config().Table, Dialect: t.Dialect.Name(), DryRun: dryRun,
				InvoiceTables: !noInvoice, Steps: []inbox.PlannedStep{}, UnknownStatuses: []inbox.UnknownStatus{}, Mapping: []string{}, InvoiceStatements: []string{}}
			if dryRun {
				p, err := st.PlanMigrationWith(ctx, opt)
				if err := unknownStatuses(cmd, j, rep, p, err); err != nil {
					return err
				}
				var stmts []string
				if !noInvoice {
					if stmts, err = invoice.Statements(t.Dialect.Name()); err != nil {
						return err
					}
				}
				if !noOutbox {
					if rep.Outbox, err = planOutbox(ctx, st.DB(), t, of); err != nil {
						return err
					}
				}
				if j {
					rep.From, rep.To, rep.Prelude = p.Current, p.Latest, p.Prelude
					rep.Steps = append(rep.Steps, p.Steps...)
					rep.UnknownStatuses, rep.Mapping = p.Unknown, append(rep.Mapping, p.Mapping...)
					rep.InvoiceStatements = append(rep.InvoiceStatements, stmts...)
					return writeJSON(out, rep)
				}
				fmt.Fprint(out, p.Text())
				if rep.Outbox != nil {
					fmt.Fprint(out, "\n"+rep.Outbox.Text())
				}
				if !noInvoice {
					fmt.Fprintln(out, "\n-- the invoice consumer's tables (idempotent; leave out with --no-invoice-tables)")
					for _, s := range stmts {
						if t.Dialect.Name() == "oracle" {
							fmt.Fprintf(out, "%s\n/\n", s)
						} else {
							fmt.Fprintf(out, "%s;\n", s)
						}
					}
				}
				return nil
			}
			p, err := inbox.MigrateDBWith(ctx, st.DB(), t.Dialect, st.Config().Table, opt)
			if err := unknownStatuses(cmd, j, rep, p, err); err != nil {
				return err
			}
			for _, from := range slices.Sorted(maps.Keys(opt.MapStatus)) {
				var rows int64
				for _, u := range p.Unknown {
					if u.Status == from {
						rows += u.Rows
					}
				}
				if err := recorded(ctx, cmd.ErrOrStderr(), inbox.Action{Operator: op.who(), Action: "map-status", Rows: rows,
					Detail: from + " -> " + string(opt.MapStatus[from])}, st.RecordAction); err != nil {
					return err
				}
			}
			rep.From, rep.To = p.Current, p.Latest
			rep.Steps = append(rep.Steps, p.Steps...)
			rep.UnknownStatuses, rep.Mapping = p.Unknown, append(rep.Mapping, p.Mapping...)
			if !j {
				for _, s := range p.Steps {
					fmt.Fprintf(out, "applied step %d: %s (%d statement(s))\n", s.Version, s.Description, len(s.Statements))
				}
				for _, from := range slices.Sorted(maps.Keys(opt.MapStatus)) {
					fmt.Fprintf(out, "mapped status %s -> %s (%s; recorded in %s)\n", from, opt.MapStatus[from], rowsOf(p.Unknown, from), inbox.HistoryTable)
				}
			}
			if !noInvoice {
				if err := invoice.Migrate(ctx, st.DB(), t.Dialect.Name()); err != nil {
					return err
				}
			}
			if !noOutbox {
				if rep.Outbox, err = migrateOutbox(ctx, st.DB(), t, of); err != nil {
					return err
				}
				if !j && rep.Outbox != nil {
					fmt.Fprintf(out, "migrated outbox %s: schema version %d -> %d\n", rep.Outbox.Table, rep.Outbox.Current, rep.Outbox.Latest)
				}
			}
			if seed {
				if err := invoice.SeedCustomers(ctx, st.DB(), t.Dialect); err != nil {
					return err
				}
				rep.SeededCustomers = len(invoice.DemoCustomers)
			}
			if j {
				return writeJSON(out, rep)
			}
			what := "inbox table " + st.Config().Table
			if !noInvoice {
				what += ", invoice tables"
			}
			fmt.Fprintf(out, "migrated %s: %s; schema version %d -> %d\n", t.Display, what, p.Current, p.Latest)
			if seed {
				fmt.Fprintf(out, "seeded %d demo customers\n", rep.SeededCustomers)
			}
			return nil
		},
	}
	f.register(c)
	op.register(c)
	c.Flags().BoolVar(&seed, "seed-customers", false, "also insert the demo customers (K-100, K-200) if missing")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the SQL that would run on this database; change nothing")
	c.Flags().BoolVar(&noInvoice, "no-invoice-tables", false, "only the inbox table (for a consumer other than the invoice consumer)")
	c.Flags().StringVar(&mapStatus, "map-status", "", "map status values the state machine does not know: FROM=TO[,FROM=TO...], TO one of "+inbox.MappableList())
	c.Flags().BoolVar(&noOutbox, "no-outbox", false, "leave out the outbox tables (INBOXKIT_OUTBOX and its key table)")
	of.register(c)
	o.register(c)
	c.AddCommand(newMigrateStatusCmd())
	return c
}

// parseMapStatus reads --map-status FROM=TO[,FROM=TO...]; a malformed
// pair, a source given twice or a target that is not a status to map to is
// a usage error naming the valid targets.
func parseMapStatus(v string) (inbox.MigrateOptions, error) {
	var opt inbox.MigrateOptions
	if strings.TrimSpace(v) == "" {
		return opt, nil
	}
	opt.MapStatus = map[string]inboxkit.Status{}
	for _, pair := range strings.Split(v, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok || from == "" || to == "" {
			return opt, usageErr("--map-status %q: write FROM=TO pairs separated by commas, e.g. FAILED=TECHNICAL_FAILURE,processed=PROCESSED (TO one of %s)", pair, inbox.MappableList())
		}
		if _, dup := opt.MapStatus[from]; dup {
			return opt, usageErr("--map-status maps %s twice", from)
		}
		opt.MapStatus[from] = inboxkit.Status(to)
	}
	if err := inbox.ValidateStatusMapping(opt.MapStatus); err != nil {
		return opt, usageErr("--map-status: %v", strings.TrimPrefix(err.Error(), "inbox: "))
	}
	return opt, nil
}

// unknownStatuses turns the *inbox.UnknownStatusesError of a migration or
// its plan into the listing of the values still to map (on stderr, or
// the JSON report on stdout) and exit 1; other errors pass through.
func unknownStatuses(cmd *cobra.Command, asJSON bool, rep migrateReport, p inbox.Plan, err error) error {
	var ue *inbox.UnknownStatusesError
	if !errors.As(err, &ue) {
		return err
	}
	if asJSON {
		rep.From, rep.To, rep.UnknownStatuses = p.Current, p.Latest, p.Unknown
		if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
		return errFindings
	}
	w := cmd.ErrOrStderr()
	fmt.Fprintf(w, "%s holds status values the state machine does not know; nothing was changed:\n", rep.Table)
	printUnknown(w, ue.Unmapped)
	var example []string
	for _, u := range ue.Unmapped {
		example = append(example, u.Status+"="+string(u.Suggested()))
	}
	fmt.Fprintf(w, "map each with --map-status to TECHNICAL_FAILURE (processed when its message comes again)\n"+
		"or to PROCESSED, REJECTED or DEAD_LETTERED (a redelivery is a duplicate), e.g.\n  inboxctl migrate --map-status '%s'\n",
		strings.Join(example, ","))
	return errFindings
}

// printUnknown lists unknown status values with their row counts.
func printUnknown(w io.Writer, us []inbox.UnknownStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, u := range us {
		what := u.Status
		if u.Orphan {
			what += " (no payload, no lease: a legacy row)"
		}
		fmt.Fprintf(tw, "  %s\t%d row(s)\n", what, u.Rows)
	}
	tw.Flush()
}

// rowsOf is the row count the census found for status from.
func rowsOf(found []inbox.UnknownStatus, from string) string {
	for _, u := range found {
		if u.Status == from {
			return fmt.Sprintf("%d row(s)", u.Rows)
		}
	}
	return "no rows"
}

func newMigrateStatusCmd() *cobra.Command {
	var f dbFlags
	var o outputFlags
	c := &cobra.Command{
		Use:   "status --db URL [-o json]",
		Short: "Print the schema version, the applied and pending migration steps, and unknown status values (exit 1 when any)",
		Example: `  inboxctl migrate status --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl migrate status --db sqlite:./inbox.db --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := o.json()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, _, err := f.openStoreUnchecked(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			s, err := st.SchemaStatus(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, s); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "inbox table %s (%s): schema version %d, this build needs %d\n", s.Table, s.Dialect, s.Current, s.Latest)
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				for _, a := range s.Applied {
					fmt.Fprintf(tw, "applied\t%d\t%s\t%s\n", a.Version, a.AppliedAt.UTC().Format("2006-01-02 15:04:05"), a.Description)
				}
				for _, p := range s.Pending {
					fmt.Fprintf(tw, "pending\t%d\t-\t%s (%d statement(s))\n", p.Version, p.Description, len(p.Statements))
				}
				tw.Flush()
				for _, d := range s.Drift {
					fmt.Fprintf(out, "drift: %s\n", d)
				}
				if len(s.Unknown) > 0 {
					fmt.Fprintln(out, "status values the state machine does not know (map them: inboxctl migrate --map-status FROM=TO,...):")
					printUnknown(out, s.Unknown)
				}
				if len(s.Pending) > 0 || len(s.Drift) > 0 {
					fmt.Fprintln(out, "run inboxctl migrate (or apply the SQL of inboxctl migrate --dry-run)")
				}
			}
			if len(s.Pending) > 0 || len(s.Drift) > 0 || len(s.Unknown) > 0 {
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	o.register(c)
	return c
}
