package stomp

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/internal/reconnect"
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
	// HeaderJMSXGroupID is the JMS message group: ActiveMQ delivers the
	// messages of one group to one consumer at a time, in order, and moves
	// the group to another consumer when that one goes (docs/order.md).
	HeaderJMSXGroupID = "JMSXGroupID"
	// HeaderGroup carries the message group where a receiver can read it:
	// ActiveMQ takes a SEND's JMSXGroupID as the group and does not put it
	// into the MESSAGE frame. Publish adds HeaderGroup with the value of a
	// JMSXGroupID header, and a received message with HeaderGroup and
	// without JMSXGroupID gets JMSXGroupID back in Message.Headers, so an
	// order key header:JMSXGroupID reads it and a Requeue copy stays in
	// its group. A message a JMS producer sent with JMSXGroupID carries no
	// HeaderGroup: its group is not visible over STOMP (take the order key
	// from the body or another property).
	HeaderGroup = "inboxkit-group"
)

// QueueDestination returns the STOMP destination of queue name: a name
// without a leading '/' gets the "/queue/" prefix.
func QueueDestination(name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	return "/queue/" + name
}

// source consumes one queue of ActiveMQ over STOMP with
// ack:client-individual: the receiving half of an Adapter. Receive may be
// called from several goroutines; after a broken connection it reconnects
// with backoff, and the deliveries of the broken connection can no longer
// be acknowledged (their Ack returns an error wrapping ErrConnClosed) and
// come again from the broker with Redelivered=true. A delivery of a
// connection that broke before Receive handed it out is dropped: its Ack
// could only fail, and the broker gives it to another consumer (or to
// this one, after the reconnect).
type source struct {
	cfg  Config
	dest string

	limit      int       // Limits.MaxBodySize in effect
	lastLog    time.Time // last connection error logged
	suppressed int       // connection errors not logged since

	deliveries chan *Delivery // unbuffered: at most one in hand of the pump
	closed     chan struct{}
	closeOnce  sync.Once
	wg         sync.WaitGroup

	mu     sync.Mutex
	conn   *Conn
	lostAt time.Time // when conn broke
}

// newSource connects to the broker, subscribes to cfg.Queue and starts
// receiving. It fails when the first connection fails; later broken
// connections are re-established in the background. cfg is validated.
func newSource(ctx context.Context, cfg Config) (*source, error) {
	s := &source{
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

func (s *source) connect(ctx context.Context) (*Subscription, error) {
	c, err := s.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	opts := SubscribeOptions{Prefetch: s.cfg.Prefetch}
	if s.cfg.Exclusive {
		opts.Headers = []Header{{"activemq.exclusive", "true"}}
	}
	sub, err := c.Subscribe(sctx, s.dest, opts)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("stomp: subscribe %s: %w", s.dest, err)
	}
	s.mu.Lock()
	s.conn, s.lostAt = c, time.Time{}
	s.mu.Unlock()
	return sub, nil
}

// run pumps messages of the current subscription to Receive and reconnects
// when the connection breaks.
func (s *source) run(sub *Subscription) {
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
		s.mu.Lock()
		s.lostAt = time.Now()
		s.mu.Unlock()
		s.report(err)
		wait := reconnect.Waits(s.cfg.Reconnect)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait()):
			}
			sub, err = s.connect(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.report(err)
		}
	}
}

// report passes a connection error to ErrorFunc and logs it with its cause,
// at most once per minute (with the number of errors not logged since).
func (s *source) report(err error) {
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

func (s *source) pump(ctx context.Context, sub *Subscription) error {
	for {
		f, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if dead(sub.Conn()) {
			continue // buffered before the break: Next reports it after these
		}
		d := &Delivery{conn: sub.Conn(), ackID: f.Value("ack"), wait: s.cfg.AckWait, msg: messageFromFrame(f), oversize: f.Oversize, limit: s.limit}
		select {
		case s.deliveries <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *source) Receive(ctx context.Context) (consumer.Delivery, error) {
	select {
	case <-s.closed:
		return nil, consumer.ErrClosed
	default:
	}
	for {
		select {
		case d := <-s.deliveries:
			if dead(d.conn) {
				continue
			}
			return d, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closed:
			return nil, consumer.ErrClosed
		}
	}
}

// dead reports whether connection c has ended.
func dead(c *Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func (s *source) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.wg.Wait()
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Disconnect(ctx) // closing: the broker redelivers what was not acknowledged
			cancel()
		}
	})
	return nil
}

