package amqp10

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/reconnect"
)

// Addressing values of Config.Addressing: how a queue name becomes the
// address of a link.
const (
	// AddressingAuto chooses AddressingRabbitMQ when the broker announces
	// itself as RabbitMQ (the "product" property of its open frame) and
	// AddressingPlain otherwise.
	AddressingAuto = "auto"
	// AddressingPlain uses the queue name as the address, with the "queue"
	// capability on the link's terminus: IBM MQ AMQP channels (9.2.1 and
	// later; without the capability they attach a topic), ActiveMQ Artemis
	// (anycast), Azure Service Bus, Qpid.
	AddressingPlain = "plain"
	// AddressingRabbitMQ is the address form of RabbitMQ's AMQP 1.0 plugin
	// (3.x): receivers attach "/amq/queue/NAME" (an existing queue of any
	// type); Publish attaches "/queue/NAME", which declares a missing queue
	// durable (classic), and falls back to "/amq/queue/NAME" when the queue
	// exists with other arguments (a quorum queue). It never publishes to
	// "/amq/queue/" a queue that does not exist: the plugin accepts such a
	// message and drops it.
	AddressingRabbitMQ = "rabbitmq"
)

// Profiles of Config.Profile: what a family of brokers needs beyond the
// protocol.
const (
	// ProfileIBMMQ is for IBM MQ AMQP channels: AddressingPlain (the queue
	// name with the "queue" capability, without which MQ attaches a topic)
	// and one session per connection for the receiver and every sender
	// (an MQ AMQP channel supports a single session and disconnects a
	// client that begins a second). Untested against a live queue manager:
	// there was none where this adapter is tested.
	ProfileIBMMQ = "ibmmq"
)

