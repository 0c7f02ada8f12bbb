package consumer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// EventIDFunc derives the event id of a message and names its source (as
// stored in EVENT_ID_SOURCE and logged as event_id_source). It returns ""
// for both when no source holds an id: the message is then dead-lettered
// with reason MISSING_EVENT_ID, as without a func.
type EventIDFunc func(m inboxkit.Message) (id, source string)

// IDSource is one place an event id can come from. Name is how it is
// written in an --event-id-from list and stored in EVENT_ID_SOURCE.
//
// What each source protects against (the inbox drops a delivery whose id it
// has seen):
//
//   - header:NAME — the producer's own event id. Catches broker redeliveries
//     and producer resends, as long as the producer sends the same id again.
//     The only source that tells two different events with equal payloads
//     apart. Use it as soon as producers send one.
//   - json:PATH / xml:PATH — a business key in the payload (an invoice
//     number). Catches redeliveries and resends, even a resend the producer
//     built anew. Does NOT tell a second, different event about the same key
//     (an invoice correction) from a duplicate: the second is dropped. Choose
//     a key that is unique per event, not per business object.
//   - correlation-id — the message's correlation id, the one the consumer
//     records in CORRELATION_ID (see CorrelationID): the "correlationId"
//     header, else the broker's correlation id. header:JMSCorrelationID is
//     the broker's correlation id only (what a JMS producer set with
//     setJMSCorrelationID). Catches redeliveries and resends that keep it.
//     Many producers reuse one correlation id for every event of a business
//     case: then every event after the first is dropped. Use it only where
//     it is unique per event.
//   - message-id (header:JMSMessageID) — the broker's message id. Catches
//     broker redeliveries of the same message only (and a requeued copy on
//     ActiveMQ, which carries the original id). It does NOT catch a producer
//     resend, which gets a new JMSMessageID, nor a DLQ replay, which is a new
//     message: both are processed again. `inboxctl check` lists the rows whose
//     id came from it. Use it as the last resort of a chain, never alone.
type IDSource struct {
	Name string
	// Extract returns the id, or "" when the message holds none.
	Extract func(m inboxkit.Message) string
}

// HeaderOriginalMessageID is the header in which a broker adapter that
// re-sends a copy to requeue (ActiveMQ over STOMP) keeps the message id of
// the first delivery, so that an id derived from the message id survives
// requeues. MessageIDSource reads it first.
const HeaderOriginalMessageID = "inboxkit-original-message-id"

// MaxEventIDSourceLength is the width of the EVENT_ID_SOURCE column.
const MaxEventIDSourceLength = inbox.MaxEventIDSourceLength

// HeaderSource reads header name. "JMSCorrelationID" and "JMSMessageID"
// mean the broker's correlation id and message id (as a JMS producer sets
// them), whatever header the broker maps them to.
func HeaderSource(name string) IDSource {
	switch name {
	case "JMSCorrelationID":
		return IDSource{Name: "header:" + name, Extract: brokerCorrelationID}
	case "JMSMessageID":
		s := MessageIDSource()
		s.Name = "header:" + name
		return s
	}
	return IDSource{Name: "header:" + name, Extract: func(m inboxkit.Message) string { return m.Header(name) }}
}

// DefaultCorrelationIDHeader is the header that holds the correlation id
// unless Config.CorrelationIDHeader names another.
const DefaultCorrelationIDHeader = "correlationId"

// CorrelationID is the correlation id of m, the one a consumer records in
// CORRELATION_ID, logs as correlation_id and puts on a dead letter: the
// header named header (Config.CorrelationIDHeader; "" means
// DefaultCorrelationIDHeader), else the broker's correlation id (the header
// "correlation-id": STOMP's, a JMS producer's JMSCorrelationID, RabbitMQ's
// correlation_id and AMQP 1.0's correlation-id property as the adapters map
// them; else a header "JMSCorrelationID"). "" when m has none.
func CorrelationID(m inboxkit.Message, header string) string {
	if header == "" {
		header = DefaultCorrelationIDHeader
	}
	if v := m.Header(header); v != "" {
		return v
	}
	return brokerCorrelationID(m)
}

func brokerCorrelationID(m inboxkit.Message) string {
	if v := m.Header("correlation-id"); v != "" {
		return v
	}
	return m.Header("JMSCorrelationID")
}

