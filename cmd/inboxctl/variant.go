package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/outbox"
)

// handlerVariant, when set, wraps the invoice handler `run` builds. It is
// nil in every build but one made with the build tag inboxkit_seededbug
// (variant_seededbug.go): the shadow tests build that binary to run a
// refactored handler with a known bug beside the legacy bean. Such a
// binary runs only with --shadow (docs/shadow.md, "Tested").
var handlerVariant func(consumer.Handler, *outbox.Store) consumer.Handler

// handlerVariantName names the variant in the refusal and the log.
const handlerVariantName = "seeded bug: every letter's amount rounded to whole units (build tag inboxkit_seededbug)"

// roundingHandler is the seeded bug of issue 26, item 5: the invoice
// handler h, but the letter request it writes to ob carries the amount
// rounded to whole units (roundedLetter), in the same transaction, so the
// relay sends (a shadow run: records) the rounded letter. Nothing else
// changes: the letter, the document and the outcome are h's.
func roundingHandler(h consumer.Handler, ob *outbox.Store) consumer.Handler {
	d := ob.Dialect()
	sel := d.Rebind(`SELECT BODY FROM ` + ob.Table() + ` WHERE MESSAGE_ID = ?`)
	upd := d.Rebind(`UPDATE ` + ob.Table() + ` SET BODY = ? WHERE MESSAGE_ID = ?`)
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		if err := h(ctx, tx, m); err != nil {
			return err
		}
		id := invoice.LetterIDFor(m.ID)
		var body []byte
		if err := tx.QueryRowContext(ctx, sel, id).Scan(&body); err != nil {
			return fmt.Errorf("rounding handler: letter %s of event %s: %w", id, m.ID, err)
		}
		b, err := roundedLetter(body)
		if err != nil {
			return fmt.Errorf("rounding handler: letter %s of event %s: %w", id, m.ID, err)
		}
		_, err = tx.ExecContext(ctx, upd, b, id)
		return err
	}
}

// roundedLetter is a letter request (JSON) with its amount rounded to whole
// units, half up: "120.45" becomes "120.00", "7.50" becomes "8.00".
func roundedLetter(body []byte) ([]byte, error) {
	var r invoice.LetterRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	a, ok := new(big.Rat).SetString(r.Amount)
	if !ok {
		return nil, fmt.Errorf("amount %q is not a number", r.Amount)
	}
	r.Amount = new(big.Rat).SetInt(new(big.Int).Quo(new(big.Int).Add(a.Num(), new(big.Int).Quo(a.Denom(), big.NewInt(2))), a.Denom())).FloatString(2)
	return json.Marshal(r)
}
