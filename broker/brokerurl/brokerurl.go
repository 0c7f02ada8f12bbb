// Package brokerurl turns a broker URL into the adapter that serves it: the
// one place where the commands (inboxctl, inboxbench) choose between
// broker/stomp, broker/rabbitmq, broker/amqp10 and broker/jetstream. It
// imports every adapter, so it sits at the edge: a library user imports
// the one adapter it needs instead.
//
// # URLs
//
//	stomp://[login:passcode@]host:61613   ActiveMQ Classic over STOMP 1.2 (tcp:// too; ?exclusive=true: an exclusive
//	                                      consumer, one process consuming at a time; ?heartbeat=5s and
//	                                      ?receipt-timeout=10s; a master/slave pair:
//	                                      stomp://h1:61613,h2:61613, the first that answers)
//	amqp://user:pass@host:5672/[vhost]    RabbitMQ over AMQP 0-9-1 (amqps:// too; ?queue-type=quorum|classic|stream and
//	                                      ?single-active-consumer=true for the queues it creates; a cluster's nodes
//	                                      comma-separated: amqp://user:pass@h1:5672,h2:5672,h3:5672/, failed over)
//	amqp10://user:pass@host:5672          AMQP 1.0: IBM MQ (?profile=ibmmq), Artemis, Service Bus, RabbitMQ's plugin (amqp10s:// TLS)
//	nats://[user:pass@]host:4222          NATS JetStream (tls:// too; a cluster: nats://h1:4222,h2:4222,h3:4222,
//	                                      ?replicas=3 for the streams it creates, ?heartbeat=5s)
//	embedded[:DIR]                        a NATS JetStream server inside this process
//
// Parse refuses a query parameter the scheme's adapter does not read, and a
// value it cannot use, naming the known ones (the adapters' CheckURL): a
// mistyped option is an error before any connection, never ignored.
//
// Every adapter opened here is a consumer.Source (when opened with a queue)
// and a dlq.Publisher, and reports its connection state (consumer.Readier)
// and its prefetch (consumer.Prefetcher).
// On JetStream a queue is a subject held by the stream
// jetstream.StreamName(queue), which the adapter creates; the durable
// consumer is named after the consumer.
package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// Kinds of broker URL.
const (
	STOMP    = "stomp"
	AMQP     = "amqp"
	AMQP10   = "amqp10"
	NATS     = "nats"
	Embedded = "embedded"
)

// Examples lists the URL forms, for messages that ask for a broker URL.
const Examples = "use stomp://127.0.0.1:61613 (ActiveMQ), amqp://guest:guest@127.0.0.1:5672/ (RabbitMQ), amqp10://user:pass@host:5672 (AMQP 1.0: IBM MQ, Artemis, Service Bus), nats://127.0.0.1:4222 (JetStream) or embedded"

// URL is a parsed broker URL.
type URL struct {
	// Kind is STOMP, AMQP, AMQP10, NATS or Embedded.
	Kind string
	// Addr is host:port for STOMP, or a comma-separated list of them.
	Addr string
	// Login and Passcode are the STOMP credentials (from the userinfo).
	Login, Passcode string
	// URL is the URL as given, credentials included (empty for Embedded):
	// never print it.
	URL string
	// Dir is the store directory of an embedded server ("" for a temporary one).
	Dir string
	// Display is the URL with the password replaced by "xxxxx".
	Display string
	// Heartbeat is the URL's ?heartbeat= on NATS (the client's ping
	// interval: jetstream.Config.PingInterval); 0 when not given. The
	// STOMP and RabbitMQ adapters read their ?heartbeat= from URL
	// themselves.
	Heartbeat time.Duration
	// Replicas is the URL's ?replicas= on NATS (jetstream.Config.Replicas:
	// the copies of every stream the adapters create); 0 when not given.
	Replicas int
}

