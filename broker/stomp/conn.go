package stomp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrConnClosed is returned by a Conn, and by the deliveries received on it,
// after the connection was closed or broke. Errors from a broken connection
// wrap it together with the cause.
var ErrConnClosed = errors.New("stomp: connection closed")

// BrokerError is an ERROR frame sent by the broker. The broker closes the
// connection after it.
type BrokerError struct {
	// Message is the ERROR frame's message header.
	Message string
	// Details is the ERROR frame's body.
	Details string
	// ReceiptID is the receipt-id header: the receipt of the frame that
	// caused the error, when the broker tells.
	ReceiptID string
}

func (e *BrokerError) Error() string {
	msg := "stomp: broker error: " + e.Message
	if d := strings.TrimSpace(e.Details); d != "" {
		if i := strings.IndexByte(d, '\n'); i >= 0 {
			d = d[:i]
		}
		msg += " (" + truncate(d, 200) + ")"
	}
	return msg
}

// ConnOptions configures a Conn. Zero fields take their defaults.
type ConnOptions struct {
	// Host is the CONNECT host header (virtual host). Defaults to the host
	// part of the dialled address, or "localhost".
	Host string
	// Login and Passcode are sent in CONNECT when Login is not empty.
	Login, Passcode string
	// HeartBeat is the interval both sent and asked of the broker. The
	// negotiated intervals follow STOMP 1.2 (the larger of the two sides);
	// the connection fails when nothing arrives from the broker for three times its
	// interval. Defaults to 10s; negative disables heart-beats.
	HeartBeat time.Duration
	// WriteTimeout bounds every frame write. Defaults to 10s.
	WriteTimeout time.Duration
	// ReceiptTimeout bounds the wait for a RECEIPT (the caller's context
	// may end it sooner). A request the broker does not answer within it,
	// while the connection otherwise lives (heart-beats arrive), was lost
	// on the way or its answer was: the connection is given up, failing
	// every request on it, so that the Adapter reconnects and the broker
	// redelivers what was not acknowledged. Defaults to 30s.
	ReceiptTimeout time.Duration
	// Limits bound the frames accepted from the broker (see Limits).
	Limits Limits
}

func (o *ConnOptions) setDefaults() {
	if o.HeartBeat == 0 {
		o.HeartBeat = 10 * time.Second
	}
	if o.HeartBeat < 0 {
		o.HeartBeat = 0
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.ReceiptTimeout <= 0 {
		o.ReceiptTimeout = 30 * time.Second
	}
	if o.Host == "" {
		o.Host = "localhost"
	}
}

// Conn is one STOMP 1.2 connection. One goroutine reads frames and
// dispatches MESSAGE frames to subscriptions and RECEIPT/ERROR frames to the
// waiting callers; another sends heart-beats. All methods are safe for
// concurrent use.
type Conn struct {
	nc   net.Conn
	opts ConnOptions
	qa   *quickAcker // nil when the socket has none (not TCP, not Linux)

	wmu sync.Mutex
	bw  *bufio.Writer

	sendHB, recvHB time.Duration
	version        string
	server         string
	session        string

	nextID atomic.Uint64

	mu       sync.Mutex
	receipts map[string]chan error
	watchID  string      // the RECEIPT an AckAsync asked for and waits for; "" when none
	watch    *time.Timer // fails the connection when watchID does not come in time
	subs     map[string]*Subscription
	err      error // why the connection ended; set once

	done chan struct{} // closed when the connection ended
}

// Dial connects to addr ("host:port") and performs the STOMP handshake.
func Dial(ctx context.Context, addr string, opts ConnOptions) (*Conn, error) {
	if opts.Host == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
			opts.Host = h
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stomp: dial %s: %w", addr, err)
	}
	c, err := Connect(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Connect performs the STOMP handshake on nc and starts the reader. On
// error the caller still owns nc.
func Connect(ctx context.Context, nc net.Conn, opts ConnOptions) (*Conn, error) {
	opts.setDefaults()
	c := &Conn{
		nc:       nc,
		opts:     opts,
		qa:       newQuickAcker(nc),
		bw:       bufio.NewWriter(nc),
		receipts: make(map[string]chan error),
		subs:     make(map[string]*Subscription),
		done:     make(chan struct{}),
	}
	hb := strconv.FormatInt(opts.HeartBeat.Milliseconds(), 10)
	f := NewFrame(CmdConnect, "accept-version", "1.2", "host", opts.Host, "heart-beat", hb+","+hb)
	if opts.Login != "" {
		f.Headers = append(f.Headers, Header{"login", opts.Login}, Header{"passcode", opts.Passcode})
	}
	deadline := time.Now().Add(opts.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A deadline fails to set only on a closed connection, and then the
	// write or read it bounds fails too: its error is not needed.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	_ = nc.SetDeadline(deadline)
	if err := WriteFrame(c.bw, f); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("stomp: write CONNECT: %w", err))
	}
	fr := NewFrameReader(&deadlineReader{c: c}, opts.Limits)
	reply, err := fr.ReadFrame()
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("stomp: read CONNECTED: %w", err))
	}
	switch reply.Command {
	case CmdConnected:
	case CmdError:
		return nil, brokerError(reply)
	default:
		return nil, fmt.Errorf("%w: expected CONNECTED, got %s", ErrMalformedFrame, reply.Command)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = nc.SetDeadline(time.Time{})
	c.version = reply.Value("version")
	if c.version != "1.2" {
		return nil, fmt.Errorf("stomp: broker does not speak STOMP 1.2 (version %q)", c.version)
	}
	c.server = reply.Value("server")
	c.session = reply.Value("session")
	if sx, sy, ok := parseHeartBeat(reply.Value("heart-beat")); ok && opts.HeartBeat > 0 {
		if sy > 0 {
			c.sendHB = max(opts.HeartBeat, sy)
		}
		if sx > 0 {
			c.recvHB = max(opts.HeartBeat, sx)
		}
	}
	go c.readLoop(fr)
	if c.sendHB > 0 {
		go c.heartBeatLoop()
	}
	return c, nil
}

