package amqp10

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/inboxkit/inboxkit"
)

// HeaderCorrelationID is the message header that carries the AMQP
// correlation-id property, in both directions (JMSCorrelationID of a JMS
// producer).
const HeaderCorrelationID = "correlation-id"

// ErrSettled is returned by Ack or Requeue on a delivery already settled.
var ErrSettled = errors.New("amqp10: delivery already settled")

type delivery struct {
	a       *Adapter
	s       *session
	m       *amqp.Message
	msg     inboxkit.Message
	settled atomic.Bool
}

func newDelivery(a *Adapter, s *session, m *amqp.Message) *delivery {
	return &delivery{a: a, s: s, m: m, msg: incoming(a.cfg.Queue, a.cfg.TrustDeliveryCount, m)}
}

// incoming maps an AMQP message to an inboxkit.Message the way JMS over
// AMQP does: application properties are the headers (JMS properties such
// as eventId), the correlation-id property is header "correlation-id", the
// message-id is BrokerMessageID (both ids in the form of IDString); a body of data sections (BytesMessage) is
// their concatenation, an amqp-value string (TextMessage) its UTF-8 bytes,
// an amqp-value binary its bytes, and any other amqp-value or amqp-sequence
// (MapMessage, StreamMessage) its JSON rendering.
func incoming(queue string, trustCount bool, m *amqp.Message) inboxkit.Message {
	out := inboxkit.Message{
		Headers:     make(map[string]string, len(m.ApplicationProperties)+1),
		Body:        body(m),
		Destination: queue,
	}
	for k, v := range m.ApplicationProperties {
		out.Headers[k] = render(v)
	}
	if p := m.Properties; p != nil {
		if id := IDString(p.CorrelationID); id != "" {
			out.Headers[HeaderCorrelationID] = id
		}
		out.BrokerMessageID = IDString(p.MessageID)
	}
	if h := m.Header; h != nil {
		out.Redelivered = !h.FirstAcquirer || h.DeliveryCount > 0
		out.FirstDelivery = !out.Redelivered
		if trustCount {
			out.DeliveryCount = int(h.DeliveryCount) + 1
		}
	}
	return out
}

func body(m *amqp.Message) []byte {
	switch {
	case len(m.Data) == 1:
		return m.Data[0]
	case len(m.Data) > 1:
		var b []byte
		for _, d := range m.Data {
			b = append(b, d...)
		}
		return b
	case m.Value != nil:
		switch v := m.Value.(type) {
		case string:
			return []byte(v)
		case []byte:
			return v
		}
		return jsonOf(m.Value)
	case len(m.Sequence) > 0:
		return jsonOf(m.Sequence)
	}
	return nil
}

func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprint(v))
	}
	return b
}

// JMSIDPrefix starts the string form of a binary message-id or
// correlation-id: "ID:" and the bytes in lower-case hex, as JMS shows an
// IBM MQ MsgId or CorrelId (JMSMessageID, JMSCorrelationID).
const JMSIDPrefix = "ID:"

// IDString is the string form of an AMQP message-id or correlation-id, the
// form every reader of an id sees (event id, correlation id, the inbox
// row, audit, the dead-letter envelope, replay):
//
//   - string: as it is.
//   - binary (IBM MQ sends the 24-byte MQMD MsgId and CorrelId of JMS and
//     MQI producers so): JMSIDPrefix + the bytes in lower-case hex, 48
//     digits for an MQ id ("ID:414d5120..."), as the legacy JMS bean logged
//     it. An empty binary is no id ("").
//   - uuid: its canonical lower-case form, 8-4-4-4-12 hex digits.
//   - ulong: its decimal digits.
//
// nil is "". Publish sends a correlation id of the binary form back as the
// bytes it names (see outgoingCorrelationID), so an id survives a dead
// letter and its replay.
func IDString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []byte:
		if len(x) == 0 {
			return ""
		}
		return JMSIDPrefix + hex.EncodeToString(x)
	case amqp.UUID:
		return x.String()
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return render(v)
}

// outgoingCorrelationID is the correlation-id property Publish sends for
// header value v: the bytes named by the binary form of IDString (JMSIDPrefix
// and an even number of lower-case hex digits), else v as a string, whole.
func outgoingCorrelationID(v string) any {
	digits, ok := strings.CutPrefix(v, JMSIDPrefix)
	if !ok || digits == "" || strings.ToLower(digits) != digits {
		return v
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return v
	}
	return b
}

// render turns an AMQP property value into a header string.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case amqp.UUID:
		return x.String()
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// outgoing builds the message Publish sends.
func outgoing(headers map[string]string, b []byte) *amqp.Message {
	m := &amqp.Message{
		Header: &amqp.MessageHeader{Durable: true},
		Properties: &amqp.MessageProperties{
			MessageID: newID(),
		},
		Data: [][]byte{b},
	}
	now := time.Now().UTC()
	m.Properties.CreationTime = &now
	if len(headers) > 0 {
		m.ApplicationProperties = make(map[string]any, len(headers))
		for k, v := range headers {
			if k == HeaderCorrelationID {
				m.Properties.CorrelationID = outgoingCorrelationID(v)
				continue
			}
			m.ApplicationProperties[k] = v
		}
	}
	return m
}

func (d *delivery) Message() inboxkit.Message { return d.msg }

// Ack settles the delivery as accepted on the link it came from. The
// broker does not confirm a receiver's settlement (RabbitMQ refuses
// rcv-settle-mode second): nil means the disposition was written. A
// delivery from a link or connection that has since ended returns an error
// (the broker delivers the message again).
func (d *delivery) Ack(ctx context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if err := d.alive(); err != nil {
		return err
	}
	if err := d.s.rcv.AcceptMessage(ctx, d.m); err != nil {
		return fmt.Errorf("amqp10: accept delivery of %s: %w", d.msg.Destination, err)
	}
	d.credit()
	return nil
}

// credit gives the settled delivery's link credit back.
func (d *delivery) credit() { d.s.credit(0, -1) }

// Requeue settles the delivery as released (or modified with
// delivery-failed under Config.RequeueModified), so the broker delivers it
// again; neither outcome dead-letters. With delay > 0 the delivery is held
// unsettled for delay, keeping its link credit, and released then; Requeue
// returns at once. Should the connection end in the meantime, the broker
// hands the message back itself.
func (d *delivery) Requeue(ctx context.Context, delay time.Duration) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if err := d.alive(); err != nil {
		return err
	}
	if delay > 0 {
		time.AfterFunc(delay, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.release(ctx)
		})
		return nil
	}
	if err := d.release(ctx); err != nil {
		return fmt.Errorf("amqp10: requeue delivery of %s: %w", d.msg.Destination, err)
	}
	return nil
}

func (d *delivery) release(ctx context.Context) error {
	var err error
	if d.a.cfg.RequeueModified {
		err = d.s.rcv.ModifyMessage(ctx, d.m, &amqp.ModifyMessageOptions{DeliveryFailed: true})
	} else {
		err = d.s.rcv.ReleaseMessage(ctx, d.m)
	}
	if err == nil {
		d.credit()
	}
	return err
}

// alive fails when the delivery's connection has ended: its settlement
// could not reach the broker, which delivers the message again.
func (d *delivery) alive() error {
	select {
	case <-d.s.Dead():
		return fmt.Errorf("amqp10: delivery of %s (message-id %s) came on a connection that has ended: %w", d.msg.Destination, d.msg.BrokerMessageID, d.s.Err())
	default:
		return nil
	}
}
