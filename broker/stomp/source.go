package stomp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
)

// Headers this package reads or writes on ActiveMQ.
const (
	// HeaderRequeued counts the requeues of a message: Requeue sends a copy
	// with this header set to the previous value + 1. A message carrying it
	// is reported as Redelivered.
	HeaderRequeued = "inboxkit-requeued"
	// HeaderScheduledDelay is ActiveMQ's scheduler header (milliseconds); it
	// needs schedulerSupport="true" in the broker configuration.
	HeaderScheduledDelay = "AMQ_SCHEDULED_DELAY"
)

// Config configures a Source, a Publisher and Browse. Zero fields take
// their defaults.
type Config struct {
	// Addr is the broker's STOMP address, host:port. Defaults to
	// "127.0.0.1:61613".
	Addr string
	// Host is the CONNECT host header. Defaults to the host part of Addr.
	Host string
	// Login and Passcode authenticate when Login is not empty. Default: none.
	Login, Passcode string
	// Queue is the queue a Source consumes: a plain name ("orders") becomes
	// "/queue/orders"; a name starting with '/' is used as it is. Required by
	// NewSource, ignored by the Publisher.
	Queue string
	// Prefetch is how many unacknowledged messages the broker may push to a
	// Source at once (activemq.prefetchSize). Set it to the consumer's
	// concurrency, or a little more: a higher value holds messages back from
	// other consumers. Defaults to 10.
	Prefetch int
	// HeartBeat is the STOMP heart-beat interval, both ways. The connection
	// is considered dead (and a Source reconnects) when the broker sends
	// nothing for three times the negotiated interval. Defaults to 10s; negative
	// disables heart-beats.
	HeartBeat time.Duration
	// ConnectTimeout bounds dialling and the STOMP handshake. Defaults to 10s.
	ConnectTimeout time.Duration
	// WriteTimeout bounds every frame write. Defaults to 10s.
	WriteTimeout time.Duration
	// ReconnectBackoff is the first wait before reconnecting after a broken
	// connection; it doubles after each failed attempt up to
	// MaxReconnectBackoff. Defaults to 100ms.
	ReconnectBackoff time.Duration
	// MaxReconnectBackoff caps ReconnectBackoff. Defaults to 5s.
	MaxReconnectBackoff time.Duration
	// Limits bound the frames accepted from the broker. Defaults: see Limits.
	Limits Limits
	// ErrorFunc, when set, is called with every connection error a Source
	// recovers from by reconnecting (for logs). Default: nil.
	ErrorFunc func(error)
	// Logger, when set, logs a Source's connection errors with their cause,
	// at most once per minute. Default: nil (no log).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:61613"
	}
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.ReconnectBackoff == 0 {
		c.ReconnectBackoff = 100 * time.Millisecond
	}
	if c.MaxReconnectBackoff == 0 {
		c.MaxReconnectBackoff = 5 * time.Second
	}
}

func (c *Config) validate() error {
	switch {
	case c.Prefetch < 0:
		return errors.New("stomp: Config.Prefetch must not be negative")
	case c.ConnectTimeout < 0:
		return errors.New("stomp: Config.ConnectTimeout must not be negative")
	case c.WriteTimeout < 0:
		return errors.New("stomp: Config.WriteTimeout must not be negative")
	case c.ReconnectBackoff < 0:
		return errors.New("stomp: Config.ReconnectBackoff must not be negative")
	case c.MaxReconnectBackoff < c.ReconnectBackoff:
		return errors.New("stomp: Config.MaxReconnectBackoff must not be smaller than ReconnectBackoff")
	case c.Limits.MaxBodySize < 0 || c.Limits.MaxHeaders < 0 || c.Limits.MaxLineLength < 0:
		return errors.New("stomp: Config.Limits fields must not be negative")
	}
	return nil
}

func (c *Config) dial(ctx context.Context) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	return Dial(ctx, c.Addr, ConnOptions{
		Host: c.Host, Login: c.Login, Passcode: c.Passcode,
		HeartBeat: c.HeartBeat, WriteTimeout: c.WriteTimeout, Limits: c.Limits,
	})
}

// QueueDestination returns the STOMP destination of queue name: a name
// without a leading '/' gets the "/queue/" prefix.
func QueueDestination(name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	return "/queue/" + name
}