// Config configures an Adapter. The zero value of every field selects its
// documented default.
type Config struct {
	// URL is the broker URL: amqp10://user:pass@host:5672, or amqp10s://
	// for TLS (amqp:// and amqps:// are accepted too). Credentials select
	// SASL PLAIN, no credentials SASL ANONYMOUS. Query parameters set the
	// fields of the same meaning when those are zero: addressing
	// (Addressing), requeue=modified (RequeueModified), hostname (HostName),
	// prefetch (Prefetch), allow-presettled (AllowPresettled), profile
	// (Profile), single-active-consumer=true|false (SingleActiveConsumer).
	// The password never appears in errors or logs.
	// Defaults to "amqp10://guest:guest@127.0.0.1:5672".
	URL string
	// Queue is the queue Receive consumes from, a plain name (Addressing
	// turns it into an address). It must exist: the adapter declares
	// nothing for receiving. Empty means a publisher-only Adapter: Receive
	// returns ErrNoQueue. Defaults to "".
	Queue string
	// Prefetch is the link credit of the receiver: the most unsettled
	// deliveries the broker sends at once; credit comes back as deliveries
	// are settled. A delivery held back by a delayed Requeue keeps its
	// credit until it is released. Defaults to 10.
	Prefetch int
	// Addressing is AddressingAuto, AddressingPlain or AddressingRabbitMQ.
	// Defaults to AddressingAuto (AddressingPlain under ProfileIBMMQ).
	Addressing string
	// Profile is "" or ProfileIBMMQ, which sets what IBM MQ AMQP channels
	// need (see ProfileIBMMQ). Defaults to "": one session per link.
	Profile string
	// RequeueModified makes Requeue settle with the modified outcome
	// (delivery-failed=true), so brokers that keep the header's delivery
	// count increase it, instead of released, which leaves it alone.
	// RabbitMQ 3.10's plugin refuses modified ("Unrecognised state") and
	// ends the session, so leave it off there. Defaults to false (released).
	RequeueModified bool
	// AllowPresettled accepts a broker that answers the receiver's request
	// for unsettled deliveries with another sender settle mode (settled,
	// or mixed as Qpid Proton's example broker): it settles deliveries
	// itself, at most once, so a delivery in hand when the consumer dies,
	// and one handed back (Requeue), is lost. Open logs a warning naming
	// the broker's mode. Without it Open fails with ErrPresettled. The
	// URL's query parameter allow-presettled (no value, or true) sets it.
	// Defaults to false.
	AllowPresettled bool
	// SingleActiveConsumer says that Queue delivers to one consumer at a
	// time (a RabbitMQ queue declared with x-single-active-consumer, by
	// others: the adapter declares no queue to receive from). Close then
	// does not detach the receiver before the connection closes: a detach
	// cancels the consumer, and the standby would take the queue before
	// the deliveries not settled return, getting later messages first.
	// The price: on RabbitMQ 3.10 a quorum queue may forget settlements
	// sent just before Close, and those messages come again (see
	// Adapter.Close). Defaults to the URL's single-active-consumer, else
	// false.
	SingleActiveConsumer bool
	// TrustDeliveryCount fills Message.DeliveryCount from the header's
	// delivery-count (+1). Leave it off unless the broker keeps that count
	// and cannot overcount: the count also grows for deliveries that sat in
	// the link credit of a connection that broke (they never reached the
	// handler), and with RequeueModified for every delivery handed back
	// because the database was down, and the inbox would count those as
	// attempts. It cannot be combined with RequeueModified. RabbitMQ 3.10's
	// plugin always sends 0. Defaults to false (DeliveryCount 0, unknown).
	TrustDeliveryCount bool
	// HostName is the hostname of the open frame: RabbitMQ picks the vhost
	// from "vhost:NAME", Azure Service Bus needs the namespace's host.
	// Defaults to the URL's host.
	HostName string
	// TLSConfig is used for amqp10s:// URLs. Defaults to a config with
	// ServerName set to the URL's host.
	TLSConfig *tls.Config
	// ContainerID is the container id of the connection. Under
	// ProfileIBMMQ it may hold only letters, digits, '%', '/', '.' and '_'
	// (at most 256), as MQ wants of a client id. Defaults to "inboxkit_"
	// and random hex digits.
	ContainerID string
	// Reconnect spaces the reconnect attempts after a broken connection,
	// session or link. A zero field takes its default: 500ms doubling up to
	// 30s, ±50% jitter (Jitter -1 for none).
	Reconnect inboxkit.Backoff
	// DialTimeout bounds one TCP connect plus the AMQP open handshake.
	// Defaults to 10s.
	DialTimeout time.Duration
	// IdleTimeout is the idle time-out announced to the broker; the broker
	// sends empty frames at least that often, and a silent connection is
	// taken for dead after it. Defaults to 30s.
	IdleTimeout time.Duration
	// Logger receives reconnect messages. Defaults to slog.Default().
	Logger *slog.Logger
}

// mqClientID is what IBM MQ accepts as an AMQP client id (container-id).
var mqClientID = regexp.MustCompile(`^[A-Za-z0-9%/._]{1,256}$`)

// endpoint is what validate makes of Config.URL.
type endpoint struct {
	addr     string // host:port
	tls      bool
	user     string
	password string
	hasUser  bool
	display  string // the URL, password replaced
}

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = "amqp10://guest:guest@127.0.0.1:5672"
	}
	reconnect.SetDefaults(&c.Reconnect, 0.5, &c.DialTimeout)
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// CheckURL returns the error Open would return for raw as Config.URL (its
// host, query parameters and profile), without connecting.
func CheckURL(raw string) error {
	c := Config{URL: raw}
	c.setDefaults()
	_, err := c.validate()
	return err
}

