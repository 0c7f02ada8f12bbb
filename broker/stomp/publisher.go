package stomp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
)

// publisher sends persistent messages with a receipt: the publishing half
// of an Adapter. It is safe for concurrent use. It holds one connection,
// dialled on first use and again on the next Publish after it broke; a
// Publish in flight when the connection breaks returns an error (the
// message may or may not be stored; the caller keeps its original).
type publisher struct {
	cfg Config

	mu     sync.Mutex
	conn   *Conn
	closed bool
}

func (p *publisher) connection(ctx context.Context) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, consumer.ErrClosed
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

func (p *publisher) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	if destination == "" {
		return errors.New("stomp: publish: empty destination")
	}
	c, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("stomp: publish to %s: %w", destination, err)
	}
	hs := make([]Header, 0, len(headers)+1)
	for k, v := range headers {
		hs = append(hs, Header{k, v})
	}
	if g := headers[HeaderJMSXGroupID]; g != "" && headers[HeaderGroup] == "" {
		hs = append(hs, Header{HeaderGroup, g}) // see HeaderGroup
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Key < hs[j].Key })
	if err := c.Send(ctx, QueueDestination(destination), hs, body); err != nil {
		return fmt.Errorf("stomp: publish to %s: %w", destination, err)
	}
	return nil
}

func (p *publisher) current() *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

func (p *publisher) Close() error {
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
	if err := cfg.check(); err != nil {
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
		_ = c.Disconnect(dctx) // the browse is over; a failed goodbye loses nothing
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
