package stomp

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   *Frame
	}{
		{"no body", NewFrame(CmdSubscribe, "id", "1", "destination", "/queue/a")},
		{"escaped", &Frame{Command: CmdSend, Headers: []Header{{"k:ey", "a:b\nc\\d\re"}}, Body: []byte("x")}},
		{"nul in body", &Frame{Command: CmdMessage, Headers: []Header{{"destination", "/queue/a"}}, Body: []byte("a\x00b\n\x00")}},
		{"repeated header", NewFrame(CmdMessage, "foo", "first", "foo", "second")},
		{"empty value", NewFrame(CmdSend, "foo", "")},
		{"connect raw", NewFrame(CmdConnect, "accept-version", "1.2", "passcode", `a\b:c`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteFrame(&b, tt.in); err != nil {
				t.Fatal(err)
			}
			got, err := NewFrameReader(&b, Limits{}).ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if got.Command != tt.in.Command || !bytes.Equal(got.Body, tt.in.Body) {
				t.Fatalf("got %s %q, want %s %q", got.Command, got.Body, tt.in.Command, tt.in.Body)
			}
			want := append([]Header(nil), tt.in.Headers...)
			if len(tt.in.Body) > 0 {
				want = append(want, Header{"content-length", itoa(len(tt.in.Body))})
			}
			if len(got.Headers) != len(want) {
				t.Fatalf("headers %q, want %q", got.Headers, want)
			}
			for i := range want {
				if got.Headers[i] != want[i] {
					t.Fatalf("header %d = %q, want %q", i, got.Headers[i], want[i])
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestFrameRepeatedHeaderFirstWins(t *testing.T) {
	f, err := NewFrameReader(strings.NewReader("MESSAGE\nfoo:1\nfoo:2\n\n\x00"), Limits{}).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Value("foo") != "1" {
		t.Fatalf("foo = %q, want 1", f.Value("foo"))
	}
}

func TestReadFrameHeartBeatsAndCRLF(t *testing.T) {
	in := "\n\r\n\nMESSAGE\r\ndestination:/queue/a\r\nmessage-id:ID\\cvm-1\r\n\r\nhello\x00\n\nRECEIPT\nreceipt-id:7\n\n\x00"
	fr := NewFrameReader(strings.NewReader(in), Limits{})
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Command != CmdMessage || string(f.Body) != "hello" || f.Value("message-id") != "ID:vm-1" {
		t.Fatalf("got %s %q %q", f.Command, f.Body, f.Value("message-id"))
	}
	f, err = fr.ReadFrame()
	if err != nil || f.Command != CmdReceipt || f.Value("receipt-id") != "7" {
		t.Fatalf("second frame %v %v", f, err)
	}
	if _, err := fr.ReadFrame(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestConnectedNotUnescaped(t *testing.T) {
	f, err := NewFrameReader(strings.NewReader("CONNECTED\nsession:a\\cb\n\n\x00"), Limits{}).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Value("session") != `a\cb` {
		t.Fatalf("session = %q", f.Value("session"))
	}
}

func TestReadFrameErrors(t *testing.T) {
	small := Limits{MaxBodySize: 8, MaxHeaders: 2, MaxLineLength: 32}
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"bad escape", "MESSAGE\nk:a\\tb\n\n\x00", ErrInvalidEncoding},
		{"trailing backslash", "MESSAGE\nk:a\\\n\n\x00", ErrInvalidEncoding},
		{"no colon", "MESSAGE\nkey\n\n\x00", ErrMalformedFrame},
		{"bad command", "message\n\n\x00", ErrMalformedFrame},
		{"bad content-length", "MESSAGE\ncontent-length:x\n\n\x00", ErrMalformedFrame},
		{"negative content-length", "MESSAGE\ncontent-length:-1\n\n\x00", ErrMalformedFrame},
		{"no NUL after body", "MESSAGE\ncontent-length:2\n\nabc\x00", ErrMalformedFrame},
		{"body too large (content-length)", "ERROR\ncontent-length:9\n\n123456789\x00", ErrFrameTooLarge},
		{"body too large (NUL)", "ERROR\n\n" + strings.Repeat("x", 100) + "\x00", ErrFrameTooLarge},
		{"too many headers", "MESSAGE\na:1\nb:2\nc:3\n\n\x00", ErrTooManyHeaders},
		{"line too long", "MESSAGE\na:" + strings.Repeat("x", 40) + "\n\n\x00", ErrLineTooLong},
		{"truncated headers", "MESSAGE\na:1\n", io.ErrUnexpectedEOF},
		{"truncated body", "MESSAGE\ncontent-length:5\n\nab", io.ErrUnexpectedEOF},
		{"truncated body without length", "MESSAGE\n\nab", io.ErrUnexpectedEOF},
		{"partial command", "MESS", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFrameReader(strings.NewReader(tt.in), small).ReadFrame()
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWriteFrameRejectsRawNewlineInConnect(t *testing.T) {
	err := WriteFrame(io.Discard, NewFrame(CmdConnect, "login", "a\nb"))
	if !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("err = %v", err)
	}
	if err := WriteFrame(io.Discard, &Frame{Command: "bad cmd"}); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("err = %v", err)
	}
}

func TestFrameSetDel(t *testing.T) {
	f := NewFrame(CmdSend, "a", "1", "b", "2", "a", "3")
	f.Set("a", "x")
	if len(f.Headers) != 2 || f.Value("a") != "x" {
		t.Fatalf("after Set: %q", f.Headers)
	}
	f.Del("a")
	if _, ok := f.Get("a"); ok || len(f.Headers) != 1 {
		t.Fatalf("after Del: %q", f.Headers)
	}
}

// FuzzReadFrame checks that no input makes the reader panic or exceed its
// limits, and that every frame it accepts survives a write/read round trip.
func FuzzReadFrame(f *testing.F) {
	seeds := []string{
		"MESSAGE\ndestination:/queue/a\nmessage-id:ID\\cvm-1\ncontent-length:5\n\nhello\x00",
		"\n\n\r\nRECEIPT\nreceipt-id:1\n\n\x00",
		"CONNECTED\nversion:1.2\nheart-beat:0,0\nsession:a\\b\n\n\x00",
		"ERROR\nmessage:bad\n\nsome details\x00",
		"MESSAGE\nk:a\\n\\r\\c\\\\\n\nx\x00MESSAGE\n\n\x00",
		"SEND\ncontent-length:3\n\na\x00b\x00",
		"MESSAGE\ncontent-length:99999999999\n\n\x00",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	limits := Limits{MaxBodySize: 1 << 10, MaxHeaders: 16, MaxLineLength: 256}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := NewFrameReader(bytes.NewReader(data), limits)
		for i := 0; i < 8; i++ {
			fm, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if len(fm.Body) > limits.MaxBodySize || len(fm.Headers) > limits.MaxHeaders {
				t.Fatalf("limits exceeded: %s", fm)
			}
			var b bytes.Buffer
			if err := WriteFrame(&b, fm); err != nil {
				if fm.Command == CmdConnect || fm.Command == CmdConnected || fm.Command == CmdStomp {
					continue // raw headers may hold what cannot be re-encoded
				}
				t.Fatalf("write accepted frame: %v", err)
			}
			again, err := NewFrameReader(&b, Limits{MaxBodySize: 1 << 20}).ReadFrame()
			if err != nil {
				t.Fatalf("reread: %v", err)
			}
			if again.Command != fm.Command || !bytes.Equal(again.Body, fm.Body) {
				t.Fatalf("round trip changed the frame: %s vs %s", again, fm)
			}
			for _, h := range fm.Headers {
				if h.Key == "content-length" {
					continue
				}
				if _, ok := again.Get(h.Key); !ok {
					t.Fatalf("header %q lost", h.Key)
				}
			}
		}
	})
}

// Issue 11.11: an oversize MESSAGE must not break the connection (the same
// message would come first again after every reconnect): its body is
// skipped, the frame comes with Oversize set and the next frame is read
// normally.
func TestReadFrameSkipsOversizeMessage(t *testing.T) {
	small := Limits{MaxBodySize: 8, MaxHeaders: 4, MaxLineLength: 32}
	for _, tc := range []struct {
		in   string
		size int
	}{
		{"MESSAGE\nmessage-id:big\ncontent-length:20\n\n" + strings.Repeat("x", 20) + "\x00", 20},
		{"MESSAGE\nmessage-id:big\n\n" + strings.Repeat("x", 100) + "\x00", 100},
	} {
		fr := NewFrameReader(strings.NewReader(tc.in+"\nMESSAGE\nmessage-id:small\n\nok\x00"), small)
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("oversize MESSAGE: %v", err)
		}
		if f.Value("message-id") != "big" || f.Body != nil || f.Oversize != tc.size {
			t.Fatalf("oversize frame: id %q body %d bytes oversize %d, want big, 0, %d", f.Value("message-id"), len(f.Body), f.Oversize, tc.size)
		}
		f, err = fr.ReadFrame()
		if err != nil || f.Value("message-id") != "small" || string(f.Body) != "ok" {
			t.Fatalf("next frame: %+v %v", f, err)
		}
	}
}
