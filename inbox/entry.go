package inbox

import (
	"fmt"

	"github.com/inboxkit/inboxkit"
)

// normalize checks an entry and fits it to the columns, for every way in
// (Process, ProcessBatch, Receive, MarkDeadLettered): a consumer name that
// is empty or longer than its column is an error wrapping ErrInvalidEntry (a
// programming error, nothing to dead-letter); an event id the inbox cannot
// key a row by is returned as the poison reason (MISSING_EVENT_ID,
// EVENT_ID_TOO_LONG; "" when usable); a longer correlation id or payload
// hash is cut to its column.
func normalize(e Entry) (Entry, string, error) {
	if !validConsumerName(e.ConsumerName) {
		return e, "", fmt.Errorf("%w: ConsumerName %q must be 1 to %d bytes", ErrInvalidEntry, e.ConsumerName, MaxConsumerNameLength)
	}
	if len(e.CorrelationID) > MaxCorrelationIDLength {
		e.CorrelationID = e.CorrelationID[:MaxCorrelationIDLength]
	}
	if len(e.PayloadHash) > maxPayloadHashLength {
		e.PayloadHash = e.PayloadHash[:maxPayloadHashLength]
	}
	switch {
	case e.EventID == "":
		return e, inboxkit.ReasonMissingEventID, nil
	case len(e.EventID) > MaxEventIDLength:
		return e, inboxkit.ReasonEventIDTooLong, nil
	}
	return e, "", nil
}

// maxPayloadHashLength is the width of PAYLOAD_HASH (a hex SHA-256).
const maxPayloadHashLength = 64

func validConsumerName(name string) bool {
	return name != "" && len(name) <= MaxConsumerNameLength
}
