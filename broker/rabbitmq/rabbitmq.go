package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/internal/reconnect"
)

var (
	// ErrNoQueue is returned by Receive on an Adapter opened without
	// Config.Queue (a publisher-only Adapter).
	ErrNoQueue = errors.New("rabbitmq: no Config.Queue: publisher-only adapter")
	// ErrUnroutable is returned by Publish when the broker returned the
	// mandatory message because no queue is bound to its destination.
	ErrUnroutable = errors.New("rabbitmq: message returned unroutable")
	// ErrNacked is returned by Publish when the broker did not confirm the
	// message: it nacked it, or the channel closed before the confirm.
	ErrNacked = errors.New("rabbitmq: publish not confirmed")
	// ErrNoSuchQueue is returned by Depth for a queue that does not exist.
	ErrNoSuchQueue = errors.New("rabbitmq: no such queue")
	// ErrPreconditionFailed is wrapped by the errors of a declaration or
	// consume the broker refused with 406 PRECONDITION_FAILED: a queue
	// created at the same moment with other arguments, or a request the
	// queue's type or a policy does not allow. The broker works; its
	// configuration and this Adapter's disagree.
	ErrPreconditionFailed = errors.New("rabbitmq: precondition failed")
)

var (
	_ consumer.Source = (*Adapter)(nil)
	_ dlq.Publisher   = (*Adapter)(nil)
)

// Adapter is a RabbitMQ consumer.Source for one queue and a dlq.Publisher.
// It holds one AMQP connection with a consuming channel and a publishing
// channel in confirm mode, and replaces all of them after the connection or
// either channel breaks. All methods are safe for concurrent use.
type Adapter struct {
	cfg Config
	url string // redacted, for logs and errors
	sv  *reconnect.Supervisor[*session]

	nodeMu sync.Mutex
	node   int // index in cfg.nodes of the last session's node; -1 before the first
}

// session is one connection with its channels. It is never reused after it
// died; the supervisor opens a new one.
type session struct {
	reconnect.Life // dead after the connection or a channel closed

	conn    *amqp.Connection
	netConn net.Conn // the raw socket, so tests can break it

	consCh *amqp.Channel // nil without Config.Queue
	// cancelFirst: Close cancels the consumer before it closes the
	// connection (not on a single-active-consumer queue).
	cancelFirst bool
	deliveries  <-chan amqp.Delivery // nil without Config.Queue
	acks        *acks                // settles the deliveries of the consuming channel

	pubMu    sync.Mutex    // one publish frame sequence at a time; confirms are awaited outside it
	inFlight chan struct{} // bounds the publishes awaiting a confirm (see maxInFlight)
	pubCh    *amqp.Channel
	returns  chan amqp.Return
	retMu    sync.Mutex
	returned map[string]heldReturn // returns taken from the buffer, by message id

	declMu   sync.Mutex
	declared map[string]bool
}

// Open connects to the broker, declares Config.Queue (when set), starts
// consuming from it and returns the Adapter. It fails when the first
// connection or the declaration fails; later connection losses are repaired
// in the background. ctx bounds only this first connect.
func Open(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{cfg: cfg, url: redact(cfg.URL), node: -1}
	a.sv = reconnect.New(reconnect.Config[*session]{
		Name: "rabbitmq", URL: a.url, Queue: cfg.Queue, Logger: cfg.Logger,
		Backoff: cfg.Reconnect, Closed: consumer.ErrClosed,
		Connect: func(context.Context) (*session, error) { return a.connect() },
	})
	type result struct {
		s   *session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := a.connect()
		for try := 1; try <= 5 && isInternalError(err); try++ {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
			s, err = a.connect()
		}
		ch <- result{s, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() { // do not leak a connection that completes late
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, fmt.Errorf("rabbitmq: connect to %s: %w", a.url, ctx.Err())
	}
	if r.err != nil {
		return nil, r.err
	}
	a.sv.Start(r.s)
	return a, nil
}

// Receive returns the next delivery from Config.Queue. It blocks until a
// delivery arrives, ctx is done (ctx.Err()) or the Adapter is closed
// (consumer.ErrClosed); while the connection is being repaired it waits.
func (a *Adapter) Receive(ctx context.Context) (consumer.Delivery, error) {
	if a.cfg.Queue == "" {
		return nil, ErrNoQueue
	}
	for {
		s, err := a.sv.Current(ctx)
		if err != nil {
			return nil, err
		}
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				// The consumer ended with its channel; the session is dying.
				select {
				case <-s.Dead():
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-a.sv.Closed():
					return nil, consumer.ErrClosed
				}
			}
			return newDelivery(a.cfg.Queue, a.cfg.QueueType == QueueQuorum, d, s.acks), nil
		case <-s.Dead():
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.sv.Closed():
			return nil, consumer.ErrClosed
		}
	}
}