func parseHeartBeat(v string) (sx, sy time.Duration, ok bool) {
	a, b, found := strings.Cut(v, ",")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	y, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return 0, 0, false
	}
	// A day at most: larger values overflowed the read deadline (3 intervals).
	const maxMillis = int64(24 * time.Hour / time.Millisecond)
	return time.Duration(min(x, maxMillis)) * time.Millisecond, time.Duration(min(y, maxMillis)) * time.Millisecond, true
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func brokerError(f *Frame) *BrokerError {
	return &BrokerError{Message: f.Value("message"), Details: string(f.Body), ReceiptID: f.Value("receipt-id")}
}

// deadlineReader arms the read deadline before every read, so the reader
// fails when the broker sends nothing (not even a heart-beat) for three times the
// negotiated interval.
type deadlineReader struct{ c *Conn }

func (r *deadlineReader) Read(p []byte) (int, error) {
	if hb := r.c.recvHB; hb > 0 {
		_ = r.c.nc.SetReadDeadline(time.Now().Add(3 * hb))
	}
	n, err := r.c.nc.Read(p)
	if n > 0 {
		r.c.qa.ack()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && r.c.recvHB > 0 {
		err = fmt.Errorf("stomp: no data or heart-beat from the broker for %s: %w", 3*r.c.recvHB, err)
	}
	return n, err
}

// Server returns the CONNECTED server header (e.g. "ActiveMQ/5.17.2").
func (c *Conn) Server() string { return c.server }

// Session returns the CONNECTED session header.
func (c *Conn) Session() string { return c.session }

// HeartBeats returns the negotiated intervals: how often this side sends
// and how often the broker promised to send (0 = none).
func (c *Conn) HeartBeats() (send, recv time.Duration) { return c.sendHB, c.recvHB }

// Done is closed when the connection ended (closed or broken).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is alive. It wraps
// ErrConnClosed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the connection with cause (first call wins): it closes the
// socket, fails every waiting receipt and ends every subscription.
func (c *Conn) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if cause == nil || errors.Is(cause, ErrConnClosed) {
		c.err = ErrConnClosed
		if cause != nil {
			c.err = cause
		}
	} else {
		c.err = fmt.Errorf("%w: %w", ErrConnClosed, cause)
	}
	receipts := c.receipts
	c.receipts = nil
	if c.watch != nil {
		c.watch.Stop()
		c.watchID, c.watch = "", nil
	}
	subs := c.subs
	c.subs = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, ch := range receipts {
		ch <- c.err // buffered, never blocks
	}
	for _, s := range subs {
		s.end()
	}
}

