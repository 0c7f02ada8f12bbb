package amqp10_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	amqp "github.com/Azure/go-amqp"
)

// newRecorder is a loopback TCP proxy in front of a real broker that keeps
// every byte the client sends, per connection, so a test can read the
// frames the adapter wrote on the wire. It records our own output; the
// broker behind it answers.
func newRecorder(t *testing.T, target string) *proxy {
	t.Helper()
	return startProxy(t, &proxy{ln: listen(t), record: true}, target)
}

// connections returns the frames each recorded connection sent so far.
func (p *proxy) connections(t *testing.T) [][]frame {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]frame
	for _, b := range p.sent {
		fs, err := parseFrames([]byte(b.String()))
		if err != nil {
			t.Fatalf("recorded bytes: %v", err)
		}
		out = append(out, fs)
	}
	return out
}

// AMQP 1.0 performative descriptors (part 2 of the specification).
const (
	descBegin    = 0x11
	descAttach   = 0x12
	descTransfer = 0x14
	descSource   = 0x28
	descTarget   = 0x29
)

// frame is one AMQP frame (SASL frames and the protocol headers left out):
// its channel, the performative's descriptor and fields, and the payload
// that follows it (a transfer's message bytes).
type frame struct {
	channel uint16
	desc    uint64
	fields  []any
	payload []byte
}

// field returns fields[i], nil past the end.
func (f frame) field(i int) any {
	if i < len(f.fields) {
		return f.fields[i]
	}
	return nil
}

// described is a described value: a descriptor and the value.
type described struct {
	desc  any
	value any
}

// symbol is an AMQP symbol (a string is a Go string).
type symbol string

// parseFrames reads a client's byte stream: protocol headers ("AMQP" and
// four bytes), SASL frames (type 1, skipped), AMQP frames (type 0) and
// empty frames (heartbeats, skipped).
func parseFrames(b []byte) ([]frame, error) {
	var out []frame
	for len(b) > 0 {
		if bytes.HasPrefix(b, []byte("AMQP")) {
			if len(b) < 8 {
				return out, nil
			}
			b = b[8:]
			continue
		}
		if len(b) < 8 {
			return out, nil // a frame still being written
		}
		size := binary.BigEndian.Uint32(b)
		if uint32(len(b)) < size {
			return out, nil
		}
		doff, typ, ch := int(b[4])*4, b[5], binary.BigEndian.Uint16(b[6:])
		body := b[doff:size]
		b = b[size:]
		if typ != 0 || len(body) == 0 {
			continue
		}
		v, rest, err := decode(body)
		if err != nil {
			return nil, err
		}
		d, ok := v.(described)
		if !ok {
			return nil, fmt.Errorf("frame body is %T, not a performative", v)
		}
		code, _ := d.desc.(uint64)
		fields, _ := d.value.([]any)
		out = append(out, frame{channel: ch, desc: code, fields: fields, payload: rest})
	}
	return out, nil
}

// messages joins the payloads of the transfers in frames (a message may
// span several, "more" is field 5) and decodes them with go-amqp.
func messages(t *testing.T, frames []frame) []*amqp.Message {
	t.Helper()
	var out []*amqp.Message
	var buf []byte
	for _, f := range frames {
		if f.desc != descTransfer {
			continue
		}
		buf = append(buf, f.payload...)
		if more, _ := f.field(5).(bool); more {
			continue
		}
		m := new(amqp.Message)
		if err := m.UnmarshalBinary(buf); err != nil {
			t.Fatalf("transfer payload: %v", err)
		}
		out = append(out, m)
		buf = nil
	}
	return out
}

// decode reads one AMQP-encoded value (part 1 of the specification) and
// returns it with the bytes after it.
func decode(b []byte) (any, []byte, error) {
	if len(b) == 0 {
		return nil, nil, io.ErrUnexpectedEOF
	}
	code, b := b[0], b[1:]
	if code == 0x00 {
		d, rest, err := decode(b)
		if err != nil {
			return nil, nil, err
		}
		v, rest, err := decode(rest)
		return described{desc: d, value: v}, rest, err
	}
	return decodeAs(code, b)
}

// decodeAs reads a value of constructor code from b.
func decodeAs(code byte, b []byte) (any, []byte, error) {
	need := func(n int) error {
		if len(b) < n {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	fixed := map[byte]int{0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2,
		0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x98: 16}
	switch code {
	case 0x40:
		return nil, b, nil
	case 0x41:
		return true, b, nil
	case 0x42:
		return false, b, nil
	case 0x43, 0x44:
		return uint64(0), b, nil
	case 0x45:
		return []any{}, b, nil
	}
	if n, ok := fixed[code]; ok {
		if err := need(n); err != nil {
			return nil, nil, err
		}
		raw, rest := b[:n], b[n:]
		switch code {
		case 0x56:
			return raw[0] != 0, rest, nil
		case 0x50, 0x52, 0x53:
			return uint64(raw[0]), rest, nil
		case 0x60:
			return uint64(binary.BigEndian.Uint16(raw)), rest, nil
		case 0x70:
			return uint64(binary.BigEndian.Uint32(raw)), rest, nil
		case 0x80:
			return binary.BigEndian.Uint64(raw), rest, nil
		}
		return append([]byte(nil), raw...), rest, nil // signed numbers, floats, timestamps, uuids: raw
	}
	var size, count int
	switch code {
	case 0xa0, 0xa1, 0xa3, 0xc0, 0xc1, 0xe0:
		if err := need(1); err != nil {
			return nil, nil, err
		}
		size, b = int(b[0]), b[1:]
	case 0xb0, 0xb1, 0xb3, 0xd0, 0xd1, 0xf0:
		if err := need(4); err != nil {
			return nil, nil, err
		}
		size, b = int(binary.BigEndian.Uint32(b)), b[4:]
	default:
		return nil, nil, fmt.Errorf("AMQP type code 0x%02x is not decoded here", code)
	}
	if err := need(size); err != nil {
		return nil, nil, err
	}
	body, rest := b[:size], b[size:]
	switch code {
	case 0xa0, 0xb0:
		return append([]byte(nil), body...), rest, nil
	case 0xa1, 0xb1:
		return string(body), rest, nil
	case 0xa3, 0xb3:
		return symbol(body), rest, nil
	}
	// Compound (list, map) and array: a count first, as wide as the size.
	if code == 0xc0 || code == 0xc1 || code == 0xe0 {
		count, body = int(body[0]), body[1:]
	} else {
		count, body = int(binary.BigEndian.Uint32(body)), body[4:]
	}
	items := make([]any, 0, count)
	if code == 0xe0 || code == 0xf0 { // array: one constructor for all
		elem := body[0]
		body = body[1:]
		for range count {
			v, r, err := decodeAs(elem, body)
			if err != nil {
				return nil, nil, err
			}
			items, body = append(items, v), r
		}
		return items, rest, nil
	}
	for range count {
		v, r, err := decode(body)
		if err != nil {
			return nil, nil, err
		}
		items, body = append(items, v), r
	}
	return items, rest, nil
}

// terminus returns the fields of an attach's source (5) or target (6).
func terminus(f frame, i int) []any {
	d, _ := f.field(i).(described)
	fields, _ := d.value.([]any)
	return fields
}

// symbols reads a capabilities field: one symbol or an array of them.
func symbols(v any) []string {
	switch x := v.(type) {
	case symbol:
		return []string{string(x)}
	case []any:
		var out []string
		for _, s := range x {
			if y, ok := s.(symbol); ok {
				out = append(out, string(y))
			}
		}
		return out
	}
	return nil
}
