// Package invoicegolden connects the invoice consumers to the approval
// harness: golden.Factory values for the legacy port and the refactored
// consumer, so that tests and `inboxctl golden verify|approve` play the
// same corpus (testdata/golden) through both.
package invoicegolden

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify/breaker"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/invoice/legacy"
)

// ConsumerName is the CONSUMER_NAME of the refactored consumer.
const ConsumerName = "invoice-consumer"

// Labels of the approved files: approved.legacy.txt, approved.refactored.txt.
const (
	LabelLegacy     = "legacy"
	LabelRefactored = "refactored"
)

// LetterService is the name of the scripted letter service in scenarios
// ("fail letter-service 2").
const LetterService = "letter-service"

// Tables are the business tables in the transcript.
var Tables = []golden.Table{
	{Name: "invoice_customers", Columns: []string{"customer_no", "name", "address"}},
	{Name: "shipping_letters", Columns: []string{"letter_id", "invoice_no", "customer_no", "event_id", "created_at"}, OrderBy: "invoice_no, letter_id"},
	{Name: "archived_documents", Columns: []string{"document_id", "invoice_no", "payload", "created_at"}, OrderBy: "invoice_no, document_id"},
}

func letters(env *golden.Env) invoice.LetterService {
	return invoice.LetterServiceFunc(func(ctx context.Context, l invoice.Letter, key string) error {
		return env.Call(ctx, LetterService, key, NewLetterRequest(l).Summary())
	})
}

func setup(env *golden.Env) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := invoice.Migrate(ctx, env.DB, env.Dialect.Name()); err != nil {
			return err
		}
		return invoice.SeedCustomers(ctx, env.DB, env.Dialect)
	}
}

// Refactored builds the refactored consumer (invoice.NewHandler) with a
// letter-service breaker that opens after 5 consecutive failures.
// configure, if not nil, adjusts the handler's configuration.
func Refactored(configure func(*invoice.Config)) golden.Factory {
	return func(env *golden.Env) (golden.Subject, error) {
		br, err := breaker.New(breaker.Config{Name: LetterService, MaxFailures: 5, OpenTimeout: time.Hour})
		if err != nil {
			return golden.Subject{}, err
		}
		cfg := invoice.Config{Dialect: env.Dialect, Letters: letters(env), Breaker: br, IDFunc: env.IDFunc, Clock: env.Clock}
		if configure != nil {
			configure(&cfg)
		}
		h, err := invoice.NewHandler(cfg)
		if err != nil {
			return golden.Subject{}, err
		}
		return golden.Subject{Name: ConsumerName, Handler: h, Setup: setup(env), Tables: Tables}, nil
	}
}

// Legacy builds the legacy port (invoice/legacy).
func Legacy() golden.Factory {
	return func(env *golden.Env) (golden.Subject, error) {
		mdb, err := legacy.New(legacy.Config{
			DB: env.DB, Dialect: env.Dialect, Letters: letters(env), IDFunc: env.IDFunc, Clock: env.Clock,
			BeforeCommitFunc: env.BeforeCommit,
		})
		if err != nil {
			return golden.Subject{}, err
		}
		return golden.Subject{Name: "invoice-mdb", Legacy: func(ctx context.Context, m inboxkit.Message) error {
			return mdb.OnMessage(ctx, m)
		}, Setup: setup(env), Tables: Tables}, nil
	}
}

// Verify checks every case under dir for both consumers (approved.legacy.txt
// and approved.refactored.txt) without package testing, for
// `inboxctl golden verify DIR`. It writes received files for mismatches and
// never writes approved files.
func Verify(ctx context.Context, dir string, opts ...golden.Option) ([]golden.Mismatch, error) {
	return both(ctx, dir, golden.Verify, opts)
}

// Approve writes the approved files of every case under dir for both
// consumers, for `inboxctl golden approve DIR`. It refuses in CI
// (golden.ErrCI).
func Approve(ctx context.Context, dir string, opts ...golden.Option) ([]golden.Mismatch, error) {
	return both(ctx, dir, golden.Approve, opts)
}

func both(ctx context.Context, dir string, fn func(context.Context, string, golden.Factory, ...golden.Option) ([]golden.Mismatch, error), opts []golden.Option) ([]golden.Mismatch, error) {
	leg, err := fn(ctx, dir, Legacy(), append(opts, golden.Label(LabelLegacy))...)
	if err != nil {
		return leg, err
	}
	ref, err := fn(ctx, dir, Refactored(nil), append(opts, golden.Label(LabelRefactored))...)
	return append(leg, ref...), err
}

// LetterRequest is the body of a letter-service call over HTTP, the
// contract the black-box recorder serves (golden.BlackBox): the Java
// fixtures in testdata/legacy-java and `inboxctl run --letter-service URL`
// POST it as JSON, with the idempotency key (if any) in the
// Idempotency-Key header.
type LetterRequest struct {
	LetterID   string `json:"letterId"`
	InvoiceNo  string `json:"invoiceNo"`
	CustomerNo string `json:"customerNo"`
	Name       string `json:"name"`
	Address    string `json:"address"`
	Amount     string `json:"amount"`
	Currency   string `json:"currency"`
	EventID    string `json:"eventId"`
}

// NewLetterRequest is the request for a letter.
func NewLetterRequest(l invoice.Letter) LetterRequest {
	return LetterRequest{LetterID: l.LetterID, InvoiceNo: l.InvoiceNo, CustomerNo: l.CustomerNo, Name: l.Name,
		Address: l.Address, Amount: l.Amount, Currency: l.Currency, EventID: l.EventID}
}

// Summary describes the letter the way the in-process transcripts do.
func (r LetterRequest) Summary() string {
	return fmt.Sprintf("letter %s invoice %s to %s (%s), %s %s", r.LetterID, r.InvoiceNo, r.CustomerNo, r.Name, r.Amount, r.Currency)
}

// BlackBox describes an invoice consumer process for golden.PlayBlackBox:
// the invoice tables with the demo customers, the letter service, and the
// transcript's tables. name heads the transcript; command starts one
// instance (sh -c).
func BlackBox(name, command string) golden.BlackBox {
	return golden.BlackBox{
		Name: name, Command: command, Service: LetterService, Tables: Tables,
		SetupFunc: func(ctx context.Context, db *sql.DB) error {
			if err := invoice.Migrate(ctx, db, "postgres"); err != nil {
				return err
			}
			return invoice.SeedCustomers(ctx, db, inbox.Postgres)
		},
		SummaryFunc: func(body []byte) string {
			var r LetterRequest
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Sprintf("undecodable request %q", body)
			}
			return r.Summary()
		},
	}
}
