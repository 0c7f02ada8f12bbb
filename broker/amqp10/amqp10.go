package amqp10

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/internal/reconnect"
)

var (
	// ErrNoQueue is returned by Receive on an Adapter opened without
	// Config.Queue (a publisher-only Adapter).
	ErrNoQueue = errors.New("amqp10: no Config.Queue: publisher-only adapter")
	// ErrNotAccepted is returned by Publish when the broker settled the
	// message with another outcome than accepted (rejected, released,
	// modified): it did not store it.
	ErrNotAccepted = errors.New("amqp10: message not accepted by the broker")
	// ErrPresettled is wrapped by the error of Open (and of the reconnects)
	// when the broker answers the receiver's request for unsettled
	// deliveries with another sender settle mode: it settles deliveries
	// itself (at most once), and a delivery in hand at a crash, or handed
	// back, would be lost. Config.AllowPresettled accepts that.
	ErrPresettled = errors.New("amqp10: the broker settles deliveries itself")
)

var (
	_ consumer.Source = (*Adapter)(nil)
	_ dlq.Publisher   = (*Adapter)(nil)
)

// Adapter is an AMQP 1.0 consumer.Source for one queue and a dlq.Publisher.
// It holds one connection with a session and receiver link for Config.Queue
// and a session and sender link per destination of Publish (under
// ProfileIBMMQ: one session for all the links), and replaces all of them
// after the connection, a session or the receiver link breaks.
// All methods are safe for concurrent use.
type Adapter struct {
	cfg Config
	ep  endpoint
	sv  *reconnect.Supervisor[*session]

	modeMu     sync.Mutex
	presettled *amqp.SenderSettleMode // the broker's own mode, accepted by AllowPresettled
}

// session is one connection with its links. It is never reused after it
// died; the supervisor opens a new one.
type session struct {
	reconnect.Life // dead after the connection, a session or the receiver link ended

	conn   *amqp.Conn
	rabbit bool          // AddressingRabbitMQ in effect
	single *amqp.Session // ProfileIBMMQ: the one session of every link; nil: a session per link
	rcv    *amqp.Receiver
	rcvS   *amqp.Session // the receiver's session (single, or its own)
	// detachFirst: Close detaches the receiver before it ends rcvS (not
	// with Config.SingleActiveConsumer).
	detachFirst bool

	// Link credit, managed here: given is credit issued and not yet used
	// by a delivery that Receive returned, held the deliveries returned
	// and not settled. New credit is issued only when given is 0, so a
	// flow never crosses transfers in flight: RabbitMQ 3.10's plugin then
	// sends more transfers than the credit, and go-amqp's credit counter
	// wraps and stops asking for more (docs/decisions.md).
	creditMu sync.Mutex
	prefetch int
	given    int
	held     int

	pubMu   sync.Mutex
	senders map[string]*amqp.Sender // by destination queue
	pubSess map[string]*amqp.Session
}

// Open connects to the broker, attaches the receiver link on Config.Queue
// (when set) and returns the Adapter. It fails when the first connection or
// the attach fails; later losses are repaired in the background. ctx bounds
// only this first connect.
func Open(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg.setDefaults()
	ep, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.ContainerID == "" {
		cfg.ContainerID = "inboxkit_" + newID()[:12]
	}
	a := &Adapter{cfg: cfg, ep: ep}
	a.sv = reconnect.New(reconnect.Config[*session]{
		Name: "amqp10", URL: ep.display, Queue: cfg.Queue, Logger: cfg.Logger,
		Backoff: cfg.Reconnect, Closed: consumer.ErrClosed,
		Connect: a.connect,
	})
	s, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	a.sv.Start(s)
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
		m, err := s.rcv.Receive(ctx, nil)
		if err == nil {
			s.credit(-1, +1)
			return newDelivery(a, s, m), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-a.sv.Closed():
			return nil, consumer.ErrClosed
		default:
		}
		// The link, its session or the connection ended.
		a.sv.Lost(s, fmt.Errorf("receiver link on %s: %w", a.cfg.Queue, err))
	}
}

