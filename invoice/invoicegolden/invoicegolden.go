// Package invoicegolden connects the invoice consumers to the approval
// harness: golden.Factory values for the legacy port and the refactored
// consumer, so that tests and `inboxctl golden verify|approve` play the
// same corpus (testdata/golden) through both.
package invoicegolden

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/golden"
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
		return env.Call(ctx, LetterService, key, fmt.Sprintf("letter %s invoice %s to %s (%s), %s %s", l.LetterID, l.InvoiceNo, l.CustomerNo, l.Name, l.Amount, l.Currency))
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
		br, err := classify.NewBreaker(classify.BreakerConfig{Name: LetterService, MaxFailures: 5, OpenTimeout: time.Hour})
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