func (c *Conn) readLoop(fr *FrameReader) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.fail(err)
			return
		}
		switch f.Command {
		case CmdMessage:
			c.mu.Lock()
			s := c.subs[f.Value("subscription")]
			c.mu.Unlock()
			if s != nil {
				if err := s.deliver(f); err != nil {
					c.fail(err)
					return
				}
			}
		case CmdReceipt:
			if id := f.Value("receipt-id"); !c.settleWatch(id) {
				c.settleReceipt(id, nil)
			}
		case CmdError:
			be := brokerError(f)
			if be.ReceiptID != "" {
				c.settleReceipt(be.ReceiptID, be)
			}
			c.fail(be)
			return
		}
	}
}

func (c *Conn) settleReceipt(id string, err error) {
	c.mu.Lock()
	ch := c.receipts[id]
	delete(c.receipts, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- err
	}
}

func (c *Conn) heartBeatLoop() {
	t := time.NewTicker(c.sendHB)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.wmu.Lock()
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
			_, err := c.bw.WriteString("\n")
			if err == nil {
				err = c.bw.Flush()
			}
			c.wmu.Unlock()
			if err != nil {
				c.fail(fmt.Errorf("stomp: write heart-beat: %w", err))
				return
			}
		}
	}
}

// write sends one frame. A write error breaks the connection (a partly
// written frame cannot be recovered). ctx is checked before writing only.
func (c *Conn) write(ctx context.Context, f *Frame) error {
	if err := c.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// Only WriteTimeout bounds the write, not ctx: a frame cut short by one
	// caller's deadline would break the connection shared by all callers.
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	err := WriteFrame(c.bw, f)
	if errors.Is(err, ErrMalformedFrame) {
		return err // nothing was written
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		err = fmt.Errorf("stomp: write %s: %w", f.Command, err)
		c.fail(err)
		return c.Err()
	}
	return nil
}

func (c *Conn) newID(prefix string) string {
	return prefix + strconv.FormatUint(c.nextID.Add(1), 10)
}

// request writes f with a fresh receipt header and waits for the RECEIPT.
// An ERROR frame naming the receipt fails it with a *BrokerError.
func (c *Conn) request(ctx context.Context, f *Frame) error {
	id := c.newID("r-")
	f.Set("receipt", id)
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.receipts[id] = ch
	c.mu.Unlock()
	if err := c.write(ctx, f); err != nil {
		c.mu.Lock()
		if c.receipts != nil {
			delete(c.receipts, id)
		}
		c.mu.Unlock()
		return err
	}
	wait := time.NewTimer(c.opts.ReceiptTimeout)
	defer wait.Stop()
	select {
	case err := <-ch:
		return err
	case <-wait.C:
		c.fail(fmt.Errorf("stomp: no receipt for %s within %s (the frame or its answer was lost): connection given up", f.Command, c.opts.ReceiptTimeout))
		return <-ch // fail answered every waiting request
	case <-ctx.Done():
		c.mu.Lock()
		if c.receipts != nil {
			delete(c.receipts, id)
		}
		c.mu.Unlock()
		return fmt.Errorf("stomp: waiting for the receipt of %s: %w", f.Command, ctx.Err())
	}
}

// Send sends a SEND frame to destination with the given headers and body,
// persistent unless headers say otherwise, and returns after the broker's
// RECEIPT. An ERROR frame fails it with a *BrokerError.
func (c *Conn) Send(ctx context.Context, destination string, headers []Header, body []byte) error {
	f := &Frame{Command: CmdSend, Body: body}
	f.Headers = append(f.Headers, Header{"destination", destination})
	hasPersistent := false
	for _, h := range headers {
		switch h.Key {
		case "destination", "receipt", "content-length":
			continue
		case "persistent":
			hasPersistent = true
		}
		f.Headers = append(f.Headers, h)
	}
	if !hasPersistent {
		f.Headers = append(f.Headers, Header{"persistent", "true"})
	}
	return c.request(ctx, f)
}