// Features tells what ActiveMQ Classic over STOMP offers through this
// package.
func Features() consumer.Features {
	return consumer.Features{
		DeliveryCount:   false, // no delivery count after a consumer crash
		RedeliveredFlag: true,  // redelivered:true, or our requeue header
		DelayedRequeue:  true,  // AMQ_SCHEDULED_DELAY (schedulerSupport="true")
		NativeDLQ:       true,  // ActiveMQ's DLQ (NACK), never used by Requeue
	}
}

// Source consumes one queue of ActiveMQ over STOMP with
// ack:client-individual. It implements consumer.Source: Receive may be
// called from several goroutines; after a broken connection it reconnects
// with backoff, and the deliveries of the broken connection can no longer
// be acknowledged (their Ack returns an error wrapping ErrConnClosed) and
// come again from the broker with Redelivered=true.
type Source struct {
	cfg  Config
	dest string

	limit      int       // Limits.MaxBodySize in effect
	lastLog    time.Time // last connection error logged
	suppressed int       // connection errors not logged since

	deliveries chan *Delivery // unbuffered: at most one in hand of the pump
	closed     chan struct{}
	closeOnce  sync.Once
	wg         sync.WaitGroup

	mu   sync.Mutex
	conn *Conn
}

var _ consumer.Source = (*Source)(nil)

// NewSource connects to the broker, subscribes to cfg.Queue and starts
// receiving. It fails when the first connection fails; later broken
// connections are re-established in the background.
func NewSource(ctx context.Context, cfg Config) (*Source, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Queue == "" {
		return nil, errors.New("stomp: Config.Queue is required")
	}
	s := &Source{
		cfg:        cfg,
		dest:       QueueDestination(cfg.Queue),
		limit:      cfg.Limits.withDefaults().MaxBodySize,
		deliveries: make(chan *Delivery),
		closed:     make(chan struct{}),
	}
	sub, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.run(sub)
	return s, nil
}

func (s *Source) connect(ctx context.Context) (*Subscription, error) {
	c, err := s.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	sub, err := c.Subscribe(sctx, s.dest, SubscribeOptions{Prefetch: s.cfg.Prefetch})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("stomp: subscribe %s: %w", s.dest, err)
	}
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
	return sub, nil
}

// run pumps messages of the current subscription to Receive and reconnects
// when the connection breaks.
func (s *Source) run(sub *Subscription) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closed
		cancel()
	}()
	for {
		err := s.pump(ctx, sub)
		if ctx.Err() != nil {
			return
		}
		s.report(err)
		backoff := s.cfg.ReconnectBackoff
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			sub, err = s.connect(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.report(err)
			backoff = min(2*backoff, s.cfg.MaxReconnectBackoff)
		}
	}
}

// report passes a connection error to ErrorFunc and logs it with its cause,
// at most once per minute (with the number of errors not logged since).
func (s *Source) report(err error) {
	if s.cfg.ErrorFunc != nil {
		s.cfg.ErrorFunc(err)
	}
	if s.cfg.Logger == nil {
		return
	}
	if now := time.Now(); s.lastLog.IsZero() || now.Sub(s.lastLog) >= time.Minute {
		s.cfg.Logger.Warn("stomp: connection to the broker failed, reconnecting", "queue", s.cfg.Queue, "addr", s.cfg.Addr,
			"error", err.Error(), "errors_not_logged", s.suppressed)
		s.lastLog, s.suppressed = now, 0
		return
	}
	s.suppressed++
}

func (s *Source) pump(ctx context.Context, sub *Subscription) error {
	for {
		f, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		d := &Delivery{conn: sub.Conn(), ackID: f.Value("ack"), msg: messageFromFrame(f), oversize: f.Oversize, limit: s.limit}
		select {
		case s.deliveries <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Receive returns the next delivery. See consumer.Source.
func (s *Source) Receive(ctx context.Context) (consumer.Delivery, error) {
	select {
	case <-s.closed:
		return nil, consumer.ErrClosed
	default:
	}
	select {
	case d := <-s.deliveries:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closed:
		return nil, consumer.ErrClosed
	}
}

// Close stops intake and disconnects; the broker redelivers every message
// not yet acknowledged (with Redelivered=true). Deliveries received before
// Close can no longer be settled.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.wg.Wait()
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Disconnect(ctx)
			cancel()
		}
	})
	return nil
}

// Conn returns the current connection (tests cut it to simulate a failure).
func (s *Source) Conn() *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// Delivery is one MESSAGE received by a Source. It implements
// consumer.Delivery.
type Delivery struct {
	conn     *Conn
	ackID    string
	msg      inboxkit.Message
	oversize int // body size over limit (the body was dropped), or 0
	limit    int
}

