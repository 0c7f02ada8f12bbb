package stomp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// STOMP 1.2 commands used by this package.
const (
	CmdConnect     = "CONNECT"
	CmdStomp       = "STOMP"
	CmdConnected   = "CONNECTED"
	CmdSend        = "SEND"
	CmdSubscribe   = "SUBSCRIBE"
	CmdUnsubscribe = "UNSUBSCRIBE"
	CmdAck         = "ACK"
	CmdNack        = "NACK"
	CmdBegin       = "BEGIN"
	CmdCommit      = "COMMIT"
	CmdAbort       = "ABORT"
	CmdDisconnect  = "DISCONNECT"
	CmdMessage     = "MESSAGE"
	CmdReceipt     = "RECEIPT"
	CmdError       = "ERROR"
)

// Default limits of a FrameReader. See Limits.
const (
	DefaultMaxBodySize   = 4 << 20  // 4 MiB
	DefaultMaxHeaders    = 1000     // header lines per frame
	DefaultMaxLineLength = 64 << 10 // 64 KiB per command or header line
)

// Errors returned by the frame codec. They are wrapped with details; test
// with errors.Is.
var (
	ErrFrameTooLarge   = errors.New("stomp: frame body exceeds the maximum size")
	ErrTooManyHeaders  = errors.New("stomp: frame has too many headers")
	ErrLineTooLong     = errors.New("stomp: frame line exceeds the maximum length")
	ErrMalformedFrame  = errors.New("stomp: malformed frame")
	ErrInvalidEncoding = errors.New("stomp: invalid header escape sequence")
)

// Header is one STOMP header line. Frames keep headers in order; when a
// header repeats, the first occurrence is the value (STOMP 1.2).
type Header struct {
	Key, Value string
}

// Frame is one STOMP frame. Header keys and values are held unescaped.
type Frame struct {
	Command string
	Headers []Header
	Body    []byte
	// Oversize is set on a MESSAGE frame whose body was over
	// Limits.MaxBodySize: its length in bytes. The body was read past and
	// dropped (Body is nil), so the stream stays in step and the message can
	// be negatively acknowledged.
	Oversize int
}

// NewFrame returns a frame with the given command and header pairs
// (key, value, key, value, ...). An odd trailing key is ignored.
func NewFrame(command string, kv ...string) *Frame {
	f := &Frame{Command: command}
	for i := 0; i+1 < len(kv); i += 2 {
		f.Headers = append(f.Headers, Header{kv[i], kv[i+1]})
	}
	return f
}

