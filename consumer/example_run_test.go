package consumer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/inboxkit/inboxkit/driver/sqlite"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// An idempotent invoice consumer that runs anywhere: an embedded JetStream
// server and SQLite, both inside the process. Four messages arrive: an
// invoice, the producer resending it, an invoice for an unknown customer and
// a malformed one. One letter is written, the rejection is recorded and
// never retried, and the malformed message is dead-lettered with its reason.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := os.MkdirTemp("", "inboxkit-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The broker: NATS JetStream inside this process.
	srv, err := embedded.Start(filepath.Join(dir, "nats"))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	broker, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Subject: "invoices", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()

	// The database: SQLite, with the inbox and the business table.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := inbox.New(db, inbox.SQLite, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE letters (invoice_no TEXT PRIMARY KEY, event_id TEXT)`); err != nil {
		log.Fatal(err)
	}

	for _, m := range []struct{ id, body string }{
		{"ev-1", `{"invoiceNo": "INV-1", "customerNo": "K-100"}`},
		{"ev-1", `{"invoiceNo": "INV-1", "customerNo": "K-100"}`}, // the producer resends
		{"ev-2", `{"invoiceNo": "INV-2", "customerNo": "K-999"}`}, // unknown customer
		{"ev-3", `{"invoiceNo": "INV-3", broken`},                 // malformed
	} {
		if err := broker.Publish(ctx, "invoices", map[string]string{"eventId": m.id}, []byte(m.body)); err != nil {
			log.Fatal(err)
		}
	}

	c, err := consumer.New(consumer.Config{
		Name: "invoice-consumer", Source: broker, Store: store,
		DeadLetter: broker, DeadLetterQueue: "DLQ.invoices", Logger: quiet,
		Handler: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			var ev struct{ InvoiceNo, CustomerNo string }
			if err := json.Unmarshal(m.Body, &ev); err != nil {
				return classify.Poison("MALFORMED_PAYLOAD", err) // straight to the DLQ
			}
			if ev.CustomerNo != "K-100" {
				return classify.Reject("CUSTOMER_UNKNOWN", nil) // REJECTED row, ack, never retried
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO letters (invoice_no, event_id) VALUES (?, ?)`, ev.InvoiceNo, m.ID)
			return err // same transaction as the inbox row
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	// Wait until the last message has its final row, then stop: Run drains.
	for {
		r, err := store.Get(ctx, "ev-3", "invoice-consumer")
		if err == nil && r.Status == inboxkit.StatusDeadLettered {
			break
		}
		select {
		case <-ctx.Done():
			log.Fatal("the consumer did not finish in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}

	for _, id := range []string{"ev-1", "ev-2", "ev-3"} {
		r, err := store.Get(ctx, id, "invoice-consumer")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(strings.TrimSpace(fmt.Sprint(id, " ", r.Status, " ", r.ReasonCode))) // no reason when processed
	}
	var letters int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM letters`).Scan(&letters); err != nil {
		log.Fatal(err)
	}
	fmt.Println("letters:", letters)

	// The dead letter: the original body, with the reason in its headers.
	dlq, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Subject: "DLQ.invoices", Durable: "reader", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close()
	d, err := dlq.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := d.Message()
	fmt.Println("DLQ.invoices:", m.Header("eventId"), m.Header("inboxkit-dlq-reason"))
	// Output:
	// ev-1 PROCESSED
	// ev-2 REJECTED CUSTOMER_UNKNOWN
	// ev-3 DEAD_LETTERED MALFORMED_PAYLOAD
	// letters: 1
	// DLQ.invoices: ev-3 MALFORMED_PAYLOAD
}
