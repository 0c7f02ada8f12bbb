package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// openLastingBroker is openBroker for a command whose messages must outlive
// it (publish, dlq): a bare "embedded" would start a server in a temporary
// directory that is gone when the command ends, so it is refused.
func openLastingBroker(raw, command string) (*broker, error) {
	if t, err := target.ParseBroker(orEnv(raw, envBroker)); err == nil && t.Kind == target.Embedded && t.Dir == "" {
		return nil, usageErr("%s --broker embedded: the in-process server would be gone when the command ends, and its messages with it;\n\tuse embedded:DIR (a JetStream store directory kept between commands, as 'inboxctl run --broker embedded:DIR' uses) or a real broker (stomp://, amqp://, nats://)", command)
	}
	return openBroker(raw, nil)
}

// requireQueue fails (exit 1) when queue does not exist, without creating
// it: a passive declare on RabbitMQ, a stream lookup on JetStream. ActiveMQ
// cannot tell over STOMP (see noteSTOMPQueue); AMQP 1.0 is not checked.
func (b *broker) requireQueue(ctx context.Context, queue string) error {
	var exists bool
	var err error
	switch b.t.Kind {
	case target.AMQP:
		exists, err = rabbitmq.QueueExists(ctx, b.t.URL, queue)
	case target.NATS, target.Embedded:
		exists, err = jetstream.StreamExists(ctx, b.natsURL, streamName(queue))
	default:
		// STOMP: see noteSTOMPQueue. AMQP 1.0: not checked here (on
		// RabbitMQ's plugin a receiver attaches only an existing queue;
		// other brokers decide by their own auto-create settings).
		return nil
	}
	if err != nil {
		return b.fail("look up "+queue, err)
	}
	if !exists {
		return &exitError{code: exitFindings, err: fmt.Errorf("queue %s does not exist on %s (nothing was created): check the name, e.g. DLQ.<queue> for the dead letters of <queue>", queue, b.t.Display)}
	}
	return nil
}

// noteSTOMPQueue says, when a look at queue on ActiveMQ found nothing, that
// the queue may not have existed and now does. ActiveMQ creates a queue on
// any SUBSCRIBE, browsers included, and over STOMP offers no way to ask
// whether it exists: its advisory topic (ActiveMQ.Advisory.Queue) reaches a
// STOMP client only through an XStream transformation that a Debian or
// distribution install may lack, and JMX, Jolokia and the statistics plugin
// are off in a stock broker.
func (b *broker) noteSTOMPQueue(w io.Writer, queue string) {
	if b.t.Kind == target.STOMP {
		fmt.Fprintf(w, "note: %s has no messages. ActiveMQ cannot tell over STOMP whether a queue exists without creating it: if %s is mistyped, an empty queue of that name now exists on the broker (delete it in the web console)\n", queue, queue)
	}
}

// broker opens sources and publishers on one broker URL.
type broker struct {
	t      target.Broker
	logger *slog.Logger

	embedded *jetstream.Embedded // for target.Embedded
	natsURL  string
	tmpDir   string
	// ackWait overrides JetStream's AckWait (the demo's crash redelivery).
	ackWait time.Duration

	mu      sync.Mutex
	closers []io.Closer
}

// openBroker parses raw (or $INBOXKIT_BROKER) and, for "embedded", starts
// the in-process JetStream server.
func openBroker(raw string, logger *slog.Logger) (*broker, error) {
	t, err := target.ParseBroker(orEnv(raw, envBroker))
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &broker{t: t, logger: logger, natsURL: t.URL}
	if t.Kind == target.Embedded {
		dir := t.Dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "inboxctl-js-"); err != nil {
				return nil, err
			}
			b.tmpDir = dir
		}
		e, err := jetstream.StartEmbedded(dir)
		if err != nil {
			return nil, err
		}
		b.embedded, b.natsURL = e, e.URL()
	}
	return b, nil
}

func (b *broker) track(c io.Closer) {
	b.mu.Lock()
	b.closers = append(b.closers, c)
	b.mu.Unlock()
}

// Close closes every source and publisher opened here, then the embedded server.
func (b *broker) Close() error {
	b.mu.Lock()
	cs := b.closers
	b.closers = nil
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
	}
	return nil
}

func (b *broker) fail(what string, err error) error {
	return unreachable("broker", b.t.Display, what, err)
}

func (b *broker) stompConfig(queue string, prefetch int) stomp.Config {
	return stomp.Config{Addr: b.t.Addr, Login: b.t.Login, Passcode: b.t.Passcode, Queue: queue, Prefetch: prefetch, Logger: b.logger}
}

