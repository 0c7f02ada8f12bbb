package consumer_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

func TestEventIDChain(t *testing.T) {
	chain, _, err := consumer.ParseEventIDChain("header:eventId,json:invoiceNo,xml:Invoice/Header/Number,header:JMSCorrelationID,message-id")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("K", 200)
	for _, tc := range []struct {
		name       string
		m          inboxkit.Message
		id, source string
	}{
		{"header wins", inboxkit.Message{Headers: map[string]string{"eventId": "ev-1"}, Body: []byte(`{"invoiceNo":"INV-1"}`), BrokerMessageID: "ID:1"}, "ev-1", "header:eventId"},
		{"json string", inboxkit.Message{Body: []byte(`{"invoiceNo":" INV-1 "}`), BrokerMessageID: "ID:1"}, "INV-1", "json:invoiceNo"},
		{"json number", inboxkit.Message{Body: []byte(`{"invoiceNo":4711}`)}, "4711", "json:invoiceNo"},
		{"json null falls through", inboxkit.Message{Body: []byte(`{"invoiceNo":null}`), BrokerMessageID: "ID:2"}, "ID:2", "message-id"},
		{"xml element", inboxkit.Message{Body: []byte(`<?xml version="1.0"?><ns:Invoice xmlns:ns="urn:x"><ns:Header><ns:Number> R-9 </ns:Number></ns:Header></ns:Invoice>`)}, "R-9", "xml:Invoice/Header/Number"},
		{"xml other element", inboxkit.Message{Body: []byte(`<Invoice><Number>R-9</Number></Invoice>`), BrokerMessageID: "ID:3"}, "ID:3", "message-id"},
		{"broken body, correlation id", inboxkit.Message{Headers: map[string]string{"correlation-id": "corr-7"}, Body: []byte(`{"invoiceNo": broken`)}, "corr-7", "header:JMSCorrelationID"},
		{"requeued copy keeps the first message id", inboxkit.Message{Headers: map[string]string{consumer.HeaderOriginalMessageID: "ID:first"}, BrokerMessageID: "ID:copy"}, "ID:first", "message-id"},
		{"nothing", inboxkit.Message{Body: []byte(`x`)}, "", ""},
		{"long key hashed, never truncated", inboxkit.Message{Headers: map[string]string{"eventId": long}}, "sha256:", "header:eventId#sha256"},
	} {
		id, source := chain(tc.m)
		if !strings.HasPrefix(id, tc.id) || (tc.id != "sha256:" && id != tc.id) || source != tc.source {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", tc.name, id, source, tc.id, tc.source)
		}
	}
	// The documented hashing scheme, and no collision for a common prefix.
	a, _ := consumer.FitEventID(long)
	b, _ := consumer.FitEventID(long + "x")
	sum := sha256.Sum256([]byte(long))
	if a != "sha256:"+hex.EncodeToString(sum[:]) || len(a) != 71 || a == b {
		t.Errorf("hash %q / %q", a, b)
	}
	if id, hashed := consumer.FitEventID(strings.Repeat("k", inbox.MaxEventIDLength)); hashed || len(id) != inbox.MaxEventIDLength {
		t.Error("an id that fits was hashed")
	}
}

func TestParseEventIDChainErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"":                                "empty",
		"header:":                         "names no header",
		"eventId":                         "unknown",
		"body:x":                          "unknown",
		"json:a..b":                       "empty step",
		"xml:/Invoice":                    "empty step",
		"header:a,header:a":               "twice",
		"json:" + strings.Repeat("a", 40): "longer than",
	} {
		_, _, err := consumer.ParseEventIDChain(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEventIDChain(%q) = %v, want an error with %q", spec, err, want)
		}
	}
}

func FuzzParseEventIDChain(f *testing.F) {
	f.Add("header:eventId,json:invoiceNo,header:JMSCorrelationID,message-id", `{"invoiceNo":"INV-1"}`)
	f.Add("xml:a/b,json:x.0.y", `<a><b>1</b></a>`)
	f.Add("json:0", `[1]`)
	f.Fuzz(func(t *testing.T, spec, body string) {
		chain, sources, err := consumer.ParseEventIDChain(spec)
		if err != nil {
			if chain != nil {
				t.Fatal("a func with an error")
			}
			return
		}
		if len(sources) == 0 {
			t.Fatalf("%q parsed to no sources", spec)
		}
		id, source := chain(inboxkit.Message{Body: []byte(body), Headers: map[string]string{"eventId": body}, BrokerMessageID: body})
		if len(id) > inbox.MaxEventIDLength || len(source) > inbox.MaxEventIDSourceLength || (id == "") != (source == "") {
			t.Fatalf("spec %q body %q: id %q (%d bytes) source %q", spec, body, id, len(id), source)
		}
	})
}

