package dlq

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
)

// Headers added to a dead-lettered (or rejected) message. The original body
// is unchanged and the original headers are kept, apart from the transport
// headers listed in TransportHeaders.
const (
	HeaderReason              = "inboxkit-dlq-reason"
	HeaderClass               = "inboxkit-dlq-class"
	HeaderError               = "inboxkit-dlq-error"
	HeaderAttempts            = "inboxkit-dlq-attempts"
	HeaderConsumer            = "inboxkit-dlq-consumer"
	HeaderOriginalDestination = "inboxkit-dlq-original-destination"
	HeaderEventID             = "inboxkit-dlq-event-id"
	HeaderCorrelationID       = "inboxkit-dlq-correlation-id"
	HeaderFirstFailure        = "inboxkit-dlq-first-failure"
	HeaderLastFailure         = "inboxkit-dlq-last-failure"
	HeaderDeadLetteredAt      = "inboxkit-dlq-time"
	HeaderReplayedAt          = "inboxkit-replayed-at"
)

// TransportHeaders are set by brokers on delivery and would confuse them on
// a new send (a STOMP "destination", ActiveMQ's scheduling headers); they
// are not copied into the envelope.
var TransportHeaders = []string{
	"destination", "message-id", "subscription", "ack", "content-length", "redelivered",
	"inboxkit-requeued", "AMQ_SCHEDULED_DELAY", "AMQ_SCHEDULED_PERIOD", "AMQ_SCHEDULED_REPEAT", "AMQ_SCHEDULED_CRON", "AMQ_SCHEDULED_ID",
}

// MaxErrorLength bounds the error text carried in a header.
const MaxErrorLength = 1000

// Envelope is a dead-lettered message with its failure context.
type Envelope struct {
	// Body is the original payload, unchanged.
	Body []byte
	// Original are the original headers (without TransportHeaders and
	// without the envelope's own headers).
	Original map[string]string

	Reason              string
	Class               string
	Error               string
	Attempts            int
	Consumer            string
	OriginalDestination string
	EventID             string
	CorrelationID       string
	FirstFailure        time.Time // zero when unknown
	LastFailure         time.Time // zero when unknown
	DeadLetteredAt      time.Time
}

const timeLayout = time.RFC3339Nano

// Headers returns the headers to publish: the original ones plus the
// envelope's.
func (e Envelope) Headers() map[string]string {
	h := make(map[string]string, len(e.Original)+11)
	for k, v := range e.Original {
		h[k] = v
	}
	for _, k := range TransportHeaders {
		delete(h, k)
	}
	set := func(k, v string) {
		if v != "" {
			h[k] = v
		}
	}
	setTime := func(k string, t time.Time) {
		if !t.IsZero() {
			h[k] = t.UTC().Format(timeLayout)
		}
	}
	set(HeaderReason, e.Reason)
	set(HeaderClass, e.Class)
	set(HeaderError, oneLine(e.Error))
	h[HeaderAttempts] = strconv.Itoa(e.Attempts)
	set(HeaderConsumer, e.Consumer)
	set(HeaderOriginalDestination, e.OriginalDestination)
	set(HeaderEventID, e.EventID)
	set(HeaderCorrelationID, e.CorrelationID)
	setTime(HeaderFirstFailure, e.FirstFailure)
	setTime(HeaderLastFailure, e.LastFailure)
	setTime(HeaderDeadLetteredAt, e.DeadLetteredAt)
	return h
}

// oneLine bounds an error text and keeps it on one line: some brokers'
// header encodings (and every log reader) prefer it.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > MaxErrorLength {
		cut := MaxErrorLength
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// ErrNotEnvelope is returned by Parse for a message without the envelope's
// reason header.
var ErrNotEnvelope = errors.New("dlq: not a dead-letter envelope (no " + HeaderReason + " header)")

// Parse reads an envelope back from a received dead-letter message.
func Parse(headers map[string]string, body []byte) (Envelope, error) {
	if headers[HeaderReason] == "" {
		return Envelope{}, ErrNotEnvelope
	}
	e := Envelope{
		Body:                body,
		Original:            map[string]string{},
		Reason:              headers[HeaderReason],
		Class:               headers[HeaderClass],
		Error:               headers[HeaderError],
		Consumer:            headers[HeaderConsumer],
		OriginalDestination: headers[HeaderOriginalDestination],
		EventID:             headers[HeaderEventID],
		CorrelationID:       headers[HeaderCorrelationID],
	}
	var err error
	if v := headers[HeaderAttempts]; v != "" {
		if e.Attempts, err = strconv.Atoi(v); err != nil {
			return Envelope{}, fmt.Errorf("dlq: header %s: %w", HeaderAttempts, err)
		}
	}
	for k, dst := range map[string]*time.Time{HeaderFirstFailure: &e.FirstFailure, HeaderLastFailure: &e.LastFailure, HeaderDeadLetteredAt: &e.DeadLetteredAt} {
		if v := headers[k]; v != "" {
			if *dst, err = time.Parse(timeLayout, v); err != nil {
				return Envelope{}, fmt.Errorf("dlq: header %s: %w", k, err)
			}
		}
	}
	for k, v := range headers {
		if !strings.HasPrefix(k, "inboxkit-dlq-") {
			e.Original[k] = v
		}
	}
	for _, k := range TransportHeaders {
		delete(e.Original, k)
	}
	return e, nil
}

// ReplayHeaders returns the headers for sending the original message again
// to its original destination: the original headers (so the event id is the
// same and the inbox still deduplicates) plus a replay trace.
func (e Envelope) ReplayHeaders(at time.Time) map[string]string {
	h := maps.Clone(e.Original)
	if h == nil {
		h = map[string]string{}
	}
	h[HeaderReplayedAt] = at.UTC().Format(timeLayout)
	return h
}
