package invoice

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/classify/breaker"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// LetterService sends shipping letters (a print-and-mail provider). It is
// outside the database: a letter sent cannot be rolled back.
//
// Send must treat idempotencyKey as the identity of the request: a second
// call with a key it has seen (after a crash before the commit, the
// redelivery calls again) must not send a second letter and must return nil.
// An empty key means "no idempotency" (the legacy consumer). An error means
// the letter was not sent; wrap it with classify.Reject or classify.Poison
// when the message itself is at fault, else it is technical and retried.
// Send must be safe for concurrent use.
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
	// Letters sends the shipping letters. Required.
	Letters LetterService
	// Breaker guards Letters. Defaults to a breaker named "letter-service"
	// with the breaker package's defaults (5 consecutive failures open it
	// for 30s).
	// Share it with consumer.Config.PausedFunc (Breaker.Open) to pause intake
	// while the letter service is down.
	Breaker *breaker.Breaker
	// Currencies are the supported ISO 4217 codes. Defaults to
	// DefaultCurrencies.
	Currencies []string
	// IDFunc returns a new unique id for letters and archived documents.
	// Defaults to 16 random bytes in hex. Tests inject a counter so that
	// transcripts are deterministic.
	IDFunc func() string
	// Clock stamps created_at. Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
}

func (c *Config) setDefaults() error {
	if c.Breaker == nil {
		b, err := breaker.New(breaker.Config{Name: "letter-service"})
		if err != nil {
			return err
		}
		c.Breaker = b
	}
	if len(c.Currencies) == 0 {
		c.Currencies = DefaultCurrencies
	}
	if c.IDFunc == nil {
		c.IDFunc = RandomID
	}
	if c.Clock == nil {
		c.Clock = inboxkit.SystemClock{}
	}
	return nil
}

func (c *Config) validate() error {
	switch {
	case c.Dialect.Name() == "":
		return errors.New("invoice: Config.Dialect is required: inbox.Postgres, inbox.MySQL, inbox.SQLite or inbox.Oracle")
	case c.Letters == nil:
		return errors.New("invoice: Config.Letters is required: the LetterService that sends the shipping letters")
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
// from the event id, so that every attempt of the event (a send before a
// failed commit, then the redelivery that commits) names the same letter,
// and the id stored in shipping_letters is the id of the letter the letter
// service sent.
func LetterIDFor(eventID string) string {
	sum := sha256.Sum256([]byte("invoice-letter\x00" + eventID))
	return hex.EncodeToString(sum[:16])
}

// NewHandler returns the refactored invoice consumer (the seed's "Nachher")
// as a consumer.Handler. Inside the inbox transaction it decodes the event
// (poison: INVALID_ENCODING, MALFORMED_PAYLOAD, MISSING_FIELD), checks the business rules
// (rejections: CUSTOMER_UNKNOWN, INVALID_AMOUNT, CURRENCY_UNSUPPORTED),
// writes the shipping letter and the archived document, and sends the letter
// through the breaker with the event id as idempotency key. A failed send
// returns a technical error: the transaction rolls back and the message is
// redelivered; the letter service deduplicates a send that happened before a
// failed commit.
func NewHandler(cfg Config) (consumer.Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
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
	return h.cfg.Breaker.Do(ctx, func(ctx context.Context) error {
		if err := h.cfg.Letters.Send(ctx, letter, m.ID); err != nil {
			return fmt.Errorf("invoice: send letter %s for invoice %s: %w", letter.LetterID, ev.InvoiceNo, err)
		}
		return nil
	})
}
