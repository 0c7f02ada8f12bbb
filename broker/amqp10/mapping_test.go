package amqp10

import (
	"testing"

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
