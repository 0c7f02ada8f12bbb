package jetstream

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// Config configures an Adapter. The zero value of every field selects its
// documented default.
type Config struct {
	// URL is the NATS server URL, or a comma-separated list of them, one
	// per node of a cluster ("nats://h1:4222,nats://h2:4222,nats://h3:4222"):
	// nats.go connects to one and moves to another when it is lost (and
	// learns the rest of the cluster from the server). The password of a
	// user:password URL never appears in errors or logs.
	// Defaults to "nats://127.0.0.1:4222".
	URL string
	// Replicas is the number of copies of every stream the Adapter creates
	// (Open's stream, the dead-letter and reject streams Publish creates,
	// EnsureStream), each on another node of a JetStream cluster; the
	// durable consumer has as many as its stream. A stream of 3 replicas
	// keeps working, nothing it confirmed lost, while one node is down (5:
	// two). A single server holds only 1: more is refused there, naming
	// the fix. An existing stream keeps its replicas; Open and
	// EnsureStream log a warning when it has fewer than Replicas. 0 means 1.
	Replicas int
	// Stream is the JetStream stream holding Subject. When it does not exist
	// it is created with file storage and work-queue retention (see
	// KeepAcked); when it exists and does not capture Subject, Subject is
	// added to its subjects. Defaults to StreamName(Subject).
	Stream string
	// Subject is the subject Receive consumes (the durable consumer's filter
	// subject). Empty means a publisher-only Adapter: Receive returns
	// ErrNoSubject. Defaults to "".
	Subject string
	// Durable is the name of the durable pull consumer. It is created or
	// updated with explicit ack, AckWait, MaxAckPending and MaxDeliver -1
	// (unlimited: dead-lettering is the inboxkit runtime's decision).
	// Defaults to "inboxkit".
	Durable string
	// KeepAcked creates a missing Stream with limits retention, so that
	// acknowledged messages stay for replay until the stream's limits remove
	// them. By default a missing Stream is created with work-queue
	// retention: the stream is a queue and forgets a message once it is
	// acknowledged. It has no effect on an existing stream. Defaults to false.
	KeepAcked bool
	// Transient makes Close delete the durable consumer, after it handed
	// back the deliveries not settled, when Stream is a work-queue stream
	// (on another stream the durable is the record of what was
	// acknowledged, and is kept). For tools that read a queue now and then
	// (inboxctl's dlq commands): the work-queue stream keeps every message
	// not acknowledged, and the next tool's durable starts from them. A
	// kept durable would hold the messages handed back to it as pending
	// after a server restart (an embedded server lives as long as one
	// command) until AckWait passed. Defaults to false.
	Transient bool
	// AckWait is how long the server waits for an Ack or Requeue before it
	// redelivers a delivery, also after a consumer crash. Defaults to 30s.
	AckWait time.Duration
	// Prefetch is the durable consumer's MaxAckPending: the most deliveries
	// it has unacknowledged at once (across every process sharing Durable).
	// -1 means unlimited. Defaults to 1000.
	Prefetch int
	// NoStreamCreation makes Publish fail (jetstream.ErrNoStreamResponse)
	// for a subject that no stream captures. By default Publish then
	// creates the stream StreamName(subject) with file storage and limits
	// retention (dead letters stay until they are replayed or purged), or
	// adds the subject to that stream, and publishes again. Defaults to
	// false.
	NoStreamCreation bool
	// PollWait is how long one pull request waits on the server for a message
	// before Receive issues the next one. It bounds how long Receive takes to
	// notice a reconnect. Defaults to 5s.
	PollWait time.Duration
	// Reconnect spaces nats.go's reconnect attempts after a broken
	// connection (it reconnects forever); its Initial is also the pause
	// after a failed pull request. A zero field takes its default: 500ms
	// doubling up to 5s (a NATS server restarts in seconds), no jitter
	// (Jitter -1; set it in [0, 1] for some).
	Reconnect inboxkit.Backoff
	// DialTimeout bounds one connect. Defaults to 5s.
	DialTimeout time.Duration
	// PingInterval is how often the client pings the server; after three
	// pings without an answer (a partition: the connection stays open and
	// nothing arrives) it gives the connection up and reconnects.
	// Defaults to 10s (nats.go's own default is 2 minutes).
	PingInterval time.Duration
	// ConnectionName is the connection name shown by the server's
	// monitoring. Defaults to "inboxkit".
	ConnectionName string
	// Logger receives disconnect and reconnect messages.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = "nats://127.0.0.1:4222"
	}
	if c.Durable == "" {
		c.Durable = "inboxkit"
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Stream == "" && c.Subject != "" {
		c.Stream = StreamName(c.Subject)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Prefetch == 0 {
		c.Prefetch = 1000
	}
	if c.PollWait == 0 {
		c.PollWait = 5 * time.Second
	}
	c.Reconnect = c.Reconnect.Or(defaultReconnect)
	if c.PingInterval <= 0 {
		c.PingInterval = 10 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "inboxkit"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	for _, u := range serverURLs(c.URL) {
		if _, err := url.Parse(u); err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // the full error quotes the URL
			}
			return fmt.Errorf("jetstream: Config.URL is invalid: %s", err)
		}
	}
	if strings.ContainsAny(c.Stream, ".*> \t") {
		return fmt.Errorf("jetstream: Config.Stream %q must not contain '.', '*', '>' or spaces", c.Stream)
	}
	if strings.ContainsAny(c.Durable, ".*> \t") {
		return fmt.Errorf("jetstream: Config.Durable %q must not contain '.', '*', '>' or spaces", c.Durable)
	}
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return fmt.Errorf("jetstream: Config.Replicas %d: JetStream keeps 1 to %d replicas of a stream (3 on a cluster of three)", c.Replicas, maxReplicas)
	}
	if c.AckWait < 0 {
		return errors.New("jetstream: Config.AckWait must not be negative")
	}
	if c.Prefetch < -1 {
		return errors.New("jetstream: Config.Prefetch must be -1 (unlimited) or positive")
	}
	if c.PollWait < 0 || (c.PollWait > 0 && c.PollWait < 100*time.Millisecond) {
		return errors.New("jetstream: Config.PollWait must be at least 100ms")
	}
	if err := c.Reconnect.Validate("jetstream: Config.Reconnect"); err != nil {
		return err
	}
	if c.DialTimeout < 0 {
		return errors.New("jetstream: Config.DialTimeout must not be negative")
	}
	return nil
}

