package main

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/outbox"
)

const envLetterService = "INBOXKIT_LETTER_SERVICE"

// logLetters is the letter destination of `inboxctl run` without
// --letter-service: there is no print provider here, so the relay (of run,
// or of `inboxctl relay`) "sends" such a letter request by logging it.
const logLetters = "log:letters"

// logLetter logs a letter request the relay took from the outbox (at debug
// level, as the consumer logs each message).
func logLetter(ctx context.Context, logger *slog.Logger, m outbox.Outgoing) {
	var r invoice.LetterRequest
	_ = json.Unmarshal(m.Body, &r)
	logger.DebugContext(ctx, "letter sent (logged: no --letter-service)", "letter_id", m.ID, "event_id", m.CauseEventID,
		"correlation_id", m.CorrelationID, "invoice", r.InvoiceNo, "customer", r.CustomerNo, "attempt", m.Attempt)
}