// Publish sends body with headers to the queue named destination and
// returns nil only after the broker settled the transfer as accepted.
// Headers become application properties, except "correlation-id", which
// becomes the correlation-id property; the message-id is a fresh random id,
// the header durable, the body one data section. Another outcome
// (ErrNotAccepted), a lost connection or a failed attach is an error.
// While the connection is being repaired Publish waits, bounded by ctx.
func (a *Adapter) Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error {
	if destination == "" {
		return errors.New("amqp10: publish: empty destination")
	}
	s, err := a.sv.Current(ctx)
	if err != nil {
		return fmt.Errorf("amqp10: publish to %s: %w", destination, err)
	}
	snd, err := a.sender(ctx, s, destination)
	if err != nil {
		a.sessionEnded(s, err)
		return err
	}
	receipt, err := snd.SendWithReceipt(ctx, outgoing(headers, body), nil)
	if err != nil {
		s.dropSender(destination, snd)
		a.sessionEnded(s, err)
		return fmt.Errorf("amqp10: publish to %s: %w", destination, err)
	}
	state, err := receipt.Wait(ctx)
	if err != nil {
		s.dropSender(destination, snd)
		a.sessionEnded(s, err)
		return fmt.Errorf("amqp10: publish to %s: waiting for settlement: %w", destination, err)
	}
	switch st := state.(type) {
	case *amqp.StateAccepted:
		return nil
	case *amqp.StateRejected:
		if st.Error != nil {
			return fmt.Errorf("amqp10: publish to %s: %w: rejected: %s", destination, ErrNotAccepted, st.Error)
		}
		return fmt.Errorf("amqp10: publish to %s: %w: rejected", destination, ErrNotAccepted)
	default:
		return fmt.Errorf("amqp10: publish to %s: %w: outcome %T", destination, ErrNotAccepted, state)
	}
}

// sessionEnded hands s to the supervisor for a new connection when err
// says that the one session of ProfileIBMMQ ended (a broker may end it
// for a refused attach): every link on it is gone, and only a new
// connection begins a new session. With a session per link the next
// Publish attaches afresh on its own.
func (a *Adapter) sessionEnded(s *session, err error) {
	var se *amqp.SessionError
	if s.single != nil && errors.As(err, &se) {
		a.sv.Lost(s, fmt.Errorf("session ended: %w", err))
	}
}

// Close stops intake and closes the connection; the broker hands every
// delivery not yet settled to another consumer, and their Ack returns an
// error. Receive and Publish return consumer.ErrClosed afterwards. Close
// waits for the background reconnect loop to end and is safe to call more
// than once. It detaches the receiver first, so that every settlement sent
// before Close counts; on RabbitMQ 3.10, whose plugin does not answer the
// detach, that adds 100ms. Not with Config.SingleActiveConsumer (see
// there).
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

// connect opens a connection and, with Config.Queue, the receiver link.
func (a *Adapter) connect(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", a.ep.addr)
	if err != nil {
		return nil, fmt.Errorf("amqp10: connect to %s: %w", a.ep.display, err)
	}
	if a.ep.tls {
		tc := a.cfg.TLSConfig.Clone()
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(a.ep.addr)
		}
		tlsConn := tls.Client(nc, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("amqp10: TLS handshake with %s: %w", a.ep.display, err)
		}
		nc = tlsConn
	}
	opts := &amqp.ConnOptions{
		ContainerID: a.cfg.ContainerID,
		HostName:    a.cfg.HostName,
		IdleTimeout: a.cfg.IdleTimeout,
		SASLType:    amqp.SASLTypeAnonymous(),
	}
	if opts.HostName == "" {
		opts.HostName, _, _ = net.SplitHostPort(a.ep.addr)
	}
	if a.ep.hasUser {
		opts.SASLType = amqp.SASLTypePlain(a.ep.user, a.ep.password)
	}
	conn, err := amqp.NewConn(ctx, nc, opts)
	if err != nil {
		return nil, fmt.Errorf("amqp10: connect to %s: %w", a.ep.display, err)
	}
	s := &session{
		conn:    conn,
		senders: map[string]*amqp.Sender{},
		pubSess: map[string]*amqp.Session{},
	}
	switch a.cfg.Addressing {
	case AddressingRabbitMQ:
		s.rabbit = true
	case AddressingAuto:
		product, _ := conn.Properties()["product"].(string)
		s.rabbit = strings.EqualFold(product, "RabbitMQ")
	}
	if a.cfg.Profile == ProfileIBMMQ {
		if s.single, err = conn.NewSession(ctx, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("amqp10: begin session on %s: %w", a.ep.display, err)
		}
	}
	if a.cfg.Queue != "" {
		rs := s.single
		if rs == nil {
			if rs, err = conn.NewSession(ctx, nil); err != nil {
				_ = conn.Close()
				return nil, fmt.Errorf("amqp10: begin session on %s: %w", a.ep.display, err)
			}
		}
		// Credit is managed here, one back per settlement: go-amqp's
		// automatic credit stalls RabbitMQ 3.10's plugin when deliveries
		// are settled concurrently (docs/decisions.md).
		// The attach asks for unsettled deliveries (snd-settle-mode
		// unsettled) that the receiver settles (rcv-settle-mode first);
		// go-amqp fails the attach when the broker answers another mode.
		first, mode := amqp.ReceiverSettleModeFirst, a.senderMode()
		opts := &amqp.ReceiverOptions{
			Credit:                    -1,
			Name:                      "inboxkit:" + a.cfg.Queue,
			SourceDurability:          amqp.DurabilityUnsettledState,
			SourceExpiryPolicy:        amqp.ExpiryPolicyNever,
			RequestedSenderSettleMode: &mode,
			SettlementMode:            &first,
		}
		addr := a.cfg.Queue
		if s.rabbit {
			addr = "/amq/queue/" + a.cfg.Queue
		} else {
			opts.SourceCapabilities = []string{"queue"}
		}
		s.rcvS, s.detachFirst = rs, !a.cfg.SingleActiveConsumer
		if s.rcv, err = rs.NewReceiver(ctx, addr, opts); err != nil {
			_ = conn.Close()
			if answered, ok := peerSenderMode(err); ok {
				return a.otherSenderMode(ctx, addr, mode, answered)
			}
			hint := ""
			var aerr *amqp.Error
			if errors.As(err, &aerr) && aerr.Condition == amqp.ErrCondNotFound {
				hint = " (create the queue first: the adapter declares no queue to receive from)"
			}
			return nil, fmt.Errorf("amqp10: attach receiver on %s at %s: %w%s", addr, a.ep.display, err, hint)
		}
		if mode != amqp.SenderSettleModeUnsettled {
			a.cfg.Logger.Warn("amqp10: the broker settles deliveries itself and allow-presettled accepts it: a delivery in hand when the consumer dies, and one handed back, is LOST (at most once)",
				"broker", a.ep.display, "queue", a.cfg.Queue, "snd-settle-mode", settleModeName(mode), "setting", "allow-presettled")
		}
		s.prefetch = a.cfg.Prefetch
		if err := s.refill(); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("amqp10: issue link credit on %s at %s: %w", addr, a.ep.display, err)
		}
	}
	go func() {
		select {
		case <-conn.Done():
			a.sv.Lost(s, fmt.Errorf("connection closed: %v", conn.Err()))
		case <-s.Dead():
		}
	}()
	return s, nil
}

