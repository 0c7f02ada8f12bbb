package invoice

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/schema"
)

//go:embed invoice_*.sql
var ddl embed.FS

// DDL returns the business-table DDL for a dialect ("postgres", "mysql",
// "sqlite", "oracle"; the aliases of inbox.DialectByName work too).
func DDL(dialect string) (string, error) {
	d, err := inbox.DialectByName(dialect)
	if err != nil {
		return "", fmt.Errorf("invoice: %w", err)
	}
	b, err := ddl.ReadFile("invoice_" + d.Name() + ".sql")
	if err != nil {
		return "", fmt.Errorf("invoice: no DDL for dialect %q", d.Name())
	}
	return string(b), nil
}

// Statements returns the DDL of dialect split into single statements:
// statements end with ';' at the end of a line, in the Oracle file PL/SQL
// blocks end with a line holding only "/".
func Statements(dialect string) ([]string, error) {
	text, err := DDL(dialect)
	if err != nil {
		return nil, err
	}
	return schema.Split(dialect, text), nil
}

// Migrate creates invoice_customers, shipping_letters and archived_documents
// (and their indexes) if they do not exist. Running it again changes
// nothing. It does not create the inbox table: call inbox.Migrate too.
func Migrate(ctx context.Context, db *sql.DB, dialect string) error {
	stmts, err := Statements(dialect)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("invoice: migrate %s: %w\n\tstatement: %.120s", dialect, err, st)
		}
	}
	return nil
}

// Customer is one row of invoice_customers.
type Customer struct {
	No      string
	Name    string
	Address string
}

// DemoCustomers are the customers the demo and the approval cases know.
var DemoCustomers = []Customer{
	{No: "K-100", Name: "Muster AG", Address: "Bahnhofstrasse 1, 8001 Zuerich"},
	{No: "K-200", Name: "Beispiel GmbH", Address: "Hauptstrasse 7, 10115 Berlin"},
}

// SeedCustomers inserts customers (DemoCustomers when none are given) that
// are not there yet; existing customer numbers are left unchanged.
func SeedCustomers(ctx context.Context, db *sql.DB, d inbox.Dialect, customers ...Customer) error {
	if len(customers) == 0 {
		customers = DemoCustomers
	}
	for _, c := range customers {
		var n int
		if err := db.QueryRowContext(ctx, d.Rebind(`SELECT COUNT(*) FROM invoice_customers WHERE customer_no = ?`), c.No).Scan(&n); err != nil {
			return fmt.Errorf("invoice: seed customers: %w", err)
		}
		if n > 0 {
			continue
		}
		if _, err := db.ExecContext(ctx, d.Rebind(`INSERT INTO invoice_customers (customer_no, name, address) VALUES (?, ?, ?)`), c.No, c.Name, c.Address); err != nil {
			return fmt.Errorf("invoice: seed customer %s: %w", c.No, err)
		}
	}
	return nil
}

// Querier is what the table functions need: a *sql.Tx or a *sql.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ErrCustomerNotFound is returned by LookupCustomer.
var ErrCustomerNotFound = errors.New("invoice: customer not found")

// LookupCustomer reads one customer, or returns ErrCustomerNotFound.
func LookupCustomer(ctx context.Context, q Querier, d inbox.Dialect, no string) (Customer, error) {
	c := Customer{No: no}
	err := q.QueryRowContext(ctx, d.Rebind(`SELECT name, address FROM invoice_customers WHERE customer_no = ?`), no).Scan(&c.Name, &c.Address)
	if errors.Is(err, sql.ErrNoRows) {
		return Customer{}, fmt.Errorf("%w: %s", ErrCustomerNotFound, no)
	}
	if err != nil {
		return Customer{}, fmt.Errorf("invoice: read customer %s: %w", no, err)
	}
	return c, nil
}

// Letter is a shipping letter: one row of shipping_letters, and what the
// LetterService sends.
type Letter struct {
	LetterID   string
	InvoiceNo  string
	CustomerNo string
	Name       string
	Address    string
	Amount     string
	Currency   string
	// EventID is the event that caused the letter ("" when the legacy
	// consumer got a message without one).
	EventID   string
	CreatedAt time.Time
}

// InsertLetter writes a shipping_letters row.
func InsertLetter(ctx context.Context, q Querier, d inbox.Dialect, l Letter) error {
	var ev any
	if l.EventID != "" {
		ev = l.EventID
	}
	_, err := q.ExecContext(ctx, d.Rebind(`INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES (?, ?, ?, ?, ?)`),
		l.LetterID, l.InvoiceNo, l.CustomerNo, ev, d.TimeArg(l.CreatedAt))
	if err != nil {
		return fmt.Errorf("invoice: insert shipping letter: %w", err)
	}
	return nil
}

// Document is one row of archived_documents: the invoice as received.
type Document struct {
	DocumentID string
	InvoiceNo  string
	Payload    string
	CreatedAt  time.Time
}

// InsertDocument writes an archived_documents row.
func InsertDocument(ctx context.Context, q Querier, d inbox.Dialect, doc Document) error {
	_, err := q.ExecContext(ctx, d.Rebind(`INSERT INTO archived_documents (document_id, invoice_no, payload, created_at) VALUES (?, ?, ?, ?)`),
		doc.DocumentID, doc.InvoiceNo, doc.Payload, d.TimeArg(doc.CreatedAt))
	if err != nil {
		return fmt.Errorf("invoice: archive document: %w", err)
	}
	return nil
}

// CheckConfig is the invoice consumer's configuration of `inboxctl check`
// (the business checks on its own tables): check.json, embedded. It is the
// example for other consumers' files.
//
//go:embed check.json
var CheckConfig []byte
