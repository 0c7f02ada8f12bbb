package stomp

import (
	"context"
	"errors"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// ErrNoQueue is returned by Receive on an Adapter opened without
// Config.Queue (a publisher-only Adapter).
var ErrNoQueue = errors.New("stomp: no Config.Queue: publisher-only adapter")

var (
	_ consumer.Source = (*Adapter)(nil)
	_ dlq.Publisher   = (*Adapter)(nil)
)

// Adapter is an ActiveMQ consumer.Source for one queue and a dlq.Publisher
// over STOMP. It holds up to two connections: one subscribed to
// Config.Queue, reconnected in the background after it breaks, and one for
// Publish, dialled on the first Publish (at Open for a publisher-only
// Adapter) and again on the next Publish after it broke. All methods are
// safe for concurrent use.
type Adapter struct {
	cfg Config
	src *source // nil without Config.Queue
	pub *publisher
}

// Open connects to the broker and returns the Adapter. With Config.Queue it
// subscribes and starts receiving; without, it connects the publishing
// connection. It fails when that first connection fails; later broken
// connections are re-established in the background (receiving) or on the
// next Publish.
func Open(ctx context.Context, cfg Config) (*Adapter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	a := &Adapter{cfg: cfg, pub: &publisher{cfg: cfg}}
	if cfg.Queue == "" {
		if _, err := a.pub.connection(ctx); err != nil {
			return nil, err
		}
		return a, nil
	}
	src, err := newSource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.src = src
	return a, nil
}

// Receive returns the next delivery of Config.Queue. It blocks until a
// delivery arrives, ctx is done (ctx.Err()) or the Adapter is closed
// (consumer.ErrClosed); while the connection is being repaired it waits.
func (a *Adapter) Receive(ctx context.Context) (consumer.Delivery, error) {
	if a.src == nil {
		return nil, ErrNoQueue
	}
	return a.src.Receive(ctx)
}

// Publish sends body with headers to destination (a plain name gets the
// "/queue/" prefix) as a persistent message, and returns after the broker's
// RECEIPT. An ERROR frame from the broker fails it with a *BrokerError.
// Header "persistent" may be overridden; "destination", "receipt" and
// "content-length" are set by Publish. After Close it fails with
// consumer.ErrClosed.
func (a *Adapter) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	return a.pub.Publish(ctx, destination, headers, body)
}

// Ready returns nil while the receiving connection is up (a readiness
// check: see consumer.Readier), and otherwise an error saying since when it
// is reconnecting and why. A publisher-only Adapter is ready while its
// connection is up, and dials when it has none, bounded by ctx.
func (a *Adapter) Ready(ctx context.Context) error {
	if a.src != nil {
		return a.src.ready()
	}
	_, err := a.pub.connection(ctx)
	return err
}

// Prefetch returns Config.Prefetch, the subscription's
// activemq.prefetchSize (consumer.Prefetcher).
func (a *Adapter) Prefetch() int { return a.cfg.Prefetch }

// Close stops intake and disconnects both connections; the broker
// redelivers every message not yet acknowledged (with Redelivered=true).
// Deliveries received before Close can no longer be settled. Receive and
// Publish return consumer.ErrClosed afterwards. Close is safe to call more
// than once.
func (a *Adapter) Close() error {
	if a.src != nil {
		_ = a.src.Close()
	}
	return a.pub.Close()
}

// Conn returns the receiving connection, or for a publisher-only Adapter
// the publishing one; nil when there is none (tests cut it to simulate a
// failure).
func (a *Adapter) Conn() *Conn {
	if a.src != nil {
		return a.src.current()
	}
	return a.pub.current()
}
