package consumer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log"
	"os/signal"
	"syscall"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/inbox"
)

// The README's tour as compiled code: an idempotent invoice consumer on
// PostgreSQL and ActiveMQ. (It needs both servers, so it has no Output and
// is only compiled by go test; Example runs the same consumer in process.)
func Example_postgresActiveMQ() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	db, err := sql.Open(postgres.DriverName, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable") // pgx, fewer round trips
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.New(db, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of}) // default Retry policy (5 attempts), horizon 7 days
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // schema/postgres.sql, idempotent
		log.Fatal(err)
	}
	// One adapter receives the queue and publishes dead letters.
	broker, err := stomp.Open(ctx, stomp.Config{URL: "stomp://127.0.0.1:61613", Queue: "invoices", Prefetch: 4})
	if err != nil {
		log.Fatal(err)
	}

	c, err := consumer.New(consumer.Config{
		Name: "invoice-consumer", Source: broker, Store: store,
		DeadLetter: broker, DeadLetterQueue: "DLQ.invoices", RejectQueue: "invoices.rejected",
		Concurrency: 4,
		Handler: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			var ev struct {
				InvoiceNo  string `json:"invoiceNo"`
				CustomerNo string `json:"customerNo"`
			}
			if err := json.Unmarshal(m.Body, &ev); err != nil {
				return classify.Poison("MALFORMED_PAYLOAD", err) // straight to the DLQ
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoice_customers WHERE customer_no = $1`, ev.CustomerNo).Scan(&n); err != nil {
				return err // technical: redelivered, dead-lettered after 5 attempts
			}
			if n == 0 {
				return classify.Reject("CUSTOMER_UNKNOWN", nil) // REJECTED row, ack, never retried
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES ($1, $2, $3, $4, now())`,
				m.ID+"-letter", ev.InvoiceNo, ev.CustomerNo, m.ID) // same transaction as the inbox row
			return err
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until SIGTERM; then drains
		log.Fatal(err)
	}
}