// natsServers returns the NATS URL u (parsed from raw) as the list
// nats.go reads: one URL per server, each with the credentials, none with
// the query. The servers of a cluster are given as a comma-separated list,
// after the scheme and the credentials once
// (nats://user:pass@h1:4222,h2:4222,h3:4222?replicas=3) or as whole URLs
// (nats://h1:4222,nats://h2:4222).
func natsServers(raw string, u *url.URL) (string, error) {
	rest, _, _ := strings.Cut(raw, "?")
	if !strings.Contains(rest, ",") {
		if u.RawQuery == "" {
			return raw, nil
		}
		v := *u
		v.RawQuery = ""
		return v.String(), nil
	}
	scheme := u.Scheme + "://"
	rest = rest[len(scheme):]
	if at := strings.LastIndex(rest, "@"); at >= 0 && !strings.Contains(rest[:at], "://") {
		rest = rest[at+1:] // the credentials, kept in u.User
	}
	var out []string
	for _, part := range strings.Split(rest, ",") {
		part = strings.TrimSpace(part)
		if !strings.Contains(part, "://") {
			part = scheme + part
		}
		v, err := url.Parse(part)
		if err != nil || v.Host == "" || (v.Path != "" && v.Path != "/") {
			return "", fmt.Errorf("server %d of the list is not host:port: list the servers as nats://h1:4222,h2:4222,h3:4222", len(out)+1)
		}
		if v.User == nil {
			v.User = u.User
		}
		v.Path, v.RawPath = "", ""
		out = append(out, v.String())
	}
	return strings.Join(out, ","), nil
}

// Parse parses a broker URL. Its errors say what to write instead, and
// never quote a password.
func Parse(raw string) (URL, error) {
	if raw == "" {
		return URL{}, fmt.Errorf("no broker given: %s", Examples)
	}
	if raw == Embedded || strings.HasPrefix(raw, Embedded+":") {
		dir := strings.TrimPrefix(strings.TrimPrefix(raw, Embedded), ":")
		return URL{Kind: Embedded, Dir: dir, Display: raw}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		msg := "invalid URL"
		if errors.As(err, &ue) {
			msg = ue.Err.Error() // the whole error quotes the URL
		}
		return URL{}, fmt.Errorf("broker URL is not a valid URL (%s): %s", msg, Examples)
	}
	b := URL{Display: u.Redacted(), URL: raw}
	noHost := func(example string) error {
		return fmt.Errorf("broker URL %s has no host: e.g. %s", b.Display, example)
	}
	switch strings.ToLower(u.Scheme) {
	case "stomp", "tcp":
		if u.Host == "" {
			return URL{}, noHost("stomp://127.0.0.1:61613")
		}
		addrs, err := stomp.Addrs(u.Host)
		if err != nil {
			return URL{}, fmt.Errorf("broker URL %s: %v", b.Display, err)
		}
		if err := stomp.CheckURL(raw); err != nil {
			return URL{}, err
		}
		b.Kind, b.Addr = STOMP, strings.Join(addrs, ",")
		b.Login = u.User.Username()
		b.Passcode, _ = u.User.Password()
		return b, nil
	case "amqp", "amqps":
		if u.Host == "" {
			return URL{}, noHost("amqp://guest:guest@127.0.0.1:5672/")
		}
		if err := rabbitmq.CheckURL(raw); err != nil {
			return URL{}, err
		}
		b.Kind = AMQP
		return b, nil
	case "amqp10", "amqp10s":
		if u.Host == "" {
			return URL{}, noHost("amqp10://user:pass@127.0.0.1:5672")
		}
		if err := amqp10.CheckURL(raw); err != nil {
			return URL{}, err
		}
		b.Kind = AMQP10
		return b, nil
	case "nats", "tls":
		if u.Host == "" {
			return URL{}, noHost("nats://127.0.0.1:4222")
		}
		b.Kind = NATS
		q := u.Query()
		for k := range q {
			if k != "heartbeat" && k != "replicas" {
				return URL{}, fmt.Errorf("broker URL %s: unknown query parameter %q (known: heartbeat, replicas)", b.Display, k)
			}
		}
		if q.Has("heartbeat") {
			d, err := time.ParseDuration(q.Get("heartbeat"))
			if err != nil || d <= 0 {
				return URL{}, fmt.Errorf("broker URL %s: heartbeat=%q is not a positive duration: e.g. ?heartbeat=5s", b.Display, q.Get("heartbeat"))
			}
			b.Heartbeat = d
		}
		if q.Has("replicas") {
			n, err := strconv.Atoi(q.Get("replicas"))
			if err != nil || n < 1 || n > 5 {
				return URL{}, fmt.Errorf("broker URL %s: replicas=%q: JetStream keeps 1 to 5 replicas of a stream: e.g. ?replicas=3 on a cluster of three", b.Display, q.Get("replicas"))
			}
			b.Replicas = n
		}
		servers, err := natsServers(raw, u)
		if err != nil {
			return URL{}, fmt.Errorf("broker URL %s: %v", b.Display, err)
		}
		b.URL = servers // nats.go reads no query
		return b, nil
	case "":
		return URL{}, fmt.Errorf("broker %q has no scheme: %s", u.Redacted(), Examples)
	}
	return URL{}, fmt.Errorf("broker scheme %q is not supported: %s", u.Scheme, Examples)
}