// A legacy producer sends no eventId: the chain derives the id from the
// JSON body, the row keeps the source, and a redelivery and a resend of the
// same invoice under a new broker message id are duplicates.
func TestDerivedEventIDIsStoredAndDeduplicates(t *testing.T) {
	cfg, a, settled := setup(t) // publishes E-1 with an eventId header first
	chain, _, err := consumer.ParseEventIDChain("header:eventId,json:invoiceNo,message-id")
	if err != nil {
		t.Fatal(err)
	}
	cfg.EventIDFunc = chain
	var logs strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})) // the line per message is at debug
	ran := 0
	cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { ran++; return nil }
	ctx := context.Background()
	for i := 0; i < 2; i++ { // the producer sends the same invoice twice, without eventId
		if err := a.Publish(ctx, "invoices", map[string]string{"correlationId": "order-9"}, []byte(`{"invoiceNo":"INV-9"}`)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	var got []consumer.Settled
	for len(got) < 3 {
		select {
		case s := <-settled:
			got = append(got, s)
		case <-time.After(20 * time.Second):
			t.Fatalf("settled %d of 3", len(got))
		}
	}
	cancel()
	<-done
	want := []struct {
		id, source string
		outcome    inboxkit.Outcome
	}{
		{"E-1", "header:eventId", inboxkit.OutcomeProcessed},
		{"INV-9", "json:invoiceNo", inboxkit.OutcomeProcessed},
		{"INV-9", "json:invoiceNo", inboxkit.OutcomeDuplicate},
	}
	for i, w := range want {
		if got[i].Message.ID != w.id || got[i].Message.EventIDSource != w.source || got[i].Result.Outcome != w.outcome {
			t.Errorf("delivery %d: id %q source %q outcome %s, want %+v", i, got[i].Message.ID, got[i].Message.EventIDSource, got[i].Result.Outcome, w)
		}
	}
	if ran != 2 {
		t.Errorf("handler ran %d times, want 2", ran)
	}
	r, err := cfg.Store.Get(ctx, "INV-9", cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r.EventIDSource != "json:invoiceNo" || r.CorrelationID != "order-9" {
		t.Errorf("row: source %q correlation %q", r.EventIDSource, r.CorrelationID)
	}
	if !strings.Contains(logs.String(), "event_id_source=json:invoiceNo") {
		t.Errorf("the log does not name the source:\n%s", logs.String())
	}
}

// Issue 23.8: the README's producers send the correlation id in the
// "correlationId" header, which the consumer records as CORRELATION_ID,
// but the source correlation-id read only the broker's correlation id, so
// --event-id-from correlation-id,message-id fell back to the message id
// without a word. correlation-id now reads the correlation id the
// consumer records (CorrelationID); header:JMSCorrelationID stays the
// broker's.
func TestCorrelationIDSourceIsTheRecordedCorrelationID(t *testing.T) {
	chain, _, err := consumer.ParseEventIDChain("correlation-id,message-id")
	if err != nil {
		t.Fatal(err)
	}
	jms, _, err := consumer.ParseEventIDChain("header:JMSCorrelationID,message-id")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                 string
		m                    inboxkit.Message
		corr, chainID, jmsID string
	}{
		{"the correlationId header (README)", inboxkit.Message{Headers: map[string]string{"correlationId": "order-42"}, BrokerMessageID: "ID:1"}, "order-42", "order-42", "ID:1"},
		{"the broker's correlation id", inboxkit.Message{Headers: map[string]string{"correlation-id": "JMS-7"}, BrokerMessageID: "ID:2"}, "JMS-7", "JMS-7", "JMS-7"},
		{"both: the header wins", inboxkit.Message{Headers: map[string]string{"correlationId": "order-43", "correlation-id": "JMS-8"}, BrokerMessageID: "ID:3"}, "order-43", "order-43", "JMS-8"},
		{"filled by the runtime (another CorrelationIDHeader)", inboxkit.Message{CorrelationID: "X-9", Headers: map[string]string{"X-Corr": "X-9"}, BrokerMessageID: "ID:4"}, "", "X-9", "ID:4"},
		{"none", inboxkit.Message{BrokerMessageID: "ID:5"}, "", "ID:5", "ID:5"},
	} {
		if got := consumer.CorrelationID(tc.m, ""); got != tc.corr {
			t.Errorf("%s: CorrelationID = %q, want %q", tc.name, got, tc.corr)
		}
		if id, _ := chain(tc.m); id != tc.chainID {
			t.Errorf("%s: correlation-id,message-id gives %q, want %q", tc.name, id, tc.chainID)
		}
		if id, _ := jms(tc.m); id != tc.jmsID {
			t.Errorf("%s: header:JMSCorrelationID,message-id gives %q, want %q", tc.name, id, tc.jmsID)
		}
	}
	if got := consumer.CorrelationID(inboxkit.Message{Headers: map[string]string{"X-Corr": "x", "correlationId": "c"}}, "X-Corr"); got != "x" {
		t.Errorf("CorrelationID with header X-Corr = %q", got)
	}
}

// An order key comes from the sources of the event id, parsed by the same
// parser: the first that holds a value; a long key is hashed to fit
// ORDER_KEY; errors name the order key.
func TestParseOrderKey(t *testing.T) {
	key, err := consumer.ParseOrderKey("header:JMSXGroupID,json:customer.no")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    inboxkit.Message
		want string
	}{
		{inboxkit.Message{Headers: map[string]string{"JMSXGroupID": "G-1"}, Body: []byte(`{"customer":{"no":"C-7"}}`)}, "G-1"},
		{inboxkit.Message{Body: []byte(`{"customer":{"no":"C-7"}}`)}, "C-7"},
		{inboxkit.Message{Body: []byte(`not json`)}, ""},
		{inboxkit.Message{Headers: map[string]string{"JMSXGroupID": strings.Repeat("g", 200)}}, consumer.HashedIDPrefix},
	} {
		if got := key(tc.m); !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") || len(got) > inbox.MaxOrderKeyLength {
			t.Errorf("order key of %v = %q, want %q", tc.m.Headers, got, tc.want)
		}
	}
	for spec, want := range map[string]string{
		"":                  "order key sources: the list is empty",
		"JMSXGroupID":       "order key source \"JMSXGroupID\" is unknown",
		"header:a,header:a": "order key source \"header:a\" is listed twice",
	} {
		if _, err := consumer.ParseOrderKey(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOrderKey(%q) = %v, want an error with %q", spec, err, want)
		}
	}
}