// Publish sends body with headers to the queue named destination through
// the default exchange, persistent and mandatory, and returns nil only after
// the broker confirmed it. The destination queue is declared durable first
// (idempotently; an existing queue is used as it is). Header
// "correlation-id" becomes the AMQP correlation_id property, the others
// become table headers; message_id is a fresh random id. A nack, a closed
// channel before the confirm (ErrNacked) or a returned message
// (ErrUnroutable) is an error. While the connection is being repaired
// Publish waits, bounded by ctx.
//
// A message the broker nacks was not stored, so it is published again, up
// to publishTries times in all, 200ms after the first nack, doubling up to
// 2s (about 9s in all), each time on a channel of its own: a quorum queue
// nacks while it has no leader, when it was created a moment ago or its
// leader's node died, until it elected one, and RabbitMQ 3.10 goes on
// nacking on a channel that published to the dead leader (a new channel
// finds the new one). A message whose connection was lost before its confirm is
// published again on the next connection, to the next node of a cluster
// (Config.URL), within the same tries: it may have been stored all the
// same, so it can arrive twice (at least once; a consumer deduplicates by
// its event id).
func (a *Adapter) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	var err error
	pause := 200 * time.Millisecond
	nacked := false
	for try := 1; try <= publishTries; try++ {
		if nacked {
			err = a.publishFresh(ctx, destination, headers, body)
		} else {
			err = a.publish(ctx, destination, headers, body, true)
		}
		nacked = false
		if err == nil || ctx.Err() != nil {
			return err
		}
		switch {
		case errors.Is(err, errBrokerNack):
			nacked = true
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return err
			}
			pause = min(2*pause, 2*time.Second)
		case errors.Is(err, errConnLost):
			// the next a.sv.Current waits for the next connection
		default:
			return err
		}
	}
	return err
}

// publishTries bounds the publishes of one message by Publish.
const publishTries = 8

var (
	// errBrokerNack is an explicit basic.nack: the broker did not store the message.
	errBrokerNack = fmt.Errorf("%w by the broker", ErrNacked)
	// errConnLost: the connection or channel died before the confirm; the
	// message may or may not be stored.
	errConnLost = fmt.Errorf("%w: connection lost before the confirm", ErrNacked)
)

// lostOr returns errConnLost, with err, when s died or err says its
// channel or connection is closed or its socket failed (a write to a node
// that died, before the client noticed: s is given up at once, so the next
// publish waits for the next connection); otherwise err.
func (a *Adapter) lostOr(s *session, err error) error {
	select {
	case <-s.Dead():
		return fmt.Errorf("%w (%w)", errConnLost, err)
	default:
	}
	var nerr *net.OpError
	if errors.Is(err, amqp.ErrClosed) || errors.As(err, &nerr) {
		a.sv.Lost(s, err)
		return fmt.Errorf("%w (%w)", errConnLost, err)
	}
	return err
}

// isInternalError reports RabbitMQ's 541 INTERNAL_ERROR, which 3.10 answers
// while a quorum queue declared at the same moment by another connection
// is not ready yet.
func isInternalError(err error) bool {
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == amqp.InternalError
}

