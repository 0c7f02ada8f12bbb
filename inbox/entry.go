package inbox

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
)

// normalize checks an entry and fits it to the columns, for every way in
// (Process, ProcessBatch, Receive, MarkDeadLettered, DeadLetter): a
// consumer name that is empty or longer than its column is an error
// wrapping ErrInvalidEntry (a programming error, nothing to dead-letter);
// an event id the inbox cannot key a row by is returned as the poison
// reason (see idReason; "" when usable); a longer correlation id or payload
// hash is cut to its column, at a character boundary.
func normalize(e Entry) (Entry, string, error) {
	if !validConsumerName(e.ConsumerName) {
		return e, "", fmt.Errorf("%w: ConsumerName %q must be 1 to %d bytes", ErrInvalidEntry, e.ConsumerName, MaxConsumerNameLength)
	}
	e.CorrelationID = cut(e.CorrelationID, MaxCorrelationIDLength)
	e.PayloadHash = cut(e.PayloadHash, maxPayloadHashLength)
	return e, idReason(e.EventID), nil
}

// idReason is the poison reason of an event id the inbox cannot key a row
// by, "" for a usable one: MISSING_EVENT_ID, EVENT_ID_TOO_LONG (over
// MaxEventIDLength bytes), INVALID_EVENT_ID (a NUL byte or invalid UTF-8,
// which PostgreSQL refuses and the other databases would store as they
// are: refused on every database alike).
func idReason(id string) string {
	switch {
	case id == "":
		return inboxkit.ReasonMissingEventID
	case len(id) > MaxEventIDLength:
		return inboxkit.ReasonEventIDTooLong
	case strings.IndexByte(id, 0) >= 0 || !utf8.ValidString(id):
		return inboxkit.ReasonInvalidEventID
	}
	return ""
}

// maxPayloadHashLength is the width of PAYLOAD_HASH (a hex SHA-256).
const maxPayloadHashLength = 64

func validConsumerName(name string) bool {
	return name != "" && len(name) <= MaxConsumerNameLength
}