// validate checks the fields, reads the URL's query parameters into the
// zero fields and sets the defaults that depend on them.
func (c *Config) validate() (endpoint, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		// The error quotes the URL: only its cause is shown.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return endpoint{}, fmt.Errorf("amqp10: Config.URL is invalid: %s", err)
	}
	ep := endpoint{display: u.Redacted()}
	switch strings.ToLower(u.Scheme) {
	case "amqp10", "amqp":
	case "amqp10s", "amqps":
		ep.tls = true
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: scheme %q is not supported: use amqp10://user:pass@host:5672 or amqp10s:// (TLS)", ep.display, u.Scheme)
	}
	if u.Hostname() == "" {
		return endpoint{}, fmt.Errorf("amqp10: Config.URL %s has no host: e.g. amqp10://guest:guest@127.0.0.1:5672", ep.display)
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if ep.tls {
			port = "5671"
		}
	}
	ep.addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		ep.hasUser = true
		ep.user = u.User.Username()
		ep.password, _ = u.User.Password()
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "addressing", "requeue", "hostname", "prefetch", "allow-presettled", "profile", "single-active-consumer":
		default:
			return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: unknown query parameter %q (known: addressing, requeue, hostname, prefetch, allow-presettled, profile, single-active-consumer)", ep.display, k)
		}
	}
	if c.Profile == "" {
		c.Profile = q.Get("profile")
	}
	switch c.Profile {
	case "":
	case ProfileIBMMQ:
		if c.Addressing == "" && q.Get("addressing") == "" {
			c.Addressing = AddressingPlain
		}
		if c.ContainerID != "" && !mqClientID.MatchString(c.ContainerID) {
			return endpoint{}, fmt.Errorf("amqp10: Config.ContainerID %q: IBM MQ takes at most 256 letters, digits, '%%', '/', '.' and '_' as a client id", c.ContainerID)
		}
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.Profile %q is unknown: use %q or none", c.Profile, ProfileIBMMQ)
	}
	switch v := q.Get("allow-presettled"); {
	case !q.Has("allow-presettled"):
	case v == "" || v == "true":
		c.AllowPresettled = true
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: allow-presettled=%q: give it without a value (or =true) to accept a broker that settles deliveries itself", ep.display, v)
	}
	switch v := q.Get("single-active-consumer"); v {
	case "", "false":
	case "true":
		c.SingleActiveConsumer = true
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: single-active-consumer=%q: use true or false", ep.display, v)
	}
	if c.Addressing == "" {
		c.Addressing = q.Get("addressing")
	}
	if c.Addressing == "" {
		c.Addressing = AddressingAuto
	}
	switch c.Addressing {
	case AddressingAuto, AddressingPlain, AddressingRabbitMQ:
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.Addressing %q is unknown: use %q, %q or %q", c.Addressing, AddressingAuto, AddressingPlain, AddressingRabbitMQ)
	}
	if c.Profile == ProfileIBMMQ && c.Addressing != AddressingPlain {
		return endpoint{}, fmt.Errorf("amqp10: Config.Addressing %q with profile %s: IBM MQ channels take plain addresses (addressing=%s)", c.Addressing, ProfileIBMMQ, AddressingPlain)
	}
	switch v := q.Get("requeue"); v {
	case "", "release", "released":
	case "modified":
		c.RequeueModified = true
	default:
		return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: requeue=%q is unknown: use requeue=release or requeue=modified", ep.display, v)
	}
	if c.HostName == "" {
		c.HostName = q.Get("hostname")
	}
	if v := q.Get("prefetch"); v != "" && c.Prefetch == 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return endpoint{}, fmt.Errorf("amqp10: Config.URL %s: prefetch=%q must be a positive number", ep.display, v)
		}
		c.Prefetch = n
	}
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	switch {
	case c.Prefetch < 0:
		return endpoint{}, errors.New("amqp10: Config.Prefetch must not be negative")
	case c.Prefetch > 1<<20:
		return endpoint{}, errors.New("amqp10: Config.Prefetch must be at most 1048576")
	case c.TrustDeliveryCount && c.RequeueModified:
		return endpoint{}, errors.New("amqp10: Config.TrustDeliveryCount cannot be combined with Config.RequeueModified: every Requeue (also one for a database outage) would raise the broker's count and burn an attempt")
	case c.IdleTimeout < 0:
		return endpoint{}, errors.New("amqp10: Config.IdleTimeout must not be negative")
	}
	if err := reconnect.Validate("amqp10", c.Reconnect, c.DialTimeout); err != nil {
		return endpoint{}, err
	}
	return ep, nil
}