// Ack acknowledges the MESSAGE whose ack header is id and waits for the
// broker's RECEIPT.
func (c *Conn) Ack(ctx context.Context, id string) error {
	return c.request(ctx, NewFrame(CmdAck, "id", id))
}

// AckAsync acknowledges the MESSAGE whose ack header is id without waiting
// for the broker: it returns once the ACK frame is written, so the
// acknowledgements of several goroutines follow each other on the wire
// instead of taking a round trip each. nil does not say that the broker
// processed it: should the connection end first, the broker delivers the
// message again (redelivered:true). The connection still watches that the
// broker answers: an ACK asks for a RECEIPT when no earlier one is
// outstanding (the broker processes a connection's frames in order, so
// that RECEIPT answers for the ACKs before it too), and one that does not
// come within ReceiptTimeout gives the connection up, as for a request
// that waits. An ERROR frame ends the connection as ever.
func (c *Conn) AckAsync(ctx context.Context, id string) error {
	f := NewFrame(CmdAck, "id", id)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	watch := ""
	if c.watchID == "" {
		watch = c.newID("a-")
		f.Set("receipt", watch)
		c.watchID = watch
		c.watch = time.AfterFunc(c.opts.ReceiptTimeout, func() {
			c.fail(fmt.Errorf("stomp: no receipt for ACK within %s (the frame or its answer was lost): connection given up", c.opts.ReceiptTimeout))
		})
	}
	c.mu.Unlock()
	if err := c.write(ctx, f); err != nil {
		if watch != "" {
			c.settleWatch(watch)
		}
		return err
	}
	return nil
}

// settleWatch ends the watch of AckAsync's RECEIPT id; it reports whether
// id was that receipt.
func (c *Conn) settleWatch(id string) bool {
	c.mu.Lock()
	if id == "" || id != c.watchID {
		c.mu.Unlock()
		return false
	}
	t := c.watch
	c.watchID, c.watch = "", nil
	c.mu.Unlock()
	t.Stop()
	return true
}

// Nack negatively acknowledges the MESSAGE whose ack header is id. On
// ActiveMQ without the redeliveryPlugin this sends the message straight to
// its dead-letter queue.
func (c *Conn) Nack(ctx context.Context, id string) error {
	return c.request(ctx, NewFrame(CmdNack, "id", id))
}

// SubscribeOptions configures a subscription.
type SubscribeOptions struct {
	// Ack is the ack mode: "auto", "client" or "client-individual".
	// Defaults to "client-individual".
	Ack string
	// Prefetch is sent as activemq.prefetchSize when > 0; it also sizes the
	// subscription's buffer. A broker that sends more unacknowledged
	// messages than that (one that ignores the header) does not stop the
	// connection: the frames beyond are kept in order, up to
	// MaxOverflowMessages or MaxOverflowBytes, and beyond those the
	// connection fails with an error saying so (the broker takes back what
	// was not acknowledged). An "auto" subscription has nothing to
	// acknowledge: when its buffer is full the connection waits for Next.
	Prefetch int
	// Headers are extra SUBSCRIBE headers (e.g. browser:true, selector).
	Headers []Header
}

// The most MESSAGE frames, and body bytes, a subscription keeps beyond its
// Prefetch while they wait for Next (see SubscribeOptions.Prefetch).
const (
	MaxOverflowMessages = 1000
	MaxOverflowBytes    = 64 << 20
)

// Subscription receives the MESSAGE frames of one SUBSCRIBE.
type Subscription struct {
	c        *Conn
	id       string
	prefetch int
	ch       chan *Frame
	gone     chan struct{} // closed by end
	once     sync.Once
	wait     bool // ack mode auto: the reader waits for room in ch

	mu        sync.Mutex
	over      []*Frame // frames beyond ch's room, oldest first (never with wait)
	overBytes int
}

