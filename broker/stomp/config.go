package stomp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// Config configures an Adapter and Browse. The zero value of every field
// selects its documented default.
type Config struct {
	// URL is the broker URL, stomp://[login:passcode@]host:61613 (tcp://
	// is accepted too), or with the addresses of a master/slave pair,
	// stomp://host1:61613,host2:61613; it sets Addr, Login and Passcode
	// where those are empty, its ?heartbeat= sets Heartbeat,
	// ?receipt-timeout= ReceiptTimeout and ?exclusive=true Exclusive.
	// Defaults to "" (Addr).
	URL string
	// Addr is the broker's STOMP address, host:port, or a comma-separated
	// list of them (an ActiveMQ master and its slaves: only the broker
	// holding the store's lock listens). Every connect tries them in order
	// and keeps the first that answers, so after the master dies the
	// Adapter reconnects to whichever slave took over. Defaults to the
	// host of URL, or "127.0.0.1:61613".
	Addr string
	// Host is the CONNECT host header. Defaults to the host part of Addr.
	Host string
	// Login and Passcode authenticate when Login is not empty. Default: none.
	Login, Passcode string
	// Queue is the queue Receive consumes: a plain name ("orders") becomes
	// "/queue/orders"; a name starting with '/' is used as it is. Empty
	// means a publisher-only Adapter: Receive returns ErrNoQueue.
	// Defaults to "".
	Queue string
	// Prefetch is how many unacknowledged messages the broker may push to
	// the Adapter at once (activemq.prefetchSize). Set it to at least what
	// the consumer takes at once (its Concurrency × BatchSize; in
	// store-then-process its Receivers; consumer.Prefetcher), or a little
	// more: a higher value holds messages back from other consumers.
	// Defaults to 10.
	Prefetch int
	// Exclusive subscribes to Queue as an ActiveMQ exclusive consumer
	// (activemq.exclusive:true): the broker delivers the queue to one
	// exclusive subscription at a time, whatever the number of processes
	// consuming it; the others wait as standbys, and when the active one
	// goes (closed, killed, its connection lost) the broker picks one of
	// them, which gets the messages the previous one had not acknowledged
	// first, in queue order. With an order key
	// (consumer.Config.OrderKeyFunc) the one active process keeps each
	// key's order, also when processes die in quick succession, where
	// message groups reordered a group (docs/order.md). One process does
	// the work: for more, partition the keys over several queues. Defaults
	// to the URL's exclusive, else false.
	Exclusive bool
	// Heartbeat is the STOMP heart-beat interval, both ways. The connection
	// is considered dead (and the Adapter reconnects) when the broker sends
	// nothing for three times the negotiated interval. Defaults to the
	// URL's ?heartbeat= (a Go duration, e.g. 5s), else 10s; negative
	// disables heart-beats.
	Heartbeat time.Duration
	// DialTimeout bounds dialling and the STOMP handshake. Defaults to 10s.
	DialTimeout time.Duration
	// WriteTimeout bounds every frame write. Defaults to 10s.
	WriteTimeout time.Duration
	// ReceiptTimeout bounds the wait for the broker's RECEIPT of a SEND,
	// ACK or NACK; without one the connection is given up and redialled
	// (ConnOptions.ReceiptTimeout). It is how long a connection that
	// carries heart-beats but loses frames (a proxy that garbles them)
	// goes unnoticed. Defaults to the URL's ?receipt-timeout= (a Go
	// duration), else 30s.
	ReceiptTimeout time.Duration
	// AckWait makes Ack wait for the broker's RECEIPT of its ACK. By
	// default Ack returns once the ACK is written (Conn.AckAsync): the
	// acknowledgements of several handlers follow each other on the one
	// connection instead of taking a round trip each, and an ACK asks for
	// a RECEIPT when none is outstanding, which must come within
	// ReceiptTimeout or the connection is given up. Either way Ack is only
	// called after the commit; an ACK lost with its connection brings the
	// message again, which the inbox absorbs as a duplicate. Defaults to
	// false.
	AckWait bool
	// Reconnect spaces the reconnect attempts after the receiving
	// connection broke. A zero field takes its default: 100ms doubling up
	// to 5s, no jitter (Jitter -1; set it in [0, 1] for some).
	Reconnect inboxkit.Backoff
	// Limits bound the frames accepted from the broker. Defaults: see Limits.
	Limits Limits
	// ErrorFunc, when set, is called with every connection error the
	// receiving connection recovers from by reconnecting (for logs).
	// Default: nil.
	ErrorFunc func(error)
	// Logger, when set, logs the receiving connection's errors with their
	// cause, at most once per minute. Default: nil (no log).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // the full error quotes the URL
			}
			return fmt.Errorf("stomp: Config.URL is invalid: %s", err)
		}
		switch strings.ToLower(u.Scheme) {
		case "stomp", "tcp":
		default:
			return fmt.Errorf("stomp: Config.URL %s: scheme %q is not supported: use stomp://[login:passcode@]host:61613", u.Redacted(), u.Scheme)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("stomp: Config.URL %s has no host: e.g. stomp://127.0.0.1:61613", u.Redacted())
		}
		if c.Addr == "" {
			addrs, err := Addrs(u.Host)
			if err != nil {
				return fmt.Errorf("stomp: Config.URL %s: %v", u.Redacted(), err)
			}
			c.Addr = strings.Join(addrs, ",")
		}
		if c.Login == "" && c.Passcode == "" && u.User != nil {
			c.Login = u.User.Username()
			c.Passcode, _ = u.User.Password()
		}
		for k := range u.Query() {
			switch k {
			case "heartbeat", "receipt-timeout", "exclusive":
			default:
				return fmt.Errorf("stomp: Config.URL %s: unknown query parameter %q (known: heartbeat, receipt-timeout, exclusive)", u.Redacted(), k)
			}
		}
		for _, p := range []struct {
			name, example string
			field         *time.Duration
		}{{"heartbeat", "5s", &c.Heartbeat}, {"receipt-timeout", "10s", &c.ReceiptTimeout}} {
			v := u.Query().Get(p.name)
			if v == "" || *p.field != 0 {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("stomp: Config.URL %s: %s=%q is not a positive duration: e.g. ?%s=%s", u.Redacted(), p.name, v, p.name, p.example)
			}
			*p.field = d
		}
		switch v := u.Query().Get("exclusive"); v {
		case "", "false":
		case "true":
			c.Exclusive = true
		default:
			return fmt.Errorf("stomp: ?exclusive=%s in Config.URL %s: use true or false", v, u.Redacted())
		}
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:61613"
	}
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	c.Reconnect = c.Reconnect.Or(inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: -1})
	return nil
}

