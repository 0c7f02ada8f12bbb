package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/reconnect"
)

// Config configures an Adapter. The zero value of every field selects its
// documented default.
type Config struct {
	// URL is the AMQP 0-9-1 URL, with credentials and vhost, for example
	// amqp://guest:guest@127.0.0.1:5672/; its query parameter queue-type
	// sets QueueType when that is empty, and single-active-consumer=true
	// sets SingleActiveConsumer. The password never appears in
	// errors or logs. Defaults to "amqp://guest:guest@127.0.0.1:5672/".
	URL string
	// Queue is the queue Receive consumes from. An existing queue is used
	// as it is, whatever its type and arguments (a passive declare first);
	// a missing one is declared durable, of QueueType. Empty means a
	// publisher-only Adapter: Receive returns an error. Defaults to "".
	Queue string
	// Prefetch is the channel QoS: the most unacknowledged deliveries the
	// broker hands this Adapter at once. A delivery held back by a delayed
	// Requeue keeps its slot until it is requeued. Defaults to 10.
	Prefetch int
	// QueueType is the type of the queues the Adapter creates: Queue and
	// the destination queues of Publish, when they do not exist yet (an
	// existing queue keeps its own type). QueueQuorum queues report
	// x-delivery-count, so Message.DeliveryCount is known, also after a
	// consumer crash; no x-delivery-limit is set, so the broker never
	// dead-letters on its own (see the package doc on an existing queue's
	// limit). QueueStream is refused for Queue: a stream is no work queue
	// (a requeue does not deliver again). Defaults to the URL's queue-type,
	// else "": no x-queue-type argument, the vhost's default type (classic
	// on RabbitMQ 3.10).
	QueueType string
	// SingleActiveConsumer declares the queues the Adapter creates (as
	// QueueType) with x-single-active-consumer: true: the broker delivers
	// a queue's messages to one consumer at a time, whatever the number
	// of processes consuming it, and when that consumer goes (closed,
	// killed, its connection lost) the next one takes over, the first
	// deliveries being those the previous one had not acknowledged, in
	// queue order. With an order key (consumer.Config.OrderKeyFunc) the
	// one active process keeps each key's order, and a standby takes over
	// after a crash without a per-key inversion (docs/order.md). An
	// existing queue is used as it is: one created without the argument
	// stays without it (delete it, or create it through an adapter with
	// this option first, e.g. inboxctl publish with the same URL). For
	// more than one active consumer, partition the keys over several
	// queues. Defaults to the URL's single-active-consumer, else false.
	SingleActiveConsumer bool
	// Reconnect spaces the reconnect attempts after a broken connection or
	// channel. A zero field takes its default: 500ms doubling up to 30s,
	// no jitter (Jitter -1; set it in [0, 1] for some).
	Reconnect inboxkit.Backoff
	// DialTimeout bounds one TCP connect plus AMQP handshake. Defaults to 10s.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval proposed to the broker: a
	// connection that carries nothing for about three intervals (a
	// partition) is given up and redialled. Defaults to the URL's
	// ?heartbeat= (whole seconds, RabbitMQ's URI form: ?heartbeat=5),
	// else 10s.
	Heartbeat time.Duration
	// heartbeatDefaulted: Heartbeat was 0, so the URL's ?heartbeat= sets it.
	heartbeatDefaulted bool
	// ConnectionName is shown in the management UI (client property
	// connection_name). Defaults to "inboxkit".
	ConnectionName string
	// Logger receives reconnect messages. Defaults to slog.Default().
	Logger *slog.Logger
}

// Queue types of Config.QueueType (the x-queue-type argument).
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
	QueueStream  = "stream"
)

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	reconnect.SetDefaults(&c.Reconnect, -1, &c.DialTimeout)
	if c.Heartbeat == 0 {
		c.Heartbeat, c.heartbeatDefaulted = 10*time.Second, true
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "inboxkit"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	// Parse errors quote the URL, so their text never reaches the caller
	// unredacted.
	u, err := url.Parse(c.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("rabbitmq: Config.URL is invalid: %s", err)
	}
	if hb := u.Query().Get("heartbeat"); hb != "" {
		n, err := strconv.ParseUint(hb, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("rabbitmq: Config.URL %s: heartbeat=%q is not a whole number of seconds (RabbitMQ's URI form): e.g. ?heartbeat=5", u.Redacted(), hb)
		}
		if c.heartbeatDefaulted {
			c.Heartbeat = time.Duration(n) * time.Second
		}
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		msg := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return fmt.Errorf("rabbitmq: Config.URL %s is invalid: %s", u.Redacted(), msg)
	}
	if c.QueueType == "" {
		c.QueueType = u.Query().Get("queue-type")
	}
	switch v := u.Query().Get("single-active-consumer"); v {
	case "", "false":
	case "true":
		c.SingleActiveConsumer = true
	default:
		return fmt.Errorf("rabbitmq: ?single-active-consumer=%s in Config.URL: use true or false", v)
	}
	switch c.QueueType {
	case "", QueueClassic, QueueQuorum:
	case QueueStream:
		if c.Queue != "" {
			return fmt.Errorf("rabbitmq: queue type %q for consuming %s: a stream is no work queue (a requeued message is not delivered again): consume from a quorum or classic queue", c.QueueType, c.Queue)
		}
	default:
		return fmt.Errorf("rabbitmq: queue type %q is unknown: use %s, %s or %s (Config.QueueType, or ?queue-type= in the URL)", c.QueueType, QueueQuorum, QueueClassic, QueueStream)
	}
	if c.Prefetch < 0 {
		return errors.New("rabbitmq: Config.Prefetch must not be negative")
	}
	if err := reconnect.Validate("rabbitmq", c.Reconnect, c.DialTimeout); err != nil {
		return err
	}
	if c.Heartbeat < 0 {
		return errors.New("rabbitmq: Config.Heartbeat must not be negative")
	}
	return nil
}

// redact returns rawURL with its password replaced by "xxxxx". A URL that
// does not parse is replaced entirely, since it may hold a password.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
