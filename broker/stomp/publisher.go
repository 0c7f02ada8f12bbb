package stomp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
)

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("stomp: publisher closed")

// Publisher sends persistent messages with a receipt. It implements
// dlq.Publisher and is safe for concurrent use. It holds one connection,
// dialled on first use and again on the next Publish after it broke; a
// Publish in flight when the connection breaks returns an error (the
// message may or may not be stored; the caller keeps its original).
type Publisher struct {
	cfg Config

	mu     sync.Mutex
	conn   *Conn
	closed bool
}

var _ dlq.Publisher = (*Publisher)(nil)

// NewPublisher validates cfg and connects to the broker.
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg}
	if _, err := p.connection(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Publisher) connection(ctx context.Context) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	if p.conn != nil && p.conn.Err() == nil {
		return p.conn, nil
	}
	c, err := p.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	p.conn = c
	return c, nil
}

// Publish sends body with headers to destination (a plain name gets the
// "/queue/" prefix) as a persistent message, and returns after the broker's
// RECEIPT. An ERROR frame from the broker fails it with a *BrokerError.
// Header "persistent" may be overridden; "destination", "receipt" and
// "content-length" are set by Publish.
func (p *Publisher) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	if destination == "" {
		return errors.New("stomp: publish: empty destination")
	}
	c, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("stomp: publish to %s: %w", destination, err)
	}
	hs := make([]Header, 0, len(headers))
	for k, v := range headers {
		hs = append(hs, Header{k, v})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Key < hs[j].Key })
	if err := c.Send(ctx, QueueDestination(destination), hs, body); err != nil {
		return fmt.Errorf("stomp: publish to %s: %w", destination, err)
	}
	return nil
}

// Conn returns the current connection, or nil (tests cut it).
func (p *Publisher) Conn() *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

// Close disconnects. Publish fails with ErrPublisherClosed afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	c := p.conn
	p.closed = true
	p.conn = nil
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Disconnect(ctx)
}

// Browse lists up to limit messages of queue (0 = all) without consuming
// them, using an ActiveMQ queue browser (SUBSCRIBE with browser:true; the
// broker ends the browse with a MESSAGE carrying browser:end). The messages
// stay on the queue. Browse holds the listed messages in memory.
func Browse(ctx context.Context, cfg Config, queue string, limit int) ([]inboxkit.Message, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if queue == "" {
		return nil, errors.New("stomp: browse: empty queue name")
	}
	c, err := cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Disconnect(dctx)
	}()
	sub, err := c.Subscribe(ctx, QueueDestination(queue), SubscribeOptions{
		Ack:      "auto",
		Prefetch: 100,
		Headers:  []Header{{"browser", "true"}},
	})
	if err != nil {
		return nil, fmt.Errorf("stomp: browse %s: %w", queue, err)
	}
	var out []inboxkit.Message
	for {
		f, err := sub.Next(ctx)
		if err != nil {
			return out, fmt.Errorf("stomp: browse %s: %w", queue, err)
		}
		if f.Value("browser") == "end" {
			return out, nil
		}
		out = append(out, messageFromFrame(f))
		if limit > 0 && len(out) >= limit {
			return out, nil
		}
	}
}
