package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/reconnect"
)

// MaxPrefetch is the largest Config.Prefetch: basic.qos's prefetch count
// is 16 bits wide, and a larger value would reach the broker cut down.
const MaxPrefetch = 65535

// Config configures an Adapter. The zero value of every field selects its
// documented default.
type Config struct {
	// URL is the AMQP 0-9-1 URL, with credentials and vhost, for example
	// amqp://guest:guest@127.0.0.1:5672/; its query parameter queue-type
	// sets QueueType when that is empty, and single-active-consumer=true
	// sets SingleActiveConsumer. The password never appears in
	// errors or logs. Defaults to "amqp://guest:guest@127.0.0.1:5672/".
	//
	// The nodes of a cluster are listed comma-separated in the host part,
	// each with its port (5672 by default), the credentials, vhost and
	// query shared: amqp://guest:guest@rmq1:5672,rmq2:5672,rmq3:5672/.
	// Host names or IPv4 addresses only (an IPv6 literal works as the only
	// host). The Adapter connects to the first node that answers, and
	// after a lost connection to the next one in the list that answers,
	// round the list (see the package doc, Connection loss and clusters). DialTimeout
	// bounds each node's attempt.
	URL string
	// Queue is the queue Receive consumes from. An existing queue is used
	// as it is, whatever its type and arguments (a passive declare first);
	// a missing one is declared durable, of QueueType. Empty means a
	// publisher-only Adapter: Receive returns an error. Defaults to "".
	Queue string
	// Prefetch is the channel QoS: the most unacknowledged deliveries the
	// broker hands this Adapter at once. A delivery held back by a delayed
	// Requeue keeps its slot until it is requeued. Defaults to 10; at
	// most MaxPrefetch.
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
	// this option first, e.g. inboxctl publish with the same URL). Set it
	// as well for an existing queue created single-active by others: Close
	// then does not cancel the consumer before the connection closes,
	// which would let the standby take later messages before the
	// unacknowledged ones return (see Adapter.Close). For
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
	// nodes is URL split into one URL per node (set by validate).
	nodes []string
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

// urlParams are the query parameters Config.URL may carry: this package's,
// then RabbitMQ's URI parameters that amqp091-go reads.
var urlParams = []string{"heartbeat", "queue-type", "single-active-consumer",
	"connection_timeout", "channel_max", "auth_mechanism",
	"certfile", "keyfile", "cacertfile", "server_name_indication"}

// CheckURL returns the error Open would return for raw as Config.URL (its
// node list, heartbeat, queue-type, single-active-consumer and RabbitMQ's
// own URI parameters), without connecting.
func CheckURL(raw string) error {
	c := Config{URL: raw}
	c.setDefaults()
	return c.validate()
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
	for k := range u.Query() {
		if !slices.Contains(urlParams, k) {
			return fmt.Errorf("rabbitmq: Config.URL %s: unknown query parameter %q (known: %s)", u.Redacted(), k, strings.Join(urlParams, ", "))
		}
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
	if c.nodes, err = nodeURLs(c.URL, u); err != nil {
		return fmt.Errorf("rabbitmq: Config.URL %s: %w", u.Redacted(), err)
	}
	for _, n := range c.nodes {
		if _, err := amqp.ParseURI(n); err != nil {
			msg := err.Error()
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
			return fmt.Errorf("rabbitmq: Config.URL %s is invalid: %s", u.Redacted(), msg)
		}
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
	if c.Prefetch > MaxPrefetch {
		return fmt.Errorf("rabbitmq: Config.Prefetch %d is above %d, the most AMQP 0-9-1's prefetch count holds (16 bits)", c.Prefetch, MaxPrefetch)
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

// nodeURLs splits raw, parsed as u, when its host part lists several nodes
// (amqp://user:pass@h1:5672,h2:5672/vhost?query) into one URL per node,
// each with the credentials, vhost and query of u. A URL of one host is
// returned as it is (raw).
func nodeURLs(raw string, u *url.URL) ([]string, error) {
	hosts := strings.Split(u.Host, ",")
	if len(hosts) == 1 {
		return []string{raw}, nil
	}
	nodes := make([]string, 0, len(hosts))
	for i, h := range hosts {
		if strings.TrimSpace(h) == "" {
			return nil, fmt.Errorf("host %d of the node list %q is empty: list the nodes as host:port,host:port", i+1, u.Host)
		}
		n := *u
		n.Host = strings.TrimSpace(h)
		nodes = append(nodes, n.String())
	}
	return nodes, nil
}

// DialNodes connects to the first node of rawURL that answers: its only
// host, or each of the comma-separated hosts of a cluster's URL in turn
// (see Config.URL). The error names every node tried, passwords removed.
func DialNodes(rawURL string, cfg amqp.Config) (*amqp.Connection, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: URL %s is invalid", redact(rawURL))
	}
	nodes, err := nodeURLs(rawURL, u)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: URL %s: %w", u.Redacted(), err)
	}
	conn, _, err := dialFrom(nodes, 0, cfg)
	return conn, err
}

// dialFrom tries nodes in turn from index first, round the list, and
// returns the first connection made and the index of its node.
func dialFrom(nodes []string, first int, cfg amqp.Config) (*amqp.Connection, int, error) {
	var errs []error
	for k := range nodes {
		i := (first + k) % len(nodes)
		conn, err := amqp.DialConfig(nodes[i], cfg)
		if err == nil {
			return conn, i, nil
		}
		errs = append(errs, fmt.Errorf("rabbitmq: connect to %s: %w", redact(nodes[i]), err))
	}
	if len(errs) == 1 {
		return nil, -1, errs[0]
	}
	return nil, -1, fmt.Errorf("rabbitmq: no node of the %d answers: %w", len(nodes), errors.Join(errs...))
}