var _ consumer.OversizeDelivery = (*Delivery)(nil)

// Oversize returns the size of a body over Limits.MaxBodySize, which was
// not read (the message has no body), and the limit; 0, limit for an
// ordinary delivery.
func (d *Delivery) Oversize() (size, limit int) { return d.oversize, d.limit }

// Reject sends a NACK: ActiveMQ moves the message, body included, to its
// dead-letter queue (DLQ.<queue> with the individualDeadLetterStrategy,
// ActiveMQ.DLQ by default) unless its redeliveryPlugin redelivers it.
func (d *Delivery) Reject(ctx context.Context) error {
	if err := d.conn.Nack(ctx, d.ackID); err != nil {
		return fmt.Errorf("stomp: nack %s: %w", d.msg.BrokerMessageID, err)
	}
	return nil
}

// Message returns the received message.
func (d *Delivery) Message() inboxkit.Message { return d.msg }

// Ack acknowledges the message (ACK with a receipt) and returns after the
// broker's RECEIPT. It fails with an error wrapping ErrConnClosed when the
// connection the message came on is gone; the broker then redelivers it.
func (d *Delivery) Ack(ctx context.Context) error {
	if err := d.conn.Ack(ctx, d.ackID); err != nil {
		return fmt.Errorf("stomp: ack %s: %w", d.msg.BrokerMessageID, err)
	}
	return nil
}

// Requeue hands the message back without ActiveMQ's dead-letter queue: it
// sends a persistent copy (same headers and body, HeaderRequeued
// incremented, AMQ_SCHEDULED_DELAY set when delay >= 1ms) to the same queue,
// waits for the receipt, and only then acknowledges the original. When the
// send fails the original stays unacknowledged (it comes again after a
// reconnect); when the final ACK fails both the copy and the original exist,
// a duplicate the inbox absorbs.
func (d *Delivery) Requeue(ctx context.Context, delay time.Duration) error {
	n, _ := strconv.Atoi(d.msg.Header(HeaderRequeued))
	headers := make([]Header, 0, len(d.msg.Headers)+3)
	for k, v := range d.msg.Headers {
		if dropOnRequeue(k) {
			continue
		}
		headers = append(headers, Header{k, v})
	}
	headers = append(headers, Header{HeaderRequeued, strconv.Itoa(n + 1)}, Header{"persistent", "true"})
	if d.msg.Header(consumer.HeaderOriginalMessageID) == "" && d.msg.BrokerMessageID != "" {
		// The copy gets a new message-id: keep the first one for an event
		// id derived from it (consumer.MessageIDSource).
		headers = append(headers, Header{consumer.HeaderOriginalMessageID, d.msg.BrokerMessageID})
	}
	if ms := delay.Milliseconds(); ms > 0 {
		headers = append(headers, Header{HeaderScheduledDelay, strconv.FormatInt(ms, 10)})
	}
	if err := d.conn.Send(ctx, d.msg.Destination, headers, d.msg.Body); err != nil {
		return fmt.Errorf("stomp: requeue %s: send copy: %w", d.msg.BrokerMessageID, err)
	}
	if err := d.conn.Ack(ctx, d.ackID); err != nil {
		return fmt.Errorf("stomp: requeue %s: copy sent, ack of the original failed (it will come again): %w", d.msg.BrokerMessageID, err)
	}
	return nil
}

// dropOnRequeue reports the MESSAGE headers that the broker sets itself and
// that a requeued copy must not carry over.
func dropOnRequeue(k string) bool {
	switch k {
	case "message-id", "destination", "subscription", "ack", "redelivered", "content-length",
		"receipt", "timestamp", "persistent", HeaderRequeued, "scheduledJobId":
		return true
	}
	return strings.HasPrefix(k, "AMQ_SCHEDULED_")
}

// messageFromFrame maps a MESSAGE frame to the inbox vocabulary.
func messageFromFrame(f *Frame) inboxkit.Message {
	m := inboxkit.Message{
		Headers:         make(map[string]string, len(f.Headers)),
		Body:            f.Body,
		Destination:     f.Value("destination"),
		BrokerMessageID: f.Value("message-id"),
	}
	for _, h := range f.Headers {
		if _, dup := m.Headers[h.Key]; !dup {
			m.Headers[h.Key] = h.Value
		}
	}
	if f.Value("redelivered") == "true" {
		m.Redelivered = true
	}
	if n, _ := strconv.Atoi(f.Value(HeaderRequeued)); n > 0 {
		m.Redelivered = true
	}
	return m
}