func (s *source) current() *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// ready tells whether the subscribed connection is up.
func (s *source) ready() error {
	s.mu.Lock()
	c, lostAt := s.conn, s.lostAt
	s.mu.Unlock()
	select {
	case <-s.closed:
		return fmt.Errorf("stomp: %w", consumer.ErrClosed)
	default:
	}
	if err := c.Err(); err != nil {
		if lostAt.IsZero() { // the reconnect loop has not seen it yet
			return fmt.Errorf("stomp: not connected to %s, reconnecting: %w", s.cfg.Addr, err)
		}
		return fmt.Errorf("stomp: not connected to %s since %s, reconnecting: %w", s.cfg.Addr, lostAt.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// Delivery is one MESSAGE received by an Adapter. It implements
// consumer.Delivery.
type Delivery struct {
	conn     *Conn
	ackID    string
	wait     bool // Ack waits for its RECEIPT (Config.AckWait)
	msg      inboxkit.Message
	oversize int // body size over limit (the body was dropped), or 0
	limit    int
}

var (
	_ consumer.OversizeDelivery = (*Delivery)(nil)
	_ consumer.PlaceKeeper      = (*Delivery)(nil)
)

// ReturnsOnClose reports true: Requeue sends a copy to the tail of the
// queue, while a delivery left unacknowledged comes again when the
// subscription's connection closes, before the queue's later messages (a
// consumer stopping with deliveries held for their order key leaves them
// so; consumer.PlaceKeeper).
func (d *Delivery) ReturnsOnClose() bool { return true }

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

// Ack acknowledges the message: it returns once the ACK is written
// (Conn.AckAsync), or with Config.AckWait after the broker's RECEIPT. It
// fails with an error wrapping ErrConnClosed when the connection the
// message came on is known to be gone; the broker then redelivers it.
func (d *Delivery) Ack(ctx context.Context) error {
	ack := d.conn.AckAsync
	if d.wait {
		ack = d.conn.Ack
	}
	if err := ack(ctx, d.ackID); err != nil {
		return fmt.Errorf("stomp: ack %s: %w", d.msg.BrokerMessageID, err)
	}
	return nil
}

// Requeue hands the message back without ActiveMQ's dead-letter queue: it
// sends a persistent copy (same headers and body, HeaderRequeued
// incremented, AMQ_SCHEDULED_DELAY set when delay >= 1ms) to the same queue,
// waits for the receipt, and only then acknowledges the original. An
// oversize delivery (see Oversize), whose body was not read, is not copied
// and stays unacknowledged: the broker delivers it again once the
// connection it came on ends. When the
// send fails the original stays unacknowledged (it comes again after a
// reconnect); when the final ACK fails both the copy and the original exist,
// a duplicate the inbox absorbs.
func (d *Delivery) Requeue(ctx context.Context, delay time.Duration) error {
	if d.oversize > 0 {
		// Its body was not read: a copy would be empty, and acknowledging
		// the original would lose the body. Left unacknowledged, it comes
		// again when the subscription's connection ends (a tool that hands
		// back what it does not take, such as dlq replay or drop).
		return nil
	}
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
	if g := m.Headers[HeaderGroup]; g != "" && m.Headers[HeaderJMSXGroupID] == "" {
		// ActiveMQ keeps a SEND's JMSXGroupID as the message group and
		// leaves it out of the MESSAGE frame; the copy Publish sent with it
		// gives it back (see HeaderGroup).
		m.Headers[HeaderJMSXGroupID] = g
	}
	if f.Value("redelivered") == "true" {
		m.Redelivered = true
	}
	if n, _ := strconv.Atoi(f.Value(HeaderRequeued)); n > 0 {
		m.Redelivered = true
	}
	// ActiveMQ flags every delivery of a message dispatched before
	// (redelivered:true), and the adapter's requeue copies carry
	// HeaderRequeued. A broker restart forgets the flag of messages
	// dispatched before it unless the destination policy sets
	// persistJMSRedelivered (see the package doc).
	m.FirstDelivery = !m.Redelivered
	return m
}
