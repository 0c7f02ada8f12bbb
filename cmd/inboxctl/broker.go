package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
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
// cannot tell over STOMP (see noteSTOMPQueue); AMQP 1.0 is not checked (on
// RabbitMQ's plugin a receiver attaches only an existing queue; other
// brokers decide by their own auto-create settings).
func (b *broker) requireQueue(ctx context.Context, queue string) error {
	exists, known, err := b.QueueExists(ctx, queue)
	if err != nil {
		return b.fail("look up "+queue, err)
	}
	if known && !exists {
		return &exitError{code: exitFindings, err: fmt.Errorf("queue %s does not exist on %s (nothing was created): check the name, e.g. DLQ.<queue> for the dead letters of <queue>", queue, b.t.Display)}
	}
	return nil
}

// streamCreated looks, on JetStream, whether the stream of queue
// (brokerurl.Broker.StreamName) exists, and returns a function that says,
// after a publish, the name of the stream if the publish created it (""
// if it existed, or on another broker).
func (b *broker) streamCreated(ctx context.Context, queue string) func() string {
	if b.StreamName(queue) == "" {
		return func() string { return "" }
	}
	before, _, err := b.QueueExists(ctx, queue)
	return func() string {
		if err != nil || before {
			return ""
		}
		if now, _, err := b.QueueExists(ctx, queue); err != nil || !now {
			return "" // another stream captures the subject
		}
		return b.StreamName(queue)
	}
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

// activeMQBrowsePage is ActiveMQ's default maxBrowsePageSize: a queue
// browser sees at most this many messages of a queue, and the browse ends
// there as if the queue held no more.
const activeMQBrowsePage = 400

// noteBrowseCut warns that a browse of queue that returned n messages may
// have been cut short by the broker rather than by limit: on ActiveMQ when
// n is its default browse page size, elsewhere when n is
// brokerurl.BrowseAll, the most unsettled messages a browse is handed.
func (b *broker) noteBrowseCut(w io.Writer, queue string, n, limit int) {
	if limit > 0 && n >= limit {
		return // the limit asked for
	}
	switch {
	case b.t.Kind == target.STOMP && n == activeMQBrowsePage:
		fmt.Fprintf(w, "note: %s showed exactly %d messages, ActiveMQ's default maxBrowsePageSize: a queue browser sees no more than that, so the queue may hold more. Raise maxBrowsePageSize on the queue's policyEntry in activemq.xml to see them all\n", queue, n)
	case b.t.Kind != target.STOMP && n == brokerurl.BrowseAll:
		fmt.Fprintf(w, "note: %s showed %d messages, the most a browse is handed at once: the queue may hold more: a browse sees the rest once messages ahead of them are consumed (on a dead-letter queue: dlq replay or dlq drop, then list again)\n", queue, n)
	}
}

// broker opens sources and publishers on one broker URL (brokerurl, the
// one place that chooses the adapter), with inboxctl's error wording.
type broker struct {
	*brokerurl.Broker
	t target.Broker
	// notes is where Browse says that the broker may have cut a browse
	// short (noteBrowseCut): standard error, or the command's.
	notes io.Writer

	mu  sync.Mutex
	src brokerurl.Adapter // the last source opened: /readyz's "broker"
}

// openBroker parses raw (or $INBOXKIT_BROKER) and, for "embedded", starts
// the in-process JetStream server.
func openBroker(raw string, logger *slog.Logger) (*broker, error) {
	t, err := target.ParseBroker(orEnv(raw, envBroker))
	if err != nil {
		return nil, err
	}
	bb, err := brokerurl.Open(orEnv(raw, envBroker), brokerurl.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	return &broker{Broker: bb, t: t, notes: os.Stderr}, nil
}

func (b *broker) fail(what string, err error) error {
	if brokerurl.AuthFailed(err) {
		paren := what
		if paren != "" {
			paren = " (" + what + ")"
		}
		return &exitError{code: exitUsage, err: fmt.Errorf("broker %s: authentication failed%s: %w\n\tthe broker answered and refused the login: check the user and password in the URL", b.t.Display, paren, err)}
	}
	if brokerurl.Refused(err) {
		// The broker runs and said no: exit 2 as for a wrong URL, but
		// not worded as an outage.
		return &exitError{code: exitUsage, err: fmt.Errorf("broker %s refused (%s): %v\n\tthe broker runs: change the queue, the broker's settings or the URL as said above", b.t.Display, what, err)}
	}
	return unreachable("broker", b.t.Display, what, err)
}

// Source opens a source on queue for the consumer called name.
func (b *broker) Source(ctx context.Context, queue, name string, prefetch int) (consumer.Source, error) {
	a, err := b.Broker.Source(ctx, queue, name, prefetch)
	if err != nil {
		return nil, b.fail("consume "+queue, err)
	}
	b.mu.Lock()
	b.src = a
	b.mu.Unlock()
	return a, nil
}

// Publisher returns a publisher that the broker confirms; on JetStream it
// creates a stream for a destination no stream captures.
func (b *broker) Publisher(ctx context.Context) (dlq.Publisher, error) {
	a, err := b.Broker.Publisher(ctx)
	if err != nil {
		return nil, b.fail("connect", err)
	}
	return a, nil
}

// ready is the /readyz check "broker": the connection state the consuming
// adapter reports (consumer.Readier), which repairs itself after an
// outage; not ready before the source is opened.
func (b *broker) ready(ctx context.Context) error {
	b.mu.Lock()
	src := b.src
	b.mu.Unlock()
	if src == nil {
		return fmt.Errorf("broker %s: not consuming yet", b.t.Display)
	}
	return src.Ready(ctx)
}

// toolSource opens the source of a command that looks at a queue now and
// then and hands back what it does not take (dlq replay, dlq drop), with
// the JetStream AckWait ackWait (0: the default): brokerurl.ToolSource,
// whose JetStream durable is transient.
func (b *broker) toolSource(ctx context.Context, queue string, prefetch int, ackWait time.Duration) (consumer.Source, error) {
	saved := b.AckWait
	b.AckWait = ackWait
	defer func() { b.AckWait = saved }()
	a, err := b.ToolSource(ctx, queue, prefetch)
	if err != nil {
		return nil, b.fail("consume "+queue, err)
	}
	return a, nil
}

// Browse returns up to limit messages of queue without removing them
// (brokerurl.Broker.Browse: a queue browser on ActiveMQ; elsewhere the
// messages are received and handed back, so they count as redelivered),
// and writes to b.notes when the broker may have cut the list short.
func (b *broker) Browse(ctx context.Context, queue string, limit int) ([]inboxkit.Message, error) {
	ms, err := b.Broker.Browse(ctx, queue, limit)
	if err != nil {
		return ms, b.fail("browse "+queue, err)
	}
	if b.notes != nil {
		b.noteBrowseCut(b.notes, queue, len(ms), limit)
	}
	return ms, nil
}