// StreamName is the stream the Adapter creates for subject when
// Config.Stream is empty, and for a Publish to a subject no stream
// captures: "INBOXKIT_" and the subject in upper case, every character but
// ASCII letters and digits replaced by '_' ("invoice.events" becomes
// INBOXKIT_INVOICE_EVENTS).
func StreamName(subject string) string {
	return "INBOXKIT_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, subject)
}

// maxReplicas is the most replicas a JetStream stream may have.
const maxReplicas = 5

// defaultReconnect is Config.Reconnect's default.
var defaultReconnect = inboxkit.Backoff{Initial: 500 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: -1}

// backoff returns nats.go's reconnect delay before attempt attempts.
func (c *Config) backoff(attempts int) time.Duration {
	return c.Reconnect.Delay(attempts)
}

// serverURLs splits a URL list as nats.go does, "nats://" put before an
// entry without a scheme (nats.go connects to a bare host:port so).
func serverURLs(urls string) []string {
	var out []string
	for _, p := range strings.Split(urls, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		out = append(out, p)
	}
	return out
}

// redact returns the URL list with passwords replaced by "xxxxx".
func redact(urls string) string {
	parts := serverURLs(urls)
	for i, p := range parts {
		u, err := url.Parse(p)
		if err != nil {
			parts[i] = "<unparsable URL>"
			continue
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// hidePassword removes the passwords of urls from msg: nats.go errors may
// quote the server URL.
func hidePassword(urls, msg string) string {
	for _, p := range serverURLs(urls) {
		if u, err := url.Parse(p); err == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}
