package invoice

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// Reason codes of the invoice consumer.
const (
	// ReasonCustomerUnknown: the invoice names a customer that is not in
	// invoice_customers (business rejection).
	ReasonCustomerUnknown = "CUSTOMER_UNKNOWN"
	// ReasonInvalidAmount: the amount is zero or negative (business rejection).
	ReasonInvalidAmount = "INVALID_AMOUNT"
	// ReasonCurrencyUnsupported: the currency is not in Config.Currencies
	// (business rejection).
	ReasonCurrencyUnsupported = "CURRENCY_UNSUPPORTED"
)

// InvoiceCreated is the event body, as JSON:
//
//	{"invoiceNo":"INV-1001","customerNo":"K-100","amount":"120.50","currency":"EUR","issuedAt":"2026-01-05"}
//
// The amount is a decimal string, never a JSON number, so no binary
// floating point touches money. issuedAt is a date (2006-01-02) or an
// RFC 3339 timestamp.
type InvoiceCreated struct {
	InvoiceNo  string `json:"invoiceNo"`
	CustomerNo string `json:"customerNo"`
	Amount     string `json:"amount"`
	Currency   string `json:"currency"`
	IssuedAt   string `json:"issuedAt"`
}

// ErrDecode is wrapped by every error of Decode.
var ErrDecode = errors.New("invoice: cannot decode InvoiceCreated")

// Decode reads an InvoiceCreated body. Its errors are poison decisions: a
// body that is not a JSON object of strings, has trailing data, an amount
// that is not a decimal number or an issuedAt that is not a date is
// classify.Poison("MALFORMED_PAYLOAD"); a missing or empty required field is
// classify.Poison("MISSING_FIELD") naming every missing field. Decode does
// not judge the business values (a negative amount decodes fine).
func Decode(body []byte) (InvoiceCreated, error) {
	var ev InvoiceCreated
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&ev); err != nil {
		return InvoiceCreated{}, classify.Poison(inboxkit.ReasonMalformedPayload, fmt.Errorf("%w: %v", ErrDecode, err))
	}
	if dec.More() {
		return InvoiceCreated{}, classify.Poison(inboxkit.ReasonMalformedPayload, fmt.Errorf("%w: data after the JSON object", ErrDecode))
	}
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"invoiceNo", ev.InvoiceNo}, {"customerNo", ev.CustomerNo}, {"amount", ev.Amount},
		{"currency", ev.Currency}, {"issuedAt", ev.IssuedAt},
	} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return InvoiceCreated{}, classify.Poison(inboxkit.ReasonMissingField, fmt.Errorf("%w: missing %s", ErrDecode, strings.Join(missing, ", ")))
	}
	if _, err := ev.AmountValue(); err != nil {
		return InvoiceCreated{}, classify.Poison(inboxkit.ReasonMalformedPayload, fmt.Errorf("%w: %v", ErrDecode, err))
	}
	if _, err := ev.IssuedTime(); err != nil {
		return InvoiceCreated{}, classify.Poison(inboxkit.ReasonMalformedPayload, fmt.Errorf("%w: %v", ErrDecode, err))
	}
	return ev, nil
}

// AmountValue parses Amount as an exact decimal ("120.50", "-3", "0.0").
func (ev InvoiceCreated) AmountValue() (*big.Rat, error) {
	s := strings.TrimSpace(ev.Amount)
	if s == "" || strings.ContainsAny(s, "eE/") || len(s) > 40 {
		return nil, fmt.Errorf("amount %q is not a decimal number", ev.Amount)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("amount %q is not a decimal number", ev.Amount)
	}
	return r, nil
}

// IssuedTime parses IssuedAt as a date (2006-01-02) or an RFC 3339 time.
func (ev InvoiceCreated) IssuedTime() (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, ev.IssuedAt); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, ev.IssuedAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("issuedAt %q is neither a date (2006-01-02) nor an RFC 3339 time", ev.IssuedAt)
	}
	return t, nil
}
