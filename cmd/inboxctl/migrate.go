package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
)

// migrateReport is what migrate -o json prints: the steps applied (with
// --dry-run: the steps and statements that would run).
type migrateReport struct {
	Database          string              `json:"database"`
	Table             string              `json:"table"`
	Dialect           string              `json:"dialect"`
	DryRun            bool                `json:"dryRun"`
	From              int                 `json:"from"`
	To                int                 `json:"to"`
	Prelude           []string            `json:"prelude,omitempty"`
	Steps             []inbox.PlannedStep `json:"steps"`
	InvoiceTables     bool                `json:"invoiceTables"`
	InvoiceStatements []string            `json:"invoiceStatements"`
	SeededCustomers   int                 `json:"seededCustomers"`
}

func newMigrateCmd() *cobra.Command {
	var f dbFlags
	var seed, dryRun, noInvoice bool
	var o outputFlags
	c := &cobra.Command{
		Use:   "migrate --db URL [--dry-run] [-o json]",
		Short: "Create or upgrade the inbox table (versioned steps, under a lock) and create the invoice tables",
		Long: `migrate brings the inbox table (INBOX_EVENT_PROCESSING, or --table) to the version this
build needs, and creates the invoice consumer's business tables (invoice_customers,
shipping_letters, archived_documents) if they do not exist.

Any earlier state is upgraded in place: a table created from the design document's
seed DDL (seven columns, primary key PK_INBOX_EVENT) gets the missing columns
(nullable or with defaults, so running consumers of the old version keep working)
and indexes; every row and the existing primary key are kept; ATTEMPTS and
UPDATED_AT are backfilled. Each step is recorded in INBOXKIT_SCHEMA_VERSION.
The steps run under a database lock (PostgreSQL advisory lock, MySQL GET_LOCK,
SQLite's write lock), so several instances starting at once are safe.
Running it again changes nothing.

--dry-run prints the SQL it would run on this database and changes nothing: that
script is what a DBA applies through Flyway or Liquibase instead.
'migrate status' prints the version and the pending steps.

Every other command checks the version at start and exits 2 with
"run inboxctl migrate" when the schema is behind.`,
		Example: `  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable --dry-run > V2__inboxkit.sql
  inboxctl migrate status --db sqlite:./inbox.db --json
  inboxctl migrate --db sqlite:./inbox.db --seed-customers`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := o.json()
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
				InvoiceTables: !noInvoice, Steps: []inbox.PlannedStep{}, InvoiceStatements: []string{}}
			if dryRun {
				p, err := st.PlanMigration(ctx)
				if err != nil {
					return err
				}
				var stmts []string
				if !noInvoice {
					if stmts, err = invoice.Statements(t.Dialect.Name()); err != nil {
						return err
					}
				}
				if j {
					rep.From, rep.To, rep.Prelude = p.Current, p.Latest, p.Prelude
					rep.Steps = append(rep.Steps, p.Steps...)
					rep.InvoiceStatements = append(rep.InvoiceStatements, stmts...)
					return writeJSON(out, rep)
				}
				fmt.Fprint(out, p.Text())
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
			p, err := inbox.MigrateDB(ctx, st.DB(), t.Dialect, st.Config().Table)
			if err != nil {
				return err
			}
			rep.From, rep.To = p.Current, p.Latest
			rep.Steps = append(rep.Steps, p.Steps...)
			if !j {
				for _, s := range p.Steps {
					fmt.Fprintf(out, "applied step %d: %s (%d statement(s))\n", s.Version, s.Description, len(s.Statements))
				}
			}
			if !noInvoice {
				if err := invoice.Migrate(ctx, st.DB(), t.Dialect.Name()); err != nil {
					return err
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
	c.Flags().BoolVar(&seed, "seed-customers", false, "also insert the demo customers (K-100, K-200) if missing")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the SQL that would run on this database; change nothing")
	c.Flags().BoolVar(&noInvoice, "no-invoice-tables", false, "only the inbox table (for a consumer other than the invoice consumer)")
	o.register(c)
	c.AddCommand(newMigrateStatusCmd())
	return c
}

func newMigrateStatusCmd() *cobra.Command {
	var f dbFlags
	var o outputFlags
	c := &cobra.Command{
		Use:   "status --db URL [-o json]",
		Short: "Print the schema version, the applied and the pending migration steps (exit 1 when behind)",
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
				if len(s.Pending) > 0 || len(s.Drift) > 0 {
					fmt.Fprintln(out, "run inboxctl migrate (or apply the SQL of inboxctl migrate --dry-run)")
				}
			}
			if len(s.Pending) > 0 || len(s.Drift) > 0 {
				return errFindings
			}
			return nil
		},
	}
	f.register(c)
	o.register(c)
	return c
}