// deliver hands a MESSAGE frame to the subscription, from the reader. It
// must not wait for Next on a subscription whose messages are acknowledged:
// the RECEIPTs of the Acks that make room come behind the frames a broker
// sent beyond the prefetch, and the reader would never get to them (every
// Ack would wait until its context ends). It fails when a broker keeps
// sending past MaxOverflowMessages or MaxOverflowBytes.
func (s *Subscription) deliver(f *Frame) error {
	if s.wait {
		select {
		case s.ch <- f:
		case <-s.gone:
		case <-s.c.done:
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.over) == 0 {
		select {
		case s.ch <- f:
			return nil
		default:
		}
	}
	s.over = append(s.over, f)
	s.overBytes += len(f.Body)
	if len(s.over) > MaxOverflowMessages || s.overBytes > MaxOverflowBytes {
		n, b := len(s.over), s.overBytes
		s.over, s.overBytes = nil, 0
		return fmt.Errorf("stomp: subscription %s: the broker sent %d messages (%d body bytes) beyond the prefetch of %d without waiting for acknowledgements (does it ignore activemq.prefetchSize?); the unacknowledged messages go back to it",
			s.id, n, b, s.prefetch)
	}
	return nil
}

// refill moves kept frames into the buffer Next just made room in.
func (s *Subscription) refill() {
	if s.wait {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.over) > 0 {
		select {
		case s.ch <- s.over[0]:
			s.overBytes -= len(s.over[0].Body)
			s.over[0] = nil
			s.over = s.over[1:]
		default:
			return
		}
	}
}

// Subscribe subscribes to destination and waits for the broker's RECEIPT.
func (c *Conn) Subscribe(ctx context.Context, destination string, opts SubscribeOptions) (*Subscription, error) {
	if opts.Ack == "" {
		opts.Ack = "client-individual"
	}
	buf := max(opts.Prefetch, 1)
	s := &Subscription{c: c, id: c.newID("s-"), prefetch: opts.Prefetch, ch: make(chan *Frame, buf), gone: make(chan struct{}), wait: opts.Ack == "auto"}
	f := NewFrame(CmdSubscribe, "id", s.id, "destination", destination, "ack", opts.Ack)
	if opts.Prefetch > 0 {
		f.Headers = append(f.Headers, Header{"activemq.prefetchSize", strconv.Itoa(opts.Prefetch)})
	}
	f.Headers = append(f.Headers, opts.Headers...)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.subs[s.id] = s
	c.mu.Unlock()
	if err := c.request(ctx, f); err != nil {
		c.removeSub(s)
		return nil, err
	}
	return s, nil
}

func (c *Conn) removeSub(s *Subscription) {
	c.mu.Lock()
	if c.subs != nil {
		delete(c.subs, s.id)
	}
	c.mu.Unlock()
	s.end()
}

func (s *Subscription) end() { s.once.Do(func() { close(s.gone) }) }

// ID returns the subscription id.
func (s *Subscription) ID() string { return s.id }

// Conn returns the connection of the subscription.
func (s *Subscription) Conn() *Conn { return s.c }

// Next returns the next MESSAGE frame. It fails with ctx.Err(), or with an
// error wrapping ErrConnClosed when the subscription or its connection ended.
func (s *Subscription) Next(ctx context.Context) (*Frame, error) {
	select {
	case f := <-s.ch:
		s.refill()
		return f, nil
	default:
	}
	select {
	case f := <-s.ch:
		s.refill()
		return f, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.gone:
		if err := s.c.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: unsubscribed", ErrConnClosed)
	}
}

// Unsubscribe ends the subscription and waits for the broker's RECEIPT.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	s.c.removeSub(s)
	return s.c.request(ctx, NewFrame(CmdUnsubscribe, "id", s.id))
}

// Disconnect sends DISCONNECT with a receipt, waits for it (bounded by ctx)
// and closes the connection. Unacknowledged messages go back to the broker.
func (c *Conn) Disconnect(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return nil
	}
	err := c.request(ctx, NewFrame(CmdDisconnect))
	c.fail(ErrConnClosed)
	if errors.Is(err, ErrConnClosed) {
		return nil // the broker may close before the reader saw the receipt
	}
	return err
}

// Close closes the connection at once, without DISCONNECT.
func (c *Conn) Close() error {
	c.fail(ErrConnClosed)
	return nil
}

// NetConn returns the underlying network connection (tests cut it to
// simulate a broken connection).
func (c *Conn) NetConn() net.Conn { return c.nc }