// senderMode is the sender settle mode the receiver's attach asks for:
// unsettled, or the broker's own mode once AllowPresettled accepted it.
func (a *Adapter) senderMode() amqp.SenderSettleMode {
	a.modeMu.Lock()
	defer a.modeMu.Unlock()
	if a.presettled != nil {
		return *a.presettled
	}
	return amqp.SenderSettleModeUnsettled
}

// otherSenderMode handles a broker that answered the receiver's attach
// with sender settle mode answered instead of asked: ErrPresettled, or
// under AllowPresettled a new connection that asks for the broker's mode
// (go-amqp attaches only when both agree; connect warns). A broker that
// answers unsettled again is asked for unsettled again.
func (a *Adapter) otherSenderMode(ctx context.Context, addr string, asked, answered amqp.SenderSettleMode) (*session, error) {
	name := settleModeName(answered)
	switch {
	case answered == amqp.SenderSettleModeUnsettled:
		a.modeMu.Lock()
		a.presettled = nil
		a.modeMu.Unlock()
	case !a.cfg.AllowPresettled:
		return nil, fmt.Errorf("amqp10: attach receiver on %s at %s: %w: asked for unsettled deliveries, it answered snd-settle-mode %s, so it may forget a delivery once sent and a consumer crash or a Requeue would lose it: configure the broker (or its AMQP channel) to send unsettled deliveries, or accept the loss with ?allow-presettled in the URL (Config.AllowPresettled)",
			addr, a.ep.display, ErrPresettled, name)
	default:
		a.modeMu.Lock()
		a.presettled = &answered
		a.modeMu.Unlock()
	}
	if answered == asked {
		return nil, fmt.Errorf("amqp10: attach receiver on %s at %s: the broker answered the sender settle mode it was asked for (%s) and go-amqp refused it", addr, a.ep.display, name)
	}
	return a.connect(ctx)
}

// peerSenderModeRe reads the sender settle mode a broker answered from
// go-amqp's (v1.7) attach error, which carries it only in its text.
var peerSenderModeRe = regexp.MustCompile(`sender settlement mode "[a-z]+" requested, received "([a-z]+)" from server`)

// peerSenderMode returns the sender settle mode named by err, a failed
// attach whose answer differed from the request.
func peerSenderMode(err error) (amqp.SenderSettleMode, bool) {
	m := peerSenderModeRe.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, false
	}
	for _, mode := range []amqp.SenderSettleMode{amqp.SenderSettleModeUnsettled, amqp.SenderSettleModeSettled, amqp.SenderSettleModeMixed} {
		if settleModeName(mode) == m[1] {
			return mode, true
		}
	}
	return 0, false
}