// Adapter is what every adapter opened here is: a consumer.Source (of the
// queue it was opened on; publisher-only adapters have none), a
// dlq.Publisher, a consumer.Readier and a consumer.Prefetcher.
type Adapter interface {
	consumer.Source
	dlq.Publisher
	consumer.Readier
	consumer.Prefetcher
}

// Options configures the adapters a Broker opens.
type Options struct {
	// Logger receives the adapters' connection messages. Defaults to
	// discarding them.
	Logger *slog.Logger
	// QueueType is the type of the RabbitMQ queues (amqp://) an adapter
	// creates (rabbitmq.Config.QueueType: quorum, classic or stream); an
	// existing queue is used as it is. Defaults to "": the URL's
	// ?queue-type=, else the vhost's default type.
	QueueType string
	// BrowseWait is how long Browse waits for one more message on a broker
	// without a queue browser before it takes the queue as read. Defaults
	// to 1.5 s.
	BrowseWait time.Duration
}

// Broker opens adapters on one broker URL, and for "embedded" runs the
// in-process JetStream server. It is safe for concurrent use.
type Broker struct {
	// URL is the parsed broker URL.
	URL URL
	// AckWait is JetStream's AckWait for the sources opened from now on;
	// 0 is the adapter's default (30s).
	AckWait time.Duration
	// MaxAckPending, if above 0, is the JetStream durable's MaxAckPending
	// for the sources opened from now on, in place of the prefetch but at
	// least 1000: the deliveries unacknowledged at once across every
	// process of the consumer name. 1 keeps a queue's order through a
	// crash (a killed process's delivery comes back after AckWait, before
	// any later one), at the cost of the whole consumer waiting AckWait.
	MaxAckPending int

	opts     Options
	natsURL  string
	embedded *embedded.Server
	tmpDir   string

	mu      sync.Mutex
	closers []io.Closer
	inspect Adapter // publisher-only adapter of Depth
}

// Open parses raw and, for "embedded", starts the in-process JetStream
// server (in a temporary directory without ":DIR", removed by Close).
func Open(raw string, opts Options) (*Broker, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &Broker{URL: u, opts: opts, natsURL: u.URL}
	if u.Kind == Embedded {
		dir := u.Dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "inboxkit-js-"); err != nil {
				return nil, err
			}
			b.tmpDir = dir
		}
		e, err := embedded.Start(dir)
		if err != nil {
			if b.tmpDir != "" {
				_ = os.RemoveAll(b.tmpDir)
			}
			return nil, err
		}
		b.embedded, b.natsURL = e, e.URL()
	}
	return b, nil
}

// NATSURL is the NATS URL of a NATS or Embedded broker ("" otherwise).
func (b *Broker) NATSURL() string {
	if b.URL.Kind == NATS || b.URL.Kind == Embedded {
		return b.natsURL
	}
	return ""
}