// CheckURL returns the error Open would return for raw as Config.URL
// (a stomp:// URL: its hosts, heartbeat, receipt-timeout and exclusive),
// without connecting.
func CheckURL(raw string) error {
	c := Config{URL: raw}
	return c.setDefaults()
}

// check sets the defaults and validates.
func (c *Config) check() error {
	if err := c.setDefaults(); err != nil {
		return err
	}
	return c.validate()
}

func (c *Config) validate() error {
	switch {
	case c.Prefetch < 0:
		return errors.New("stomp: Config.Prefetch must not be negative")
	case c.DialTimeout < 0:
		return errors.New("stomp: Config.DialTimeout must not be negative")
	case c.WriteTimeout < 0:
		return errors.New("stomp: Config.WriteTimeout must not be negative")
	case c.ReceiptTimeout < 0:
		return errors.New("stomp: Config.ReceiptTimeout must not be negative")
	case c.Limits.MaxBodySize < 0 || c.Limits.MaxHeaders < 0 || c.Limits.MaxLineLength < 0:
		return errors.New("stomp: Config.Limits fields must not be negative")
	}
	return c.Reconnect.Validate("stomp: Config.Reconnect")
}

// Addrs splits hosts, "host[:port]" or a comma-separated list of them, into
// host:port addresses, 61613 where a port is missing.
func Addrs(hosts string) ([]string, error) {
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, fmt.Errorf("an empty address in %q: list them as host1:61613,host2:61613", hosts)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "61613")
		}
		out = append(out, h)
	}
	return out, nil
}

// dial connects to the first address of c.Addr that answers, each
// attempt bounded by DialTimeout.
func (c *Config) dial(ctx context.Context) (*Conn, error) {
	addrs := strings.Split(c.Addr, ",")
	var errs []error
	for _, addr := range addrs {
		dctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
		conn, err := Dial(dctx, strings.TrimSpace(addr), ConnOptions{
			Host: c.Host, Login: c.Login, Passcode: c.Passcode,
			HeartBeat: c.Heartbeat, WriteTimeout: c.WriteTimeout, ReceiptTimeout: c.ReceiptTimeout, Limits: c.Limits,
		})
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil || len(addrs) == 1 {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
