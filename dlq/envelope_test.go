package dlq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/dlq"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.UTC)
	e := dlq.Envelope{
		Body:     []byte(`{"invoiceNo":"R-1"}`),
		Original: map[string]string{"eventId": "E-1", "correlationId": "C-1", "destination": "/queue/invoices", "message-id": "ID:x", "AMQ_SCHEDULED_DELAY": "1000", "inboxkit-requeued": "2", "custom": "kept"},
		Reason:   "MAX_ATTEMPTS_EXCEEDED", Class: "TECHNICAL", Error: "letter service\n  timeout " + strings.Repeat("x", 2000),
		Attempts: 5, Consumer: "invoice-consumer", OriginalDestination: "/queue/invoices", EventID: "E-1", CorrelationID: "C-1",
		FirstFailure: at, LastFailure: at.Add(time.Minute), DeadLetteredAt: at.Add(2 * time.Minute),
	}
	h := e.Headers()
	for _, k := range []string{"destination", "message-id", "AMQ_SCHEDULED_DELAY", "inboxkit-requeued"} {
		if _, ok := h[k]; ok {
			t.Errorf("transport header %s copied into the envelope", k)
		}
	}
	if h["custom"] != "kept" || h["eventId"] != "E-1" {
		t.Errorf("original headers lost: %v", h)
	}
	if got := h[dlq.HeaderError]; strings.Contains(got, "\n") || len(got) > dlq.MaxErrorLength || !strings.HasPrefix(got, "letter service timeout x") {
		t.Errorf("error header %q...", got[:40])
	}
	back, err := dlq.Parse(h, e.Body)
	if err != nil {
		t.Fatal(err)
	}
	if back.Reason != e.Reason || back.Attempts != 5 || back.EventID != "E-1" || back.OriginalDestination != "/queue/invoices" ||
		!back.FirstFailure.Equal(at) || !back.DeadLetteredAt.Equal(e.DeadLetteredAt) || string(back.Body) != string(e.Body) {
		t.Errorf("parsed %+v", back)
	}
	if _, ok := back.Original[dlq.HeaderReason]; ok {
		t.Error("envelope header in Original")
	}
	rh := back.ReplayHeaders(at)
	if rh["eventId"] != "E-1" || rh[dlq.HeaderReplayedAt] == "" || rh[dlq.HeaderReason] != "" {
		t.Errorf("replay headers %v", rh)
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := dlq.Parse(map[string]string{"eventId": "x"}, nil); !errors.Is(err, dlq.ErrNotEnvelope) {
		t.Errorf("plain message: %v", err)
	}
	if _, err := dlq.Parse(map[string]string{dlq.HeaderReason: "X", dlq.HeaderAttempts: "many"}, nil); err == nil || !strings.Contains(err.Error(), dlq.HeaderAttempts) {
		t.Errorf("bad attempts: %v", err)
	}
	if _, err := dlq.Parse(map[string]string{dlq.HeaderReason: "X", dlq.HeaderFirstFailure: "yesterday"}, nil); err == nil {
		t.Error("bad time accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("MAX_ATTEMPTS_EXCEEDED", "3", "2026-03-01T09:00:00Z", "E-1", []byte("body"))
	f.Add("", "", "", "", []byte(nil))
	f.Add("X", "-1", "not a time", "\x00", []byte{0xff})
	f.Fuzz(func(t *testing.T, reason, attempts, first, id string, body []byte) {
		h := map[string]string{dlq.HeaderReason: reason, dlq.HeaderAttempts: attempts, dlq.HeaderFirstFailure: first, dlq.HeaderEventID: id}
		e, err := dlq.Parse(h, body)
		if err != nil {
			return
		}
		// What parses survives a second trip through Headers.
		again, err := dlq.Parse(e.Headers(), e.Body)
		if err != nil {
			t.Fatalf("re-parse of %+v: %v", e, err)
		}
		if again.Reason != e.Reason || again.Attempts != e.Attempts || again.EventID != e.EventID || !again.FirstFailure.Equal(e.FirstFailure) {
			t.Fatalf("round trip changed %+v into %+v", e, again)
		}
	})
}