// streamName is the JetStream stream holding subject: INBOXKIT_ and the
// subject in upper case, other characters than letters and digits as '_'.
func streamName(subject string) string {
	return "INBOXKIT_" + strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return unicode.ToUpper(r)
		}
		return '_'
	}, subject)
}

func durableName(name string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(".*> \t", r) {
			return '_'
		}
		return r
	}, name)
}

// Source opens a source on queue for the consumer called name.
func (b *broker) Source(ctx context.Context, queue, name string, prefetch int) (consumer.Source, error) {
	switch b.t.Kind {
	case target.STOMP:
		s, err := stomp.NewSource(ctx, b.stompConfig(queue, prefetch))
		if err != nil {
			return nil, b.fail("consume "+queue, err)
		}
		return s, nil
	case target.AMQP:
		a, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: b.t.URL, Queue: queue, Prefetch: prefetch, Logger: b.logger})
		if err != nil {
			return nil, b.fail("consume "+queue, err)
		}
		return a, nil
	case target.AMQP10:
		a, err := amqp10.Open(ctx, amqp10.Config{URL: b.t.URL, Queue: queue, Prefetch: prefetch, Logger: b.logger})
		if err != nil {
			return nil, b.fail("consume "+queue, err)
		}
		return a, nil
	default:
		a, err := jetstream.Open(ctx, jetstream.Config{
			URL: b.natsURL, Stream: streamName(queue), Subject: queue, Durable: durableName(name),
			MaxAckPending: max(prefetch, 1), PollWait: time.Second, Logger: b.logger, AckWait: b.ackWait,
		})
		if err != nil {
			return nil, b.fail("consume "+queue, err)
		}
		return a, nil
	}
}

// Publisher returns a publisher that the broker confirms; on JetStream it
// makes a stream capture each destination before the first publish.
func (b *broker) Publisher(ctx context.Context) (dlq.Publisher, error) {
	switch b.t.Kind {
	case target.STOMP:
		p, err := stomp.NewPublisher(ctx, b.stompConfig("", 0))
		if err != nil {
			return nil, b.fail("connect", err)
		}
		b.track(p)
		return p, nil
	case target.AMQP:
		a, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: b.t.URL, Logger: b.logger})
		if err != nil {
			return nil, b.fail("connect", err)
		}
		b.track(a)
		return a, nil
	case target.AMQP10:
		a, err := amqp10.Open(ctx, amqp10.Config{URL: b.t.URL, Logger: b.logger})
		if err != nil {
			return nil, b.fail("connect", err)
		}
		b.track(a)
		return a, nil
	default:
		a, err := jetstream.Open(ctx, jetstream.Config{URL: b.natsURL, Logger: b.logger})
		if err != nil {
			return nil, b.fail("connect", err)
		}
		b.track(a)
		return &streamPublisher{a: a, ensured: map[string]bool{}}, nil
	}
}

type streamPublisher struct {
	a       *jetstream.Adapter
	mu      sync.Mutex
	ensured map[string]bool
}

func (p *streamPublisher) Publish(ctx context.Context, subject string, headers map[string]string, body []byte) error {
	p.mu.Lock()
	ok := p.ensured[subject]
	p.mu.Unlock()
	if !ok {
		if err := p.a.EnsureStream(ctx, streamName(subject), subject); err != nil {
			return err
		}
		p.mu.Lock()
		p.ensured[subject] = true
		p.mu.Unlock()
	}
	return p.a.Publish(ctx, subject, headers, body)
}

// Browse returns up to limit messages of queue without removing them. On
// ActiveMQ it is a queue browser; on other brokers the messages are
// received and handed back (so they count as redelivered there).
func (b *broker) Browse(ctx context.Context, queue string, limit int) ([]inboxkit.Message, error) {
	if b.t.Kind == target.STOMP {
		ms, err := stomp.Browse(ctx, b.stompConfig("", 0), queue, limit)
		if err != nil {
			return nil, b.fail("browse "+queue, err)
		}
		return ms, nil
	}
	saved := b.ackWait
	b.ackWait = time.Minute // held, unsettled, while browsing
	src, err := b.Source(ctx, queue, "inboxctl-dlq", 1000)
	b.ackWait = saved
	if err != nil {
		return nil, err
	}
	defer src.Close() // hands every unsettled delivery back
	var out []inboxkit.Message
	seen := map[string]bool{}
	for limit <= 0 || len(out) < limit {
		rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		d, err := src.Receive(rctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break
			}
			return out, b.fail("browse "+queue, err)
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