// settleModeName is the AMQP name of a sender settle mode.
func settleModeName(m amqp.SenderSettleMode) string { return m.String() }

// credit records a delivery returned by Receive (-1, +1) or settled
// (0, -1) and issues new credit when the link has none left.
func (s *session) credit(given, held int) {
	s.creditMu.Lock()
	s.given += given
	s.held += held
	s.creditMu.Unlock()
	_ = s.refill() // fails only on a link that ended
}

func (s *session) refill() error {
	s.creditMu.Lock()
	defer s.creditMu.Unlock()
	if s.given > 0 || s.held >= s.prefetch {
		return nil
	}
	n := s.prefetch - s.held
	if err := s.rcv.IssueCredit(uint32(n)); err != nil {
		return err
	}
	s.given += n
	return nil
}

// sender returns the sender link for destination, attaching it first.
func (a *Adapter) sender(ctx context.Context, s *session, destination string) (*amqp.Sender, error) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if snd := s.senders[destination]; snd != nil {
		return snd, nil
	}
	attach := func(addr string, opts *amqp.SenderOptions) (*amqp.Session, *amqp.Sender, error) {
		if s.single != nil {
			snd, err := s.single.NewSender(ctx, addr, opts)
			return nil, snd, err
		}
		// A session per sender: a refused attach ends its session, and
		// must not take other links with it.
		ps, err := s.conn.NewSession(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		snd, err := ps.NewSender(ctx, addr, opts)
		if err != nil {
			closeQuietly(ps)
			return nil, nil, err
		}
		return ps, snd, nil
	}
	var (
		ps   *amqp.Session
		snd  *amqp.Sender
		err  error
		addr = destination
	)
	if s.rabbit {
		addr = "/queue/" + destination
		ps, snd, err = attach(addr, &amqp.SenderOptions{TargetDurability: amqp.DurabilityUnsettledState})
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Condition == amqp.ErrCondPreconditionFailed {
			// The queue exists with other arguments (a quorum queue):
			// address it as an existing queue.
			addr = "/amq/queue/" + destination
			ps, snd, err = attach(addr, nil)
		}
	} else {
		// A durable terminus, as the receiver's source: a broker that
		// creates the node from it (RabbitMQ's plugin) makes it durable.
		ps, snd, err = attach(addr, &amqp.SenderOptions{TargetCapabilities: []string{"queue"}, TargetDurability: amqp.DurabilityUnsettledState})
	}
	if err != nil {
		return nil, fmt.Errorf("amqp10: publish to %s: attach sender on %s: %w", destination, addr, err)
	}
	s.senders[destination] = snd
	if ps != nil {
		s.pubSess[destination] = ps
	}
	return snd, nil
}

// dropSender forgets snd after a failed transfer, so the next Publish
// attaches a fresh link.
func (s *session) dropSender(destination string, snd *amqp.Sender) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.senders[destination] != snd {
		return
	}
	delete(s.senders, destination)
	if ps := s.pubSess[destination]; ps != nil {
		delete(s.pubSess, destination)
		go closeQuietly(ps)
		return
	}
	go closeQuietly(snd) // on the single session: the link only
}

func closeQuietly(ps interface{ Close(context.Context) error }) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ps.Close(ctx)
}

// Close closes the connection; the broker hands back what was delivered
// and not settled.
//
// A receiving session first detaches its receiver (unless detachFirst is
// false) and ends the receiver's session, so that the broker has applied
// every settlement sent before:
// RabbitMQ 3.10's plugin forgot some of those sent just before the
// connection closed (on a classic queue as on a quorum queue), and ending
// the session alone kept them only on a classic queue: the detach cancels
// the consumer, and a quorum queue applies what its channel held back
// first (see the rabbitmq adapter's Close).
func (s *session) Close() {
	if s.rcv != nil {
		if s.detachFirst {
			ctx, cancel := context.WithTimeout(context.Background(), detachWait)
			_ = s.rcv.Close(ctx)
			cancel()
		}
		ctx, cancel := context.WithTimeout(context.Background(), endWait)
		_ = s.rcvS.Close(ctx)
		cancel()
	}
	_ = s.conn.Close()
}

// detachWait bounds the wait for the broker's answer to the receiver's
// detach, endWait for its answer to the receiver session's end. RabbitMQ
// 3.10's plugin does not answer the detach: there Close waits detachWait,
// the time the client takes to send it, and the end is what it answers.
const (
	detachWait = 100 * time.Millisecond
	endWait    = 5 * time.Second
)

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
