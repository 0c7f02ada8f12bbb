package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "github.com/inboxkit/inboxkit/driver/sqlite"

	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
)

// openExampleStore opens a fresh SQLite file with the inbox and one
// business table, letters, created; done closes and removes it.
func openExampleStore(ctx context.Context) (db *sql.DB, store *inbox.Store, done func()) {
	dir, err := os.MkdirTemp("", "inboxkit-example-")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "inbox.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	store, err = inbox.New(db, inbox.SQLite, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE letters (event_id TEXT PRIMARY KEY, customer TEXT)`); err != nil {
		log.Fatal(err)
	}
	return db, store, func() { db.Close(); os.RemoveAll(dir) }
}

// letters counts the business rows.
func letters(ctx context.Context, db *sql.DB) int {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM letters`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	return n
}

// sendLetter is the business change: one letter per event, unless the
// customer is unknown (a business rejection, never retried).
func sendLetter(eventID, customer string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		if customer == "" {
			return classify.Reject("CUSTOMER_UNKNOWN", nil)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO letters (event_id, customer) VALUES (?, ?)`, eventID, customer)
		return err
	}
}

// describe says what Process did: the outcome, the row's status, its
// attempts and, for a failure, the reason.
func describe(r inbox.Result) string {
	s := fmt.Sprintf("%s, row %s, attempts %d", r.Outcome, r.Status, r.Attempts)
	if r.Reason != "" {
		s += ", reason " + r.Reason
	}
	return s
}

// A new event, the same event delivered again, and a business rejection,
// on SQLite. The duplicate runs no handler: one letter is written.
func ExampleStore_Process() {
	ctx := context.Background()
	db, store, done := openExampleStore(ctx)
	defer done()

	for _, d := range []struct{ event, customer string }{
		{"ev-1", "K-100"}, // new
		{"ev-1", "K-100"}, // the broker delivers it again
		{"ev-2", ""},      // unknown customer
	} {
		e := inbox.Entry{EventID: d.event, ConsumerName: "letters"}
		res, err := store.Process(ctx, e, sendLetter(d.event, d.customer))
		if err != nil { // the inbox could not record the outcome: hand the message back
			log.Fatal(err)
		}
		fmt.Println(d.event+":", describe(res))
	}

	fmt.Println("letters:", letters(ctx, db))
	// Output:
	// ev-1: PROCESSED, row PROCESSED, attempts 1
	// ev-1: DUPLICATE, row PROCESSED, attempts 1
	// ev-2: REJECTED, row REJECTED, attempts 1, reason CUSTOMER_UNKNOWN
	// letters: 1
}

// Three deliveries in one transaction: each result is what Process would
// have returned for it. The rejection rolls back only its own writes, and
// the same event twice in one batch runs once.
func ExampleStore_ProcessBatch() {
	ctx := context.Background()
	db, store, done := openExampleStore(ctx)
	defer done()

	var items []inbox.BatchItem
	for _, d := range []struct{ event, customer string }{
		{"ev-1", "K-100"}, // new
		{"ev-2", ""},      // unknown customer
		{"ev-1", "K-100"}, // ev-1 again, in the same batch
	} {
		items = append(items, inbox.BatchItem{
			Entry:   inbox.Entry{EventID: d.event, ConsumerName: "letters"},
			Handler: sendLetter(d.event, d.customer),
		})
	}
	results, err := store.ProcessBatch(ctx, items)
	if err != nil { // the commit failed: hand the whole batch back
		log.Fatal(err)
	}
	for i, res := range results {
		fmt.Println(items[i].Entry.EventID+":", describe(res))
	}

	// A later delivery of ev-1 is a duplicate.
	res, err := store.Process(ctx, items[0].Entry, sendLetter("ev-1", "K-100"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ev-1 later:", describe(res))

	fmt.Println("letters:", letters(ctx, db))
	// Output:
	// ev-1: PROCESSED, row PROCESSED, attempts 1
	// ev-2: REJECTED, row REJECTED, attempts 1, reason CUSTOMER_UNKNOWN
	// ev-1: DUPLICATE, row PROCESSED, attempts 1
	// ev-1 later: DUPLICATE, row PROCESSED, attempts 1
	// letters: 1
}
