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
	"io"
	"log/slog"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/invoice/legacy"
	"github.com/inboxkit/inboxkit/outbox"
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
		return env.Call(ctx, LetterService, key, Summary(invoice.NewLetterRequest(l)))
	})
}

func setup(env *golden.Env, out *outbox.Store) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := invoice.Migrate(ctx, env.DB, env.Dialect.Name()); err != nil {
			return err
		}
		if out != nil {
			if _, err := out.Migrate(ctx); err != nil {
				return err
			}
		}
		return invoice.SeedCustomers(ctx, env.DB, env.Dialect)
	}
}

// LetterDestination is the refactored consumer's letter destination in the
// in-process transcripts: the relay's sends to it are calls of the
// scripted LetterService.
const LetterDestination = "https://letter-service.example/letters"

// RelayLease is the lease of the refactored consumer's relay in process:
// a relay that dies in a call gives its key back after it.
const RelayLease = 30 * time.Second

// Refactored builds the refactored consumer (invoice.NewHandler) with its
// outbox and a relay (outbox.Relay.Drain) that sends each letter request
// to the scripted letter service after the commit, with the letter id as
// idempotency key; a failed send is tried again after 1s, doubling,
// without jitter, and parked after the scenario's max-attempts.
// configure, if not nil, adjusts the handler's configuration.
func Refactored(configure func(*invoice.Config)) golden.Factory {
	return func(env *golden.Env) (golden.Subject, error) {
		out, err := outbox.New(env.DB, env.Dialect, outbox.Config{Clock: env.Clock})
		if err != nil {
			return golden.Subject{}, err
		}
		cfg := invoice.Config{Dialect: env.Dialect, Outbox: out, LetterDestination: LetterDestination, IDFunc: env.IDFunc, Clock: env.Clock}
		if configure != nil {
			configure(&cfg)
		}
		h, err := invoice.NewHandler(cfg)
		if err != nil {
			return golden.Subject{}, err
		}
		relay, err := outbox.NewRelay(out, outbox.RelayConfig{
			Name:  fmt.Sprintf("golden-relay-%d", env.Instance),
			Lease: RelayLease,
			Retry: inboxkit.RetryPolicy{MaxAttempts: env.MaxAttempts,
				Redelivery: inboxkit.Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			SendFunc: func(ctx context.Context, m outbox.Outgoing) error {
				var r invoice.LetterRequest
				if err := json.Unmarshal(m.Body, &r); err != nil {
					return err
				}
				return env.Call(ctx, LetterService, m.ID, Summary(r))
			},
		})
		if err != nil {
			return golden.Subject{}, err
		}
		return golden.Subject{Name: ConsumerName, Handler: h, Setup: setup(env, out), Tables: Tables,
			Outbox: out.Table(), RelayLease: RelayLease,
			Relay: func(ctx context.Context) (golden.RelayResult, error) {
				d, err := relay.Drain(ctx)
				return golden.RelayResult{Sent: d.Sent, Failed: d.Failed, Parked: d.Parked, NextDue: d.NextDue}, err
			}}, nil
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
		}, Setup: setup(env, nil), Tables: Tables}, nil
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

// Summary describes a letter request (invoice.LetterRequest, the body of a
// letter-service call over HTTP: the contract the black-box recorder serves,
// which the Java fixtures in testdata/legacy-java and the relay of `inboxctl
// run --letter-service URL` POST) the way the transcripts do.
func Summary(r invoice.LetterRequest) string {
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
			var r invoice.LetterRequest
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Sprintf("undecodable request %q", body)
			}
			return Summary(r)
		},
	}
}
