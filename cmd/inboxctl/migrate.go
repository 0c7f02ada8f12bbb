package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/invoice"
)

func newMigrateCmd() *cobra.Command {
	var f dbFlags
	var seed bool
	c := &cobra.Command{
		Use:   "migrate --db URL",
		Short: "Create the inbox table and the invoice tables (idempotent)",
		Long: `migrate creates the inbox table (INBOX_EVENT_PROCESSING, or --table) and the invoice
consumer's business tables (invoice_customers, shipping_letters, archived_documents)
with their indexes, if they do not exist. Running it again changes nothing.
The DDL is the embedded schema/*.sql and invoice/invoice_*.sql.`,
		Example: `  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  inboxctl migrate --db sqlite:./inbox.db --seed-customers`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, t, err := f.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.DB().Close()
			if err := st.Migrate(ctx); err != nil {
				return err
			}
			if err := invoice.Migrate(ctx, st.DB(), t.Dialect.Name()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrated %s: inbox table %s, invoice tables\n", t.Display, st.Config().Table)
			if seed {
				if err := invoice.SeedCustomers(ctx, st.DB(), t.Dialect); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "seeded %d demo customers\n", len(invoice.DemoCustomers))
			}
			return nil
		},
	}
	f.register(c)
	c.Flags().BoolVar(&seed, "seed-customers", false, "also insert the demo customers (K-100, K-200) if missing")
	return c
}
