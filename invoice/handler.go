package invoice

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/outbox"
)

// LetterService sends shipping letters (a print-and-mail provider) when
// called: the port of the legacy consumer (invoice/legacy), which calls it
// itself. It is outside the database: a letter sent cannot be rolled back.
// The refactored consumer calls no LetterService: it writes a
// LetterRequest to the outbox, and the relay sends it after the commit.
//
// Send must treat idempotencyKey as the identity of the request: a second
// call with a key it has seen must not send a second letter and must
// return nil. An empty key means "no idempotency" (the legacy consumer). An
// error means the letter was not sent. Send must be safe for concurrent
// use.
type LetterService interface {
	Send(ctx context.Context, l Letter, idempotencyKey string) error
}

// LetterServiceFunc adapts a function to LetterService.
type LetterServiceFunc func(ctx context.Context, l Letter, idempotencyKey string) error

// Send calls f.
func (f LetterServiceFunc) Send(ctx context.Context, l Letter, idempotencyKey string) error {
	return f(ctx, l, idempotencyKey)
}

// DefaultCurrencies are the currencies supported when Config.Currencies is empty.
var DefaultCurrencies = []string{"CHF", "EUR", "GBP", "USD"}

// Config configures the refactored invoice consumer's handler.
type Config struct {
	// Dialect is the SQL dialect of the database the inbox transaction runs
	// on. Required.
	Dialect inbox.Dialect
	// Outbox receives the letter requests, in the inbox transaction; a
	// relay of it (outbox.Relay: `inboxctl run` runs one) sends them after
	// the commit. It must be on the database of the inbox transaction.
	// Required.
	Outbox *outbox.Store
	// LetterDestination is where the relay sends each letter request (a
	// LetterRequest as JSON): an http:// or https:// URL of the letter
	// provider, POSTed with the letter id as Idempotency-Key, or a queue of
	// the relay's broker (the letter id as eventId). Required.
	LetterDestination string
	// Currencies are the supported ISO 4217 codes. Defaults to
	// DefaultCurrencies.
	Currencies []string
	// IDFunc returns a new unique id for archived documents. Defaults to
	// 16 random bytes in hex. Tests inject a counter so that transcripts
	// are deterministic.
	IDFunc func() string
	// Clock stamps created_at. Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
}

func (c *Config) setDefaults() {
	if len(c.Currencies) == 0 {
		c.Currencies = DefaultCurrencies
	}
	if c.IDFunc == nil {
		c.IDFunc = RandomID
	}
	if c.Clock == nil {
		c.Clock = inboxkit.SystemClock{}
	}
}

func (c *Config) validate() error {
	switch {
	case c.Dialect.Name() == "":
		return errors.New("invoice: Config.Dialect is required: inbox.Postgres, inbox.MySQL, inbox.SQLite or inbox.Oracle")
	case c.Outbox == nil:
		return errors.New("invoice: Config.Outbox is required: the outbox.Store the letter requests are written to (outbox.New on the inbox's database)")
	case c.LetterDestination == "":
		return errors.New("invoice: Config.LetterDestination is required: the letter provider's URL (or a queue) the relay sends the letter requests to")
	}
	return nil
}

// RandomID returns 16 random bytes in hex.
func RandomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LetterIDFor returns the letter id of the letter for one event: derived
// from the event id, so that every attempt of the event names the same
// letter. It is the letter request's outbox message id, and so the
// Idempotency-Key the letter provider sees on every send of it.
func LetterIDFor(eventID string) string {
	sum := sha256.Sum256([]byte("invoice-letter\x00" + eventID))
	return hex.EncodeToString(sum[:16])
}

