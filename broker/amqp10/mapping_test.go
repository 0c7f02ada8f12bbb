package amqp10

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	amqp "github.com/Azure/go-amqp"
)

// TestIncoming: the JMS-over-AMQP mapping of the parts RabbitMQ's plugin
// cannot produce (a delivery count, no header section, typed ids,
// sequence bodies).
func TestIncoming(t *testing.T) {
	uuid := amqp.UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}
	tests := []struct {
		name       string
		m          *amqp.Message
		trust      bool
		wantBody   string
		wantRedel  bool
		wantCount  int
		wantCorr   string
		wantMsgID  string
		wantHeader map[string]string
	}{
		{name: "first delivery", m: &amqp.Message{Header: &amqp.MessageHeader{FirstAcquirer: true}, Value: "text"},
			wantBody: "text"},
		{name: "redelivered by first-acquirer", m: &amqp.Message{Header: &amqp.MessageHeader{}, Data: [][]byte{[]byte("a")}},
			wantBody: "a", wantRedel: true},
		{name: "count ignored by default", m: &amqp.Message{Header: &amqp.MessageHeader{FirstAcquirer: true, DeliveryCount: 2}},
			wantRedel: true},
		{name: "count trusted", m: &amqp.Message{Header: &amqp.MessageHeader{DeliveryCount: 2}}, trust: true,
			wantRedel: true, wantCount: 3},
		{name: "no header section: unknown", m: &amqp.Message{Value: []byte("bin")}, trust: true,
			wantBody: "bin"},
		{name: "typed ids", m: &amqp.Message{Properties: &amqp.MessageProperties{MessageID: uuid, CorrelationID: uint64(7)}},
			wantMsgID: "12345678-9abc-def0-1234-56789abcdef0", wantCorr: "7"},
		{name: "binary ids (IBM MQ MsgId, CorrelId)", m: &amqp.Message{Properties: &amqp.MessageProperties{
			MessageID: []byte("AMQ QM1             \x00\x01\xfe\xff"), CorrelationID: []byte{0xAB, 0x00}}},
			wantMsgID: "ID:414d5120514d31202020202020202020202020200001feff", wantCorr: "ID:ab00"},
		{name: "empty binary is no id", m: &amqp.Message{Properties: &amqp.MessageProperties{MessageID: []byte{}, CorrelationID: []byte{}}}},
		{name: "sequence body as JSON", m: &amqp.Message{Sequence: [][]any{{"a", int64(1)}}},
			wantBody: `[["a",1]]`},
		{name: "properties rendered", m: &amqp.Message{ApplicationProperties: map[string]any{"eventId": "e", "n": int64(-3), "ok": false}},
			wantHeader: map[string]string{"eventId": "e", "n": "-3", "ok": "false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := incoming("q", tc.trust, tc.m)
			if string(got.Body) != tc.wantBody || got.Redelivered != tc.wantRedel || got.DeliveryCount != tc.wantCount ||
				got.Header(HeaderCorrelationID) != tc.wantCorr || got.BrokerMessageID != tc.wantMsgID || got.Destination != "q" {
				t.Errorf("got body=%q redelivered=%v count=%d corr=%q msgid=%q dest=%q", got.Body, got.Redelivered, got.DeliveryCount,
					got.Header(HeaderCorrelationID), got.BrokerMessageID, got.Destination)
			}
			for k, v := range tc.wantHeader {
				if got.Header(k) != v {
					t.Errorf("header %s=%q, want %q", k, got.Header(k), v)
				}
			}
		})
	}
}

// TestOutgoingCorrelationID: the binary form of IDString goes out as the
// bytes it names; any other string goes out whole, as a string.
func TestOutgoingCorrelationID(t *testing.T) {
	mq := []byte("AMQ QM1             \x00\x01\xfe\xff")
	for _, tc := range []struct {
		in   string
		want any
	}{
		{IDString(mq), mq},
		{"ID:ab00", []byte{0xab, 0x00}},
		{"ID:AB00", "ID:AB00"}, // not a form IDString makes
		{"ID:abc", "ID:abc"},
		{"ID:", "ID:"},
		{"ID:jms-1", "ID:jms-1"},
		{"order-42", "order-42"},
		{"a correlation id longer than twenty-four bytes", "a correlation id longer than twenty-four bytes"},
	} {
		got := outgoingCorrelationID(tc.in)
		if gb, ok := got.([]byte); ok {
			if wb, ok := tc.want.([]byte); !ok || string(gb) != string(wb) {
				t.Errorf("outgoingCorrelationID(%q) = %x, want %v", tc.in, gb, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("outgoingCorrelationID(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

// FuzzIDRoundTrip: a binary id read as IDString goes out again as the same
// bytes, and IDString never yields bytes a database refuses in a text
// column (NUL, invalid UTF-8) for a binary id.
func FuzzIDRoundTrip(f *testing.F) {
	f.Add([]byte("AMQ QM1             \x00\x01\xfe\xff"))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := IDString(b)
		if len(b) == 0 {
			if s != "" {
				t.Fatalf("IDString(empty) = %q", s)
			}
			return
		}
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("IDString(%x) = %q is no clean text", b, s)
		}
		back, ok := outgoingCorrelationID(s).([]byte)
		if !ok || !bytes.Equal(back, b) {
			t.Fatalf("IDString(%x) = %q went out as %#v", b, s, outgoingCorrelationID(s))
		}
	})
}
