package noinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	_ "github.com/inboxkit/inboxkit/driver/sqlite"
)

// openSQLite opens a fresh SQLite file and runs ddl; done closes and
// removes it.
func openSQLite(ddl string) (db *sql.DB, done func()) {
	dir, err := os.MkdirTemp("", "inboxkit-noinbox-")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// A handler that is idempotent by itself: the event carries the new state
// ("the customer's address is now ..., version 7"), and the handler sets it,
// guarded by the version so that an older event arriving late changes
// nothing. A redelivery writes the same values again: no inbox row needed.
// Acknowledge after the commit.
func Example_idempotentHandler() {
	db, done := openSQLite(`CREATE TABLE customers (id TEXT PRIMARY KEY, address TEXT, version INTEGER)`)
	defer done()
	if _, err := db.Exec(`INSERT INTO customers VALUES ('K-100', 'Old Street 1', 6)`); err != nil {
		log.Fatal(err)
	}

	type addressChanged struct {
		Customer, Address string
		Version           int
	}
	handle := func(ctx context.Context, ev addressChanged) error {
		_, err := db.ExecContext(ctx, `UPDATE customers SET address = ?, version = ? WHERE id = ? AND version < ?`,
			ev.Address, ev.Version, ev.Customer, ev.Version)
		return err
	}

	ev := addressChanged{Customer: "K-100", Address: "Main Street 2", Version: 7}
	late := addressChanged{Customer: "K-100", Address: "Old Street 1", Version: 6}
	for _, e := range []addressChanged{ev, ev, late} { // a redelivery, then an old event
		if err := handle(context.Background(), e); err != nil {
			log.Fatal(err)
		}
	}
	var address string
	var version int
	if err := db.QueryRow(`SELECT address, version FROM customers WHERE id = 'K-100'`).Scan(&address, &version); err != nil {
		log.Fatal(err)
	}
	fmt.Println(address, version)
	// Output: Main Street 2 7
}

// A receiver without a transactional database: the effect is a call to
// another service (here a letter service), so there is no transaction to
// write an inbox row in. Send the event id as the idempotency key; the
// service answers a key it has seen without acting again. Acknowledge after
// the call succeeded; a failed call is retried with the same key.
func Example_idempotencyKey() {
	var mu sync.Mutex
	sent := map[string]bool{}
	letterService := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if sent[key] {
			w.WriteHeader(http.StatusOK) // seen: nothing sent again
			return
		}
		sent[key] = true
		w.WriteHeader(http.StatusCreated)
	}))
	defer letterService.Close()

	handle := func(ctx context.Context, eventID, invoiceNo string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, letterService.URL+"/letters", strings.NewReader(invoiceNo))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Idempotency-Key", eventID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err // hand the message back: redelivered, same key
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return resp.StatusCode, fmt.Errorf("letter service: %s", resp.Status)
		}
		return resp.StatusCode, nil
	}

	for range 2 { // the message, then its redelivery
		code, err := handle(context.Background(), "ev-42", "INV-42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(code)
	}
	fmt.Println("letters sent:", len(sent))
	// Output:
	// 201
	// 200
	// letters sent: 1
}

// A unique business key already forbids the duplicate: one invoice number
// is one invoice, whatever the event id. The INSERT skips a row whose key
// exists, and zero rows inserted means the message is a duplicate:
// acknowledge it. (Only when two different events about one key are
// duplicates too: an inbox tells them apart, this does not.)
func Example_uniqueBusinessKey() {
	db, done := openSQLite(`CREATE TABLE invoices (invoice_no TEXT PRIMARY KEY, amount TEXT)`)
	defer done()

	handle := func(ctx context.Context, invoiceNo, amount string) (duplicate bool, err error) {
		r, err := db.ExecContext(ctx, `INSERT INTO invoices (invoice_no, amount) VALUES (?, ?) ON CONFLICT (invoice_no) DO NOTHING`,
			invoiceNo, amount)
		if err != nil {
			return false, err
		}
		n, err := r.RowsAffected()
		return n == 0, err
	}

	for range 2 { // the invoice, then the producer's resend under a new event id
		dup, err := handle(context.Background(), "INV-42", "120.50")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("duplicate:", dup)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM invoices`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", n)
	// Output:
	// duplicate: false
	// duplicate: true
	// invoices: 1
}

// Processing that stays inside the broker: a step that reads a message and
// publishes another (routing, enriching) writes no database. Let the broker
// drop the duplicate: JetStream keeps the message ids it has stored for the
// stream's Duplicates window and acknowledges a repeated publish without
// storing it. Publish with the event id as the message id, then acknowledge
// the input; a crash in between publishes again, and the copy is dropped.
func Example_brokerDeduplication() {
	dir, err := os.MkdirTemp("", "inboxkit-noinbox-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := natsgo.Connect(srv.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, natsjs.StreamConfig{
		Name: "ROUTED", Subjects: []string{"invoices.routed"}, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}

	for range 2 { // the forward, then the forward again after a crash before the input's ack
		ack, err := js.Publish(ctx, "invoices.routed", []byte("INV-42"), natsjs.WithMsgID("ev-42"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("duplicate:", ack.Duplicate)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages:", info.State.Msgs)
	// Output:
	// duplicate: false
	// duplicate: true
	// messages: 1
}