// Source opens an adapter consuming queue for the consumer called name
// (JetStream's durable consumer; other brokers do not use it), with at most
// prefetch unacknowledged deliveries (0: the adapter's default). On
// JetStream the durable is shared by every source of that name, and its
// MaxAckPending is prefetch but at least 1000, for all of them together.
// Close closes it too.
func (b *Broker) Source(ctx context.Context, queue, name string, prefetch int) (Adapter, error) {
	if queue == "" {
		return nil, errors.New("brokerurl: Source needs a queue")
	}
	return b.open(ctx, queue, name, prefetch, b.AckWait, false)
}

// Publisher opens a publisher-only adapter, which the broker confirms
// every message to (see dlq.Publisher). Close closes it too.
func (b *Broker) Publisher(ctx context.Context) (Adapter, error) {
	return b.open(ctx, "", "", 0, 0, false)
}

// open opens an adapter; ackWait is JetStream's AckWait of a source, and
// transient makes its durable transient (jetstream.Config.Transient).
func (b *Broker) open(ctx context.Context, queue, name string, prefetch int, ackWait time.Duration, transient bool) (Adapter, error) {
	var a Adapter
	var err error
	log := b.opts.Logger
	switch b.URL.Kind {
	case STOMP:
		a, err = stomp.Open(ctx, stomp.Config{URL: b.URL.URL, Queue: queue, Prefetch: prefetch, Logger: log})
	case AMQP:
		a, err = rabbitmq.Open(ctx, rabbitmq.Config{URL: b.URL.URL, Queue: queue, Prefetch: prefetch, QueueType: b.opts.QueueType, Logger: log})
	case AMQP10:
		a, err = amqp10.Open(ctx, amqp10.Config{URL: b.URL.URL, Queue: queue, Prefetch: prefetch, Logger: log})
	default:
		cfg := jetstream.Config{URL: b.natsURL, Subject: queue, PollWait: time.Second, PingInterval: b.URL.Heartbeat, Replicas: b.URL.Replicas, Logger: log}
		if queue != "" {
			// Every process of one consumer name shares the durable, so its
			// MaxAckPending (Prefetch) is the group's, not one process's:
			// that let the deliveries of a killed process (unacknowledged
			// until AckWait) stop all the others. A process holds at most
			// prefetch deliveries anyway: its workers pull one at a time.
			cfg.Durable, cfg.Prefetch, cfg.AckWait, cfg.Transient = durableName(name), max(prefetch, sharedDurablePrefetch), ackWait, transient
			if b.MaxAckPending > 0 && !transient {
				cfg.Prefetch = b.MaxAckPending
			}
		}
		a, err = jetstream.Open(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	b.track(a)
	return a, nil
}

// sharedDurablePrefetch is the least MaxAckPending of a JetStream durable
// consumer opened by Source (the adapter's default).
const sharedDurablePrefetch = 1000

// durableName makes a consumer name usable as a JetStream durable name.
func durableName(name string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(".*> \t", r) {
			return '_'
		}
		return r
	}, name)
}

func (b *Broker) track(c io.Closer) {
	b.mu.Lock()
	b.closers = append(b.closers, c)
	b.mu.Unlock()
}

// Refused reports whether err, from opening an adapter, says that the
// broker answered and refused what the adapter asked for, a matter of
// configuration and not of the network: a RabbitMQ declaration or consume
// refused with PRECONDITION_FAILED (rabbitmq.ErrPreconditionFailed), an
// AMQP 1.0 broker that settles deliveries itself (amqp10.ErrPresettled), a
// JetStream work-queue subject that another durable consumer reads
// (jetstream.ErrSubjectTaken).
func Refused(err error) bool {
	return errors.Is(err, rabbitmq.ErrPreconditionFailed) || errors.Is(err, amqp10.ErrPresettled) || errors.Is(err, jetstream.ErrSubjectTaken)
}

// ErrDepthUnknown is returned by Depth on a broker that cannot tell a
// queue's depth without receiving its messages.
var ErrDepthUnknown = errors.New("brokerurl: queue depth unknown")

// ErrNoSuchQueue is returned by Depth for a queue that does not exist, on a
// broker that can tell (RabbitMQ: rabbitmq.ErrNoSuchQueue).
var ErrNoSuchQueue = rabbitmq.ErrNoSuchQueue