// Get returns the first value of header key.
func (f *Frame) Get(key string) (string, bool) {
	for _, h := range f.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// Value returns the first value of header key, or "".
func (f *Frame) Value(key string) string {
	v, _ := f.Get(key)
	return v
}

// Set replaces every occurrence of header key by one with value v, or
// appends it.
func (f *Frame) Set(key, v string) {
	out := f.Headers[:0]
	found := false
	for _, h := range f.Headers {
		if h.Key == key {
			if found {
				continue
			}
			h.Value = v
			found = true
		}
		out = append(out, h)
	}
	f.Headers = out
	if !found {
		f.Headers = append(f.Headers, Header{key, v})
	}
}

// Del removes every occurrence of header key.
func (f *Frame) Del(key string) {
	out := f.Headers[:0]
	for _, h := range f.Headers {
		if h.Key != key {
			out = append(out, h)
		}
	}
	f.Headers = out
}

// String returns a short description for logs and errors (never the body).
func (f *Frame) String() string {
	return fmt.Sprintf("%s frame (%d headers, %d body bytes)", f.Command, len(f.Headers), len(f.Body))
}

// escapes reports whether the headers of command are escaped: every frame
// except CONNECT and CONNECTED (STOMP 1.2, "Value Encoding").
func escapes(command string) bool {
	return command != CmdConnect && command != CmdConnected && command != CmdStomp
}

var headerEscaper = strings.NewReplacer(`\`, `\\`, "\r", `\r`, "\n", `\n`, ":", `\c`)

// unescape decodes a STOMP 1.2 header octet sequence. An undefined escape
// sequence is an error (the spec requires treating it as fatal).
func unescape(s []byte) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			return "", fmt.Errorf("%w: trailing backslash", ErrInvalidEncoding)
		}
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'c':
			b.WriteByte(':')
		default:
			return "", fmt.Errorf("%w: \\%c", ErrInvalidEncoding, s[i])
		}
	}
	return b.String(), nil
}

// Limits bound what a FrameReader accepts, so a broken or hostile peer can
// neither exhaust memory nor make the reader grow without bound. A zero field
// takes its default.
type Limits struct {
	// MaxBodySize is the largest body accepted, in bytes, with or without
	// content-length. Defaults to DefaultMaxBodySize (4 MiB).
	MaxBodySize int
	// MaxHeaders is the largest number of header lines per frame. Defaults to
	// DefaultMaxHeaders (1000).
	MaxHeaders int
	// MaxLineLength is the longest command or header line, in bytes,
	// including its EOL. Defaults to DefaultMaxLineLength (64 KiB).
	MaxLineLength int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBodySize <= 0 {
		l.MaxBodySize = DefaultMaxBodySize
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxLineLength <= 0 {
		l.MaxLineLength = DefaultMaxLineLength
	}
	if l.MaxLineLength < 16 {
		l.MaxLineLength = 16 // bufio's minimum buffer size
	}
	return l
}

// FrameReader decodes STOMP 1.2 frames from a byte stream. It is not safe for
// concurrent use. The largest frame it holds in memory is bounded by
// MaxBodySize + MaxHeaders*MaxLineLength.
type FrameReader struct {
	r      *bufio.Reader
	limits Limits
}

// NewFrameReader returns a reader of frames from r with the given limits
// (zero fields take the defaults).
func NewFrameReader(r io.Reader, limits Limits) *FrameReader {
	limits = limits.withDefaults()
	return &FrameReader{r: bufio.NewReaderSize(r, limits.MaxLineLength), limits: limits}
}

// readLine returns one line without its EOL ("\n" or "\r\n"). The returned
// slice is valid until the next read.
func (fr *FrameReader) readLine() ([]byte, error) {
	line, err := fr.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w (%d bytes)", ErrLineTooLong, fr.limits.MaxLineLength)
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// ReadFrame reads the next frame, skipping heart-beat EOLs before it.
// It returns io.EOF when the stream ends cleanly between frames, and a
// wrapped ErrMalformedFrame, ErrLineTooLong, ErrTooManyHeaders,
// ErrFrameTooLarge or ErrInvalidEncoding when the peer breaks the protocol;
// after such an error the stream cannot be resynchronised.
func (fr *FrameReader) ReadFrame() (*Frame, error) {
	var cmd []byte
	for {
		line, err := fr.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) > 0 {
			cmd = line
			break
		}
		// An empty line between frames is a heart-beat.
	}
	f := &Frame{Command: string(cmd)}
	if !validCommand(f.Command) {
		return nil, fmt.Errorf("%w: invalid command %q", ErrMalformedFrame, truncate(f.Command, 40))
	}
	escaped := escapes(f.Command)
	for {
		line, err := fr.readLine()
		if err != nil {
			return nil, noEOF(err)
		}
		if len(line) == 0 {
			break
		}
		if len(f.Headers) >= fr.limits.MaxHeaders {
			return nil, fmt.Errorf("%w (more than %d)", ErrTooManyHeaders, fr.limits.MaxHeaders)
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return nil, fmt.Errorf("%w: header line without ':' in %s frame", ErrMalformedFrame, f.Command)
		}
		var h Header
		if escaped {
			if h.Key, err = unescape(line[:i]); err != nil {
				return nil, err
			}
			if h.Value, err = unescape(line[i+1:]); err != nil {
				return nil, err
			}
		} else {
			h = Header{string(line[:i]), string(line[i+1:])}
		}
		f.Headers = append(f.Headers, h)
	}
	if cl, ok := f.Get("content-length"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(cl))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: invalid content-length %q", ErrMalformedFrame, truncate(cl, 40))
		}
		if n > fr.limits.MaxBodySize {
			if f.Command != CmdMessage {
				return nil, fmt.Errorf("%w: content-length %d > %d", ErrFrameTooLarge, n, fr.limits.MaxBodySize)
			}
			// Skip the body, so that the message can be settled and the
			// ones behind it received.
			if _, err := io.CopyN(io.Discard, fr.r, int64(n)); err != nil {
				return nil, noEOF(err)
			}
			if nul, err := fr.r.ReadByte(); err != nil {
				return nil, noEOF(err)
			} else if nul != 0 {
				return nil, fmt.Errorf("%w: no NUL after %d body bytes", ErrMalformedFrame, n)
			}
			f.Oversize = n
			return f, nil
		}
		f.Body = make([]byte, n)
		if _, err := io.ReadFull(fr.r, f.Body); err != nil {
			return nil, noEOF(err)
		}
		nul, err := fr.r.ReadByte()
		if err != nil {
			return nil, noEOF(err)
		}
		if nul != 0 {
			return nil, fmt.Errorf("%w: no NUL after %d body bytes", ErrMalformedFrame, n)
		}
		return f, nil
	}
	var body []byte
	skipped := 0 // body bytes dropped, of an oversize MESSAGE
	for {
		chunk, err := fr.r.ReadSlice(0)
		if skipped > 0 || len(body)+len(chunk) > fr.limits.MaxBodySize+1 { // +1: the NUL
			if f.Command != CmdMessage {
				return nil, fmt.Errorf("%w (> %d bytes without content-length)", ErrFrameTooLarge, fr.limits.MaxBodySize)
			}
			skipped += len(body) + len(chunk)
			body = nil
			if err == nil {
				f.Oversize = skipped - 1 // the NUL
				return f, nil
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return nil, noEOF(err)
			}
			continue
		}
		body = append(body, chunk...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, noEOF(err)
		}
	}
	if len(body) > 1 {
		f.Body = body[:len(body)-1]
	}
	return f, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func validCommand(c string) bool {
	for i := 0; i < len(c); i++ {
		b := c[i]
		if (b < 'A' || b > 'Z') && b != '_' {
			return false
		}
	}
	return c != ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// WriteFrame encodes f to w. Header keys and values are escaped except in
// CONNECT and CONNECTED frames, where a value holding '\n', '\r' or a key
// holding ':' is an error. A content-length header is written for every
// non-empty body and replaces one set by the caller; the frame ends with NUL.
// WriteFrame does not flush w.
func WriteFrame(w io.Writer, f *Frame) error {
	if !validCommand(f.Command) {
		return fmt.Errorf("%w: invalid command %q", ErrMalformedFrame, truncate(f.Command, 40))
	}
	var b bytes.Buffer
	b.WriteString(f.Command)
	b.WriteByte('\n')
	escaped := escapes(f.Command)
	for _, h := range f.Headers {
		if h.Key == "content-length" {
			continue
		}
		if escaped {
			_, _ = headerEscaper.WriteString(&b, h.Key) // a bytes.Buffer does not fail
			b.WriteByte(':')
			_, _ = headerEscaper.WriteString(&b, h.Value)
		} else {
			if strings.ContainsAny(h.Key, ":\r\n") || strings.ContainsAny(h.Value, "\r\n") {
				return fmt.Errorf("%w: header %q cannot be encoded in a %s frame", ErrMalformedFrame, truncate(h.Key, 40), f.Command)
			}
			b.WriteString(h.Key)
			b.WriteByte(':')
			b.WriteString(h.Value)
		}
		b.WriteByte('\n')
	}
	if len(f.Body) > 0 {
		b.WriteString("content-length:")
		b.WriteString(strconv.Itoa(len(f.Body)))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(f.Body)
	b.WriteByte(0)
	_, err := w.Write(b.Bytes())
	return err
}