func (a *Adapter) publish(ctx context.Context, destination string, headers map[string]string, body []byte, declare bool) error {
	if destination == "" {
		return errors.New("rabbitmq: publish: empty destination")
	}
	s, err := a.sv.Current(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, err)
	}
	if declare {
		if err := s.declare(destination, a.cfg.QueueType, a.cfg.SingleActiveConsumer); err != nil {
			return fmt.Errorf("rabbitmq: publish to %s: declare the queue: %w", destination, a.lostOr(s, err))
		}
	}
	msg := publishing(headers, body)
	select {
	case s.inFlight <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, ctx.Err())
	}
	defer func() { <-s.inFlight }()
	s.collectReturns()
	s.pubMu.Lock()
	dc, err := s.pubCh.PublishWithDeferredConfirmWithContext(ctx, "", destination, true, false, msg)
	s.pubMu.Unlock()
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, a.lostOr(s, err))
	}
	if err := awaitConfirm(ctx, s, destination, dc); err != nil {
		return err
	}
	// The broker sends basic.return before the basic.ack of the same
	// message, and the client hands it to s.returns before it completes the
	// confirm, so a return of this message is buffered or collected already.
	if r, ok := s.takeReturn(msg.MessageId); ok {
		return fmt.Errorf("rabbitmq: publish to %s: %w: %d %s", destination, ErrUnroutable, r.ReplyCode, r.ReplyText)
	}
	return nil
}

// awaitConfirm waits for the broker's confirm of dc: nil for an ack,
// errBrokerNack for a nack, errConnLost when s died first.
func awaitConfirm(ctx context.Context, s *session, destination string, dc *amqp.DeferredConfirmation) error {
	select {
	case <-dc.Done():
	case <-s.Dead():
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, errConnLost)
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: publish to %s: waiting for confirm: %w", destination, ctx.Err())
	}
	if !dc.Acked() {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, errBrokerNack)
	}
	return nil
}

// publishing is the message Publish sends: persistent, a fresh message_id,
// header "correlation-id" as the correlation_id property.
func publishing(headers map[string]string, body []byte) amqp.Publishing {
	msg := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		MessageId:    newID(),
		Timestamp:    time.Now().UTC(),
		Body:         body,
	}
	if len(headers) > 0 {
		msg.Headers = make(amqp.Table, len(headers))
		for k, v := range headers {
			if k == HeaderCorrelationID {
				msg.CorrelationId = v
				continue
			}
			msg.Headers[k] = v
		}
	}
	return msg
}

// publishFresh publishes one message on a confirm channel of its own,
// closed afterwards (see Publish: after a nack); the destination was
// declared on this session or the one before.
func (a *Adapter) publishFresh(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	s, err := a.sv.Current(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, err)
	}
	if err := s.declare(destination, a.cfg.QueueType, a.cfg.SingleActiveConsumer); err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: declare the queue: %w", destination, a.lostOr(s, err))
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: open a channel: %w", destination, a.lostOr(s, err))
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: enable publisher confirms: %w", destination, a.lostOr(s, err))
	}
	// the client hands a basic.return to this buffer before it completes
	// the confirm that follows it
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	msg := publishing(headers, body)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", destination, true, false, msg)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination, a.lostOr(s, err))
	}
	if err := awaitConfirm(ctx, s, destination, dc); err != nil {
		return err
	}
	select {
	case r := <-returns:
		return fmt.Errorf("rabbitmq: publish to %s: %w: %d %s", destination, ErrUnroutable, r.ReplyCode, r.ReplyText)
	default:
		return nil
	}
}

// Close stops intake and closes the connection; the broker requeues every
// delivery not yet acknowledged, and their Ack returns an error. Receive and
// Publish return consumer.ErrClosed afterwards. Close waits for the
// background reconnect loop to end and is safe to call more than once.
//
// Before the connection closes, Close cancels the consumer and waits up
// to 5s for the broker to confirm it, so that a quorum queue applies every
// acknowledgement sent before (RabbitMQ may otherwise forget the last
// ones, and their messages come again). With SingleActiveConsumer it does
// not: the cancellation would hand the queue to the standby before the
// unacknowledged deliveries return. There, acknowledgements sent in the
// moment before Close may be forgotten on a quorum queue, and the inbox
// takes those messages as duplicates.
func (a *Adapter) Close() error {
	a.sv.Close()
	return nil
}

// Ready returns nil while the Adapter is connected, and otherwise an error
// saying since when it is reconnecting and why (a readiness check: see
// consumer.Readier). It does not block.
func (a *Adapter) Ready(context.Context) error { return a.sv.Ready() }

// Prefetch returns Config.Prefetch (consumer.Prefetcher).
func (a *Adapter) Prefetch() int { return a.cfg.Prefetch }