// maxBrowse bounds the messages Depth browses on ActiveMQ.
const maxBrowse = 10000

// Depth returns the number of messages waiting in queue, without consuming
// them, and whether that number is a lower bound:
//
//   - ActiveMQ (stomp://): the messages a queue browser sees, up to 10,000
//     (atLeast is true at that bound). A missing queue is created empty by
//     the browse: ActiveMQ cannot tell over STOMP whether it existed.
//   - RabbitMQ (amqp://): a passive declare's message count, which leaves
//     out the messages delivered and not yet acknowledged; a missing queue
//     is ErrNoSuchQueue.
//   - JetStream (nats://, embedded): the messages on the subject in the
//     stream that captures it (0 when none does).
//   - AMQP 1.0 (amqp10://): ErrDepthUnknown. The protocol has no request
//     for a queue's depth (the draft management specification's
//     $management node is not offered by RabbitMQ's plugin, the AMQP 1.0
//     broker tested here); ask the broker's own tools.
func (b *Broker) Depth(ctx context.Context, queue string) (n int, atLeast bool, err error) {
	switch b.URL.Kind {
	case STOMP:
		ms, err := stomp.Browse(ctx, stomp.Config{URL: b.URL.URL}, queue, maxBrowse)
		return len(ms), len(ms) >= maxBrowse, err
	case AMQP10:
		return 0, false, fmt.Errorf("%w on AMQP 1.0: the protocol has no request for it ('inboxctl dlq list' receives the messages and hands them back; or ask the broker's own tools)", ErrDepthUnknown)
	}
	b.mu.Lock()
	a := b.inspect
	b.mu.Unlock()
	if a == nil {
		if a, err = b.Publisher(ctx); err != nil {
			return 0, false, err
		}
		b.mu.Lock()
		b.inspect = a
		b.mu.Unlock()
	}
	d, ok := a.(interface {
		Depth(context.Context, string) (int, error)
	})
	if !ok {
		return 0, false, ErrDepthUnknown
	}
	n, err = d.Depth(ctx, queue)
	return n, false, err
}

// defaultBrowseWait is Options.BrowseWait's default.
const defaultBrowseWait = 1500 * time.Millisecond

// MaxPrefetch is the largest prefetch Source takes on every broker:
// RabbitMQ's (rabbitmq.MaxPrefetch; AMQP 0-9-1's prefetch count is 16
// bits).
const MaxPrefetch = rabbitmq.MaxPrefetch

// BrowseAll is the most messages Browse reads on a broker without a queue
// browser (with limit 0, or a larger one): the unsettled messages it is
// handed at once, RabbitMQ's largest prefetch (MaxPrefetch).
const BrowseAll = MaxPrefetch

// browseDurable is the JetStream durable consumer Browse and ToolSource
// read through: the name inboxctl's dlq list has always used, so an
// existing one is reused. It is transient (jetstream.Config.Transient): on
// a work-queue stream it is deleted when the source closes, so that what
// it handed back is there for the next command, also after a restart of
// an embedded server (one per command with embedded:DIR), which holds a
// kept durable's handed-back messages as pending until AckWait.
const browseDurable = "inboxctl-dlq"

// ToolSource opens a source on queue for a command that reads it now and
// then and hands back what it does not take (inboxctl's dlq replay and dlq
// drop): on JetStream through Browse's transient durable, with the
// Broker's AckWait; elsewhere as Source.
func (b *Broker) ToolSource(ctx context.Context, queue string, prefetch int) (Adapter, error) {
	if queue == "" {
		return nil, errors.New("brokerurl: ToolSource needs a queue")
	}
	return b.open(ctx, queue, browseDurable, prefetch, b.AckWait, true)
}