// NewHandler returns the refactored invoice consumer (the seed's "Nachher")
// as a consumer.Handler. Inside the inbox transaction it decodes the event
// (poison: INVALID_ENCODING, MALFORMED_PAYLOAD, MISSING_FIELD), checks the
// business rules (rejections: CUSTOMER_UNKNOWN, INVALID_AMOUNT,
// CURRENCY_UNSUPPORTED), writes the shipping letter and the archived
// document, and writes the letter request to the outbox (message id = the
// letter id, key = the customer number) for Config.LetterDestination. It
// calls nothing outside the database: the relay sends the request after the
// commit, at least once, always with the letter id as idempotency key, so
// the provider sends the letter once; a rollback sends nothing. Its effects
// are all in the transaction, so a consumer running it may declare
// consumer.Config.EffectsInTx (inboxctl run does).
func NewHandler(cfg Config) (consumer.Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	h := &handler{cfg: cfg}
	return h.handle, nil
}

type handler struct{ cfg Config }

func (h *handler) handle(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
	if !utf8.Valid(m.Body) {
		// Every database with text columns refuses it (or stores garbage):
		// retrying cannot help.
		return classify.Poison(inboxkit.ReasonInvalidEncoding, fmt.Errorf("invoice: event %s: the body is not valid UTF-8", m.ID))
	}
	ev, err := Decode(m.Body)
	if err != nil {
		return err
	}
	d := h.cfg.Dialect
	cust, err := LookupCustomer(ctx, tx, d, ev.CustomerNo)
	if errors.Is(err, ErrCustomerNotFound) {
		return classify.Reject(ReasonCustomerUnknown, err)
	}
	if err != nil {
		return err
	}
	amount, _ := ev.AmountValue() // Decode checked it
	if amount.Sign() <= 0 {
		return classify.Reject(ReasonInvalidAmount, fmt.Errorf("invoice %s: amount %s is not positive", ev.InvoiceNo, ev.Amount))
	}
	if !slices.Contains(h.cfg.Currencies, strings.ToUpper(ev.Currency)) {
		return classify.Reject(ReasonCurrencyUnsupported, fmt.Errorf("invoice %s: currency %q is not supported", ev.InvoiceNo, ev.Currency))
	}
	now := h.cfg.Clock.Now().UTC()
	letter := Letter{
		LetterID: LetterIDFor(m.ID), InvoiceNo: ev.InvoiceNo, CustomerNo: cust.No, Name: cust.Name, Address: cust.Address,
		Amount: ev.Amount, Currency: strings.ToUpper(ev.Currency), EventID: m.ID, CreatedAt: now,
	}
	if err := InsertLetter(ctx, tx, d, letter); err != nil {
		return err
	}
	doc := Document{DocumentID: h.cfg.IDFunc(), InvoiceNo: ev.InvoiceNo, Payload: string(m.Body), CreatedAt: now}
	if err := InsertDocument(ctx, tx, d, doc); err != nil {
		return err
	}
	body, err := json.Marshal(NewLetterRequest(letter))
	if err != nil {
		return err
	}
	_, err = h.cfg.Outbox.Add(ctx, tx, outbox.Message{
		ID: letter.LetterID, Destination: h.cfg.LetterDestination, Key: letter.CustomerNo,
		Headers: map[string]string{"Content-Type": "application/json"}, Body: body,
	})
	if err != nil {
		return fmt.Errorf("invoice: request letter %s for invoice %s: %w", letter.LetterID, ev.InvoiceNo, err)
	}
	return nil
}

// LetterRequest is the body of a letter request (JSON), what the relay
// POSTs to the letter provider with the letter id as Idempotency-Key. The
// black-box recorder's letter service (golden.BlackBox) serves this
// contract, and the Java fixtures in testdata/legacy-java POST it too.
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
func NewLetterRequest(l Letter) LetterRequest {
	return LetterRequest{LetterID: l.LetterID, InvoiceNo: l.InvoiceNo, CustomerNo: l.CustomerNo, Name: l.Name,
		Address: l.Address, Amount: l.Amount, Currency: l.Currency, EventID: l.EventID}
}