// Depth returns the number of messages ready in queue, from a passive
// declare (which never creates the queue): messages delivered and not yet
// acknowledged are not counted. A missing queue is ErrNoSuchQueue.
func (a *Adapter) Depth(ctx context.Context, queue string) (int, error) {
	s, err := a.sv.Current(ctx)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: depth of %s: %w", queue, err)
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: depth of %s: open channel: %w", queue, err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return 0, fmt.Errorf("rabbitmq: depth of %s on %s: %w", queue, a.url, ErrNoSuchQueue)
	}
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: depth of %s: %w", queue, err)
	}
	return q.Messages, nil
}

// connect opens a connection, the publishing channel in confirm mode and,
// with Config.Queue, the consuming channel.
func (a *Adapter) connect() (*session, error) {
	s := &session{declared: make(map[string]bool), acks: newAcks()}
	dial := amqp.DefaultDial(a.cfg.DialTimeout)
	// A cluster's nodes are tried from the one after the last session's
	// (the first before any), so a reconnect goes to another node first.
	a.nodeMu.Lock()
	first := (a.node + 1) % len(a.cfg.nodes)
	a.nodeMu.Unlock()
	conn, node, err := dialFrom(a.cfg.nodes, first, amqp.Config{
		Heartbeat:  a.cfg.Heartbeat,
		Locale:     "en_US",
		Properties: amqp.Table{"connection_name": a.cfg.ConnectionName},
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dial(network, addr)
			s.netConn = c
			return c, err
		},
	})
	if err != nil {
		return nil, err
	}
	a.nodeMu.Lock()
	a.node = node
	a.nodeMu.Unlock()
	if len(a.cfg.nodes) > 1 {
		a.cfg.Logger.Info("rabbitmq: connected", "node", redact(a.cfg.nodes[node]), "queue", a.cfg.Queue)
	}
	s.conn = conn
	fail := func(what string, err error) (*session, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq: %s on %s: %w", what, a.url, precondition(err))
	}
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))

	if s.pubCh, err = conn.Channel(); err != nil {
		return fail("open publish channel", err)
	}
	if err = s.pubCh.Confirm(false); err != nil {
		return fail("enable publisher confirms", err)
	}
	pubClosed := s.pubCh.NotifyClose(make(chan *amqp.Error, 1))
	// The client's reader hands each basic.return to this buffer before it
	// goes on to the next frame (the confirms among them), so the buffer
	// must hold every return not yet collected: at most one per publish
	// awaiting its confirm (inFlight), and those of publishes abandoned
	// since the last collection.
	s.returns = s.pubCh.NotifyReturn(make(chan amqp.Return, 2*maxInFlight))
	s.inFlight = make(chan struct{}, maxInFlight)
	s.returned = map[string]heldReturn{}

	var consClosed chan *amqp.Error
	var cancelled chan string
	if a.cfg.Queue != "" {
		if err := s.declare(a.cfg.Queue, a.cfg.QueueType, a.cfg.SingleActiveConsumer); err != nil {
			return fail("declare queue "+a.cfg.Queue, err)
		}
		ch, err := conn.Channel()
		if err != nil {
			return fail("open consume channel", err)
		}
		consClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
		cancelled = ch.NotifyCancel(make(chan string, 1))
		if err = ch.Qos(a.cfg.Prefetch, 0, false); err != nil {
			return fail("set prefetch", err)
		}
		if s.deliveries, err = ch.Consume(a.cfg.Queue, consumerTag, false, false, false, false, nil); err != nil {
			return fail("consume from "+a.cfg.Queue, err)
		}
		s.consCh, s.cancelFirst = ch, !a.cfg.SingleActiveConsumer
	}

	go func() {
		var err error
		select {
		case e, ok := <-connClosed:
			err = closeErr("connection", e, ok)
		case e, ok := <-pubClosed:
			err = closeErr("publish channel", e, ok)
		case e, ok := <-consClosed:
			err = closeErr("consume channel", e, ok)
		case tag := <-cancelled:
			err = fmt.Errorf("consumer %s cancelled by the broker", tag)
		}
		a.sv.Lost(s, err)
	}()
	return s, nil
}

func closeErr(what string, e *amqp.Error, ok bool) error {
	if !ok || e == nil {
		return fmt.Errorf("%s closed", what)
	}
	return fmt.Errorf("%s closed: %w", what, e)
}