// Browse returns up to limit messages of queue (0: all) without removing
// them. On ActiveMQ it is a queue browser (stomp.Browse). Other brokers
// have none: their messages are received, held unsettled (JetStream's
// AckWait is a minute meanwhile) and handed back when Browse returns, so
// they count as redelivered there; Browse stops when it has read as many
// messages as the queue held when it began (RabbitMQ and JetStream say how
// many: Depth), when no message came for Options.BrowseWait (where Depth
// is not known, or another consumer took some of them meanwhile) or when a
// message came round again. The broker hands it at most
// max(1000, limit) unsettled messages (its prefetch), and BrowseAll with
// limit 0 or above BrowseAll, so that is the most it reads there. On
// ActiveMQ a queue browser sees at most the queue's maxBrowsePageSize
// (400 by default). On an error it returns the messages read so far
// with it.
func (b *Broker) Browse(ctx context.Context, queue string, limit int) ([]inboxkit.Message, error) {
	if b.URL.Kind == STOMP {
		return stomp.Browse(ctx, stomp.Config{URL: b.URL.URL}, queue, limit)
	}
	prefetch := min(max(1000, limit), BrowseAll)
	if limit <= 0 {
		prefetch = BrowseAll
	}
	// The depth is a count at one moment, not a lock: messages published
	// later are not waited for, and where fewer come (another consumer
	// took some) the wait ends the browse as without it.
	wait := b.opts.BrowseWait
	if wait <= 0 {
		wait = defaultBrowseWait
	}
	depth := -1
	if n, atLeast, err := b.Depth(ctx, queue); err == nil && !atLeast {
		depth = n
	}
	src, err := b.open(ctx, queue, browseDurable, prefetch, time.Minute, true)
	if err != nil {
		return nil, err
	}
	defer src.Close() // hands every unsettled delivery back
	var out []inboxkit.Message
	seen := map[string]bool{}
	for (limit <= 0 || len(out) < limit) && (depth < 0 || len(out) < depth) {
		rctx, cancel := context.WithTimeout(ctx, wait)
		d, err := src.Receive(rctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break
			}
			return out, err
		}
		m := d.Message()
		if id := m.BrokerMessageID; id != "" {
			if seen[id] {
				break // came round again
			}
			seen[id] = true
		}
		out = append(out, m)
	}
	return out, nil
}

// StreamName is the JetStream stream that holds queue on a NATS or
// embedded broker (jetstream.StreamName), "" on another broker.
func (b *Broker) StreamName(queue string) string {
	if b.URL.Kind == NATS || b.URL.Kind == Embedded {
		return jetstream.StreamName(queue)
	}
	return ""
}

// AuthFailed reports whether err is a broker refusing a login, which is
// not a broker out of reach: RabbitMQ's ACCESS_REFUSED (403) over AMQP
// 0-9-1, a SASL outcome other than ok over AMQP 1.0 (go-amqp says so only
// in its text), NATS's authorization errors.
func AuthFailed(err error) bool {
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.AccessRefused {
		return true
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "SASL") && strings.Contains(msg, "auth failed")
}

// QueueExists tells whether queue exists, without creating it: a passive
// declare on RabbitMQ, a lookup of the stream jetstream.StreamName(queue)
// on JetStream. known is false on ActiveMQ, which cannot tell over STOMP,
// and on AMQP 1.0, which has no request for it.
func (b *Broker) QueueExists(ctx context.Context, queue string) (exists, known bool, err error) {
	switch b.URL.Kind {
	case AMQP:
		exists, err = rabbitmq.QueueExists(ctx, b.URL.URL, queue)
		return exists, true, err
	case NATS, Embedded:
		exists, err = jetstream.StreamExists(ctx, b.natsURL, jetstream.StreamName(queue))
		return exists, true, err
	}
	return false, false, nil
}

// Close closes every adapter opened here, then stops the embedded server
// and removes its temporary directory.
func (b *Broker) Close() error {
	b.mu.Lock()
	cs := b.closers
	b.closers, b.inspect = nil, nil
	b.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		_ = cs[i].Close()
	}
	if b.embedded != nil {
		b.embedded.Shutdown()
		b.embedded = nil
	}
	if b.tmpDir != "" {
		_ = os.RemoveAll(b.tmpDir)
		b.tmpDir = ""
	}
	return nil
}
