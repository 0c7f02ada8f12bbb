// Package legacy is a faithful Go port of the invoice consumer inboxkit
// replaces: the seed's "Vorher" message-driven bean. It exists to be
// characterized by approval tests (package golden), never to be deployed.
//
// What it does, warts included:
//
//   - no inbox table: a redelivered or resent event is processed again, so
//     every duplicate creates a second shipping letter, a second archived
//     document and a second letter sent;
//   - the letter is sent first, without an idempotency key, and only then
//     are the letter and the document written and committed in one
//     transaction: a crash or a failed commit after the send sends the
//     letter again on redelivery, and a failed send writes nothing (the
//     real bean, testdata/legacy-java/src/LegacyInvoiceEventMdb.java, does
//     it in this order; the black-box record in testdata/golden checks it);
//   - every exception is thrown back to the container, business errors
//     (unknown customer, invalid amount) and undecodable messages too, so the
//     broker redelivers them until its own redelivery limit moves them to its
//     dead-letter queue without a reason;
//   - a message without an event id is processed like any other.
//
// [MDB.OnMessage] returns that exception as an error; the caller (the golden
// runner, or a loop around a broker source) maps nil to an acknowledgement
// and an error to a redelivery.
package legacy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/invoice"
)

// Config configures the legacy consumer.
type Config struct {
	// DB is the business database (the invoice tables). Required.
	DB *sql.DB
	// Dialect is DB's SQL dialect. Required.
	Dialect inbox.Dialect
	// Letters sends the letters (called without idempotency key). Required.
	Letters invoice.LetterService
	// Currencies are the supported currencies. Defaults to the legacy
	// bean's hard-coded list (CHF, EUR, GBP, USD), frozen here on purpose:
	// the port must not change when the refactored consumer's defaults do.
	Currencies []string
	// IDFunc returns new ids. Defaults to invoice.RandomID.
	IDFunc func() string
	// Clock stamps created_at. Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
	// EventIDHeader is the header holding the event id. Defaults to "eventId".
	EventIDHeader string
	// BeforeCommitFunc, if set, is called right before the transaction
	// commits; an error rolls it back and is thrown like any other. Tests use
	// it to inject a crash or a failing commit. Defaults to nil.
	BeforeCommitFunc func(ctx context.Context) error
}

// MDB is the legacy message-driven bean.
type MDB struct{ cfg Config }

// New returns the legacy consumer.
func New(cfg Config) (*MDB, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("legacy: Config.DB is required")
	case cfg.Dialect.Name() == "":
		return nil, errors.New("legacy: Config.Dialect is required")
	case cfg.Letters == nil:
		return nil, errors.New("legacy: Config.Letters is required")
	}
	if len(cfg.Currencies) == 0 {
		cfg.Currencies = []string{"CHF", "EUR", "GBP", "USD"}
	}
	if cfg.IDFunc == nil {
		cfg.IDFunc = invoice.RandomID
	}
	if cfg.Clock == nil {
		cfg.Clock = inboxkit.SystemClock{}
	}
	if cfg.EventIDHeader == "" {
		cfg.EventIDHeader = "eventId"
	}
	return &MDB{cfg: cfg}, nil
}

// OnMessage handles one message like the legacy bean: it returns nil when
// the container would acknowledge and the thrown exception otherwise.
func (b *MDB) OnMessage(ctx context.Context, m inboxkit.Message) error {
	// try { ... } catch (Exception e) { throw new RuntimeException(e); }
	if err := b.onMessage(ctx, m); err != nil {
		return fmt.Errorf("legacy: RuntimeException: %w", err)
	}
	return nil
}

func (b *MDB) onMessage(ctx context.Context, m inboxkit.Message) error {
	ev, err := invoice.Decode(m.Body)
	if err != nil {
		return err
	}
	d := b.cfg.Dialect
	cust, err := invoice.LookupCustomer(ctx, b.cfg.DB, d, ev.CustomerNo)
	if err != nil {
		return err
	}
	amount, _ := ev.AmountValue()
	if amount.Sign() <= 0 {
		return fmt.Errorf("IllegalArgumentException: amount %s is not positive", ev.Amount)
	}
	cur := strings.ToUpper(ev.Currency)
	supported := false
	for _, c := range b.cfg.Currencies {
		supported = supported || c == cur
	}
	if !supported {
		return fmt.Errorf("IllegalArgumentException: currency %s not supported", ev.Currency)
	}

	now := b.cfg.Clock.Now().UTC()
	letter := invoice.Letter{
		LetterID: b.cfg.IDFunc(), InvoiceNo: ev.InvoiceNo, CustomerNo: cust.No, Name: cust.Name, Address: cust.Address,
		Amount: ev.Amount, Currency: cur, EventID: m.Header(b.cfg.EventIDHeader), CreatedAt: now,
	}
	// letterClient.send(letter): first, and without idempotency key.
	if err := b.cfg.Letters.Send(ctx, letter, ""); err != nil {
		return err
	}
	// shippingLetterDao.create(...); archiveDao.store(...); one transaction,
	// committed after the letter went out.
	tx, err := b.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := invoice.InsertLetter(ctx, tx, d, letter); err != nil {
		return err
	}
	doc := invoice.Document{DocumentID: b.cfg.IDFunc(), InvoiceNo: ev.InvoiceNo, Payload: string(m.Body), CreatedAt: now}
	if err := invoice.InsertDocument(ctx, tx, d, doc); err != nil {
		return err
	}
	if b.cfg.BeforeCommitFunc != nil {
		if err := b.cfg.BeforeCommitFunc(ctx); err != nil {
			return err
		}
	}
	return tx.Commit()
}