// queueArgs are the arguments of a queue the Adapter creates.
func queueArgs(queueType string, singleActive bool) amqp.Table {
	args := amqp.Table{}
	if queueType != "" {
		args["x-queue-type"] = queueType
	}
	if singleActive {
		args["x-single-active-consumer"] = true
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// precondition wraps a 406 PRECONDITION_FAILED with ErrPreconditionFailed
// and what to do about it; other errors are returned as they are.
func precondition(err error) error {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed || errors.Is(err, ErrPreconditionFailed) {
		return err
	}
	return fmt.Errorf("%w: %w (an existing queue is used as it is, so this queue was created with other arguments at the same moment, or its type or a policy refuses the request: compare the queue's arguments and policies with the adapter's queue type)", ErrPreconditionFailed, err)
}

// consumerTag names the one consumer of a session's consuming channel.
const consumerTag = "inboxkit"

// cancelWait bounds how long Close waits for the broker to confirm the
// consumer's cancellation before it closes the connection anyway.
const cancelWait = 5 * time.Second

// Close closes the connection (and so its channels); the broker requeues
// what was delivered and not acknowledged.
//
// A consuming session cancels its consumer first and waits for the
// broker's basic.cancel-ok (up to cancelWait): a quorum queue may hold
// back the acknowledgements a channel sent last (RabbitMQ stashes them
// while the queue has not yet applied 32 earlier commands of the channel)
// and forget them when the channel closes, so those deliveries would come
// again. The queue applies the cancellation after them and sends what is
// stashed first. What is unacknowledged stays with the cancelled consumer
// until the connection closes, as before. Not with cancelFirst false (see
// Adapter.Close).
func (s *session) Close() {
	if s.consCh != nil && s.cancelFirst {
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			_ = s.consCh.Cancel(consumerTag, false) // fails at once on a closed channel
		}()
		select {
		case <-cancelled:
		case <-time.After(cancelWait):
		}
	}
	_ = s.conn.Close()
}

// declare makes sure queue name exists, once per session. An existing queue
// is used as it is, whatever its type and arguments (a passive declare); a
// missing one is declared durable, of queueType, single-active-consumer
// when singleActive. Declarations use a
// throw-away channel, so a failure cannot close the publishing or consuming
// channel.
func (s *session) declare(name, queueType string, singleActive bool) error {
	s.declMu.Lock()
	defer s.declMu.Unlock()
	if s.declared[name] {
		return nil
	}
	// RabbitMQ 3.10 answers 541 INTERNAL_ERROR when two connections create
	// the same quorum queue at once; by the next try the queue exists.
	var err error
	for try := 1; try <= 5; try++ {
		if err = s.declareOnce(name, queueType, singleActive); err == nil {
			s.declared[name] = true
			return nil
		}
		if !isInternalError(err) {
			break
		}
		time.Sleep(time.Duration(try) * 200 * time.Millisecond)
	}
	return precondition(err)
}

func (s *session) declareOnce(name, queueType string, singleActive bool) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		return nil
	}
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		return err
	}
	// The failed passive declare closed that channel.
	if ch, err = s.conn.Channel(); err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, queueArgs(queueType, singleActive))
	return err
}

// maxInFlight bounds the publishes of one session awaiting their confirm
// at once (Publish waits for a slot beyond it).
const maxInFlight = 256

// heldReturn is a collected return and when it was collected.
type heldReturn struct {
	amqp.Return
	at time.Time
}

// collectReturns moves the buffered returns into s.returned, keyed by
// message id, so that the buffer never fills (a full one would stop the
// connection's reader, and every confirm with it). A return comes just
// before its message's confirm, so one held for a minute belongs to an
// abandoned publish and is dropped.
func (s *session) collectReturns() {
	s.retMu.Lock()
	defer s.retMu.Unlock()
	now := time.Now()
drain:
	for {
		select {
		case r, open := <-s.returns:
			if !open {
				break drain
			}
			s.returned[r.MessageId] = heldReturn{r, now}
		default:
			break drain
		}
	}
	if len(s.returned) > maxInFlight {
		for id, r := range s.returned {
			if now.Sub(r.at) > time.Minute {
				delete(s.returned, id)
			}
		}
	}
}

// takeReturn reports (and forgets) the return of the message id.
func (s *session) takeReturn(id string) (amqp.Return, bool) {
	s.collectReturns()
	s.retMu.Lock()
	defer s.retMu.Unlock()
	r, ok := s.returned[id]
	delete(s.returned, id)
	return r.Return, ok
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