// CorrelationIDSource reads the correlation id the consumer records (see
// CorrelationID): the message's CorrelationID when the runtime filled it
// (with Config.CorrelationIDHeader), else the "correlationId" header, else
// the broker's correlation id. So an event id taken from it is the
// CORRELATION_ID audit shows.
func CorrelationIDSource() IDSource {
	return IDSource{Name: "correlation-id", Extract: func(m inboxkit.Message) string {
		if m.CorrelationID != "" {
			return m.CorrelationID
		}
		return CorrelationID(m, "")
	}}
}

// MessageIDSource reads the broker's message id (the original one of a
// requeued copy, see HeaderOriginalMessageID).
func MessageIDSource() IDSource {
	return IDSource{Name: "message-id", Extract: func(m inboxkit.Message) string {
		if v := m.Header(HeaderOriginalMessageID); v != "" {
			return v
		}
		return m.BrokerMessageID
	}}
}

// JSONFieldSource reads a field of a JSON body: path is dot-separated keys,
// a number indexes an array ("invoice.number", "lines.0.id"). A string is
// taken as is, a number as written; null, objects, arrays, booleans and a
// body that is not JSON give no id.
func JSONFieldSource(path string) IDSource {
	keys := strings.Split(path, ".")
	return IDSource{Name: "json:" + path, Extract: func(m inboxkit.Message) string {
		dec := json.NewDecoder(bytes.NewReader(m.Body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		for _, k := range keys {
			switch x := v.(type) {
			case map[string]any:
				v = x[k]
			case []any:
				i, err := strconv.Atoi(k)
				if err != nil || i < 0 || i >= len(x) {
					return ""
				}
				v = x[i]
			default:
				return ""
			}
		}
		switch x := v.(type) {
		case string:
			return strings.TrimSpace(x)
		case json.Number:
			return x.String()
		}
		return ""
	}}
}

// XMLElementSource reads the text of an element of an XML body: path is
// the element names from the root, separated by "/", without namespace
// prefixes ("Invoice/Header/Number"). The first matching element counts;
// its text is trimmed. A body that is not XML gives no id.
func XMLElementSource(path string) IDSource {
	want := strings.Split(path, "/")
	return IDSource{Name: "xml:" + path, Extract: func(m inboxkit.Message) string {
		dec := xml.NewDecoder(bytes.NewReader(m.Body))
		dec.Strict = true
		var stack []string
		var text strings.Builder
		collecting := false
		for {
			tok, err := dec.Token()
			if err != nil { // io.EOF before the element ended, or not XML
				return ""
			}
			switch t := tok.(type) {
			case xml.StartElement:
				stack = append(stack, t.Name.Local)
				if collecting {
					continue
				}
				collecting = equalPath(stack, want)
			case xml.EndElement:
				if collecting && len(stack) == len(want) {
					return strings.TrimSpace(text.String())
				}
				if len(stack) > 0 {
					stack = stack[:len(stack)-1]
				}
			case xml.CharData:
				if collecting && len(stack) == len(want) {
					text.Write(t)
				}
			}
		}
	}}
}

func equalPath(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// HashedIDPrefix starts an event id that was longer than the EVENT_ID
// column (120 bytes) and was therefore replaced by its hash:
// "sha256:" followed by the 64 lower-case hex digits of the SHA-256 of the
// whole key (71 bytes). Keys are never truncated, because two long keys
// with a common prefix would collide.
const HashedIDPrefix = "sha256:"

// FitEventID returns id unchanged when it fits the EVENT_ID column, else
// HashedIDPrefix + hex(SHA-256(id)). The bool reports hashing.
func FitEventID(id string) (string, bool) {
	if len(id) <= inbox.MaxEventIDLength {
		return id, false
	}
	sum := sha256.Sum256([]byte(id))
	return HashedIDPrefix + hex.EncodeToString(sum[:]), true
}

// EventIDChain tries the sources in order and takes the first non-empty id.
// An id longer than the column is hashed (FitEventID) and its source gets
// the suffix "#sha256".
func EventIDChain(sources ...IDSource) EventIDFunc {
	return func(m inboxkit.Message) (string, string) {
		for _, s := range sources {
			id := strings.TrimSpace(s.Extract(m))
			if id == "" {
				continue
			}
			id, hashed := FitEventID(id)
			if hashed {
				return id, s.Name + "#sha256"
			}
			return id, s.Name
		}
		return "", ""
	}
}

// ParseEventIDChain parses a comma-separated list of sources, as
// `inboxctl run --event-id-from` takes it:
//
//	header:NAME   a header (header:JMSCorrelationID, header:JMSMessageID: the broker's ids)
//	json:PATH     a field of a JSON body (dot-separated, numbers index arrays)
//	xml:PATH      an element of an XML body (slash-separated from the root)
//	correlation-id  the correlation id the consumer records (see CorrelationID)
//	message-id      the broker's message id (does not survive a producer resend)
//
// Example: "header:eventId,json:invoiceNo,header:JMSCorrelationID,message-id".
func ParseEventIDChain(spec string) (EventIDFunc, []IDSource, error) {
	out, err := parseSources("event id", spec)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range out {
		if len(s.Name)+len("#sha256") > MaxEventIDSourceLength {
			return nil, nil, fmt.Errorf("event id source %q is longer than %d characters (the EVENT_ID_SOURCE column keeps it with a #sha256 suffix)", s.Name, MaxEventIDSourceLength-len("#sha256"))
		}
	}
	return EventIDChain(out...), out, nil
}

// parseSources parses a comma-separated list of sources (see
// ParseEventIDChain); what names the list in errors ("event id", "order
// key").
func parseSources(what, spec string) ([]IDSource, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%s sources: the list is empty; e.g. header:eventId,json:invoiceNo,message-id", what)
	}
	var out []IDSource
	seen := map[string]bool{}
	for _, raw := range strings.Split(spec, ",") {
		tok := strings.TrimSpace(raw)
		kind, arg, hasArg := strings.Cut(tok, ":")
		var s IDSource
		switch {
		case tok == "message-id" || tok == "correlation-id":
			if tok == "message-id" {
				s = MessageIDSource()
			} else {
				s = CorrelationIDSource()
			}
		case !hasArg:
			return nil, fmt.Errorf("%s source %q is unknown: use header:NAME, json:PATH, xml:PATH, correlation-id or message-id", what, tok)
		case arg == "" || strings.TrimSpace(arg) != arg:
			return nil, fmt.Errorf("%s source %q names no %s: e.g. header:eventId, json:invoiceNo, xml:Invoice/Number", what, tok, kind)
		case kind == "header":
			s = HeaderSource(arg)
		case kind == "json":
			if strings.Contains("."+arg+".", "..") {
				return nil, fmt.Errorf("%s source %q: the JSON path has an empty step; write keys separated by single dots, e.g. json:invoice.number", what, tok)
			}
			s = JSONFieldSource(arg)
		case kind == "xml":
			if strings.Contains("/"+arg+"/", "//") {
				return nil, fmt.Errorf("%s source %q: the XML path has an empty step; write element names from the root separated by '/', e.g. xml:Invoice/Number", what, tok)
			}
			s = XMLElementSource(arg)
		default:
			return nil, fmt.Errorf("%s source %q is unknown: use header:NAME, json:PATH, xml:PATH, correlation-id or message-id", what, tok)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s source %q is listed twice", what, tok)
		}
		seen[s.Name] = true
		out = append(out, s)
	}
	return out, nil
}

// OrderKeyFunc derives the order key of a message (see
// Config.OrderKeyFunc); "" means the message has none.
type OrderKeyFunc func(m inboxkit.Message) string

// ParseOrderKey parses a comma-separated list of order key sources, as
// `inboxctl run --order-key` takes it: the sources of ParseEventIDChain
// (header:NAME, json:PATH, xml:PATH, correlation-id, message-id), the first
// that holds a value wins. A key longer than the ORDER_KEY column is hashed
// as FitEventID hashes an event id. Example: "header:JMSXGroupID,json:customerNo".
func ParseOrderKey(spec string) (OrderKeyFunc, error) {
	sources, err := parseSources("order key", spec)
	if err != nil {
		return nil, err
	}
	chain := EventIDChain(sources...)
	return func(m inboxkit.Message) string {
		key, _ := chain(m)
		return key
	}, nil
}
