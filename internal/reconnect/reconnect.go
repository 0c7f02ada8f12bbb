// Package reconnect keeps one live broker session for an adapter and
// replaces it after it dies: the session supervision that broker/rabbitmq
// and broker/amqp10 share, with their reconnect defaults. Every adapter
// spaces its reconnects with the toolkit's one backoff type,
// inboxkit.Backoff (Config.Reconnect), through [Waits] or Backoff.Delay.
//
// An adapter's session type embeds [Life]. The adapter makes its
// Supervisor with [New], opens its first session itself (so Open reports
// its error) and hands it to [Supervisor.Start]. From then on
// [Supervisor.Current] returns the live session, waiting while a dead one
// is being replaced; code that sees a session fail calls [Supervisor.Lost];
// the supervisor closes the dead session, waits with doubling backoff,
// connects again until it succeeds, and installs the new session.
// [Supervisor.Ready] reports the connection state for readiness checks.
package reconnect

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
)

// Life is embedded in a session: it says when the session died and why.
// Its zero value is a live session.
type Life struct {
	mk   sync.Once
	dead chan struct{}
	once sync.Once
	err  error // why it died; written before dead is closed
}

func (l *Life) ch() chan struct{} {
	l.mk.Do(func() { l.dead = make(chan struct{}) })
	return l.dead
}

// Dead is closed when the session died.
func (l *Life) Dead() <-chan struct{} { return l.ch() }

// Err tells why the session died; nil while it lives.
func (l *Life) Err() error {
	select {
	case <-l.ch():
		return l.err
	default:
		return nil
	}
}

func (l *Life) life() *Life { return l }

// Session is one connection of an adapter with what hangs on it. It is
// never reused after it died.
type Session interface {
	// Close closes the connection; the broker hands back what was
	// delivered and not settled.
	Close()
	life() *Life // embed Life
}

// Waits returns the successive pauses of one series of reconnect attempts:
// b.Delay(1), b.Delay(2), ...
func Waits(b inboxkit.Backoff) func() time.Duration {
	n := 0
	return func() time.Duration {
		n++
		return b.Delay(n)
	}
}

// Config configures a Supervisor.
type Config[S Session] struct {
	// Name prefixes log messages ("rabbitmq").
	Name string
	// URL is the broker URL for logs and errors, password removed.
	URL string
	// Queue is the consumed queue, for logs.
	Queue string
	// Logger receives the reconnect messages.
	Logger *slog.Logger
	// Backoff spaces the reconnect attempts (its defaults applied).
	Backoff inboxkit.Backoff
	// Connect opens a new session; ctx is cancelled by Close.
	Connect func(ctx context.Context) (S, error)
	// Closed is the error Current and Ready return after Close, and the
	// reason the last session died: the adapters pass consumer.ErrClosed,
	// the error their Source contract promises. Required.
	Closed error
}

// Supervisor holds the live session and replaces it after it died, until
// Close. All methods are safe for concurrent use.
type Supervisor[S Session] struct {
	cfg Config[S]

	mu       sync.Mutex
	sess     S
	live     bool          // sess is set and alive
	ready    chan struct{} // closed when sess is set
	lostAt   time.Time     // when the last session died
	lastErr  error         // why it died, or the last failed attempt since
	attempts int           // failed reconnect attempts since

	closed    chan struct{}
	closeOnce sync.Once
	done      chan struct{} // supervisor exited
}

// New returns a Supervisor with no session yet: Current waits until Start.
// An adapter creates it before its first connect, so that the session's
// watchers can call Lost. It panics without cfg.Closed.
func New[S Session](cfg Config[S]) *Supervisor[S] {
	if cfg.Closed == nil {
		panic("reconnect: Config.Closed is nil; pass consumer.ErrClosed")
	}
	return &Supervisor[S]{
		cfg:    cfg,
		ready:  make(chan struct{}),
		closed: make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// Start installs first as the live session and supervises it. It is called
// once; without it Close must not be called.
func (sv *Supervisor[S]) Start(first S) {
	sv.install(first)
	go sv.supervise(first)
}

// Current returns the live session, waiting while the connection is being
// repaired. It fails with ctx.Err(), or Config.Closed after Close.
func (sv *Supervisor[S]) Current(ctx context.Context) (S, error) {
	var zero S
	for {
		select {
		case <-sv.closed:
			return zero, sv.cfg.Closed
		default:
		}
		sv.mu.Lock()
		s, live, ready := sv.sess, sv.live, sv.ready
		sv.mu.Unlock()
		if live {
			return s, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-sv.closed:
			return zero, sv.cfg.Closed
		}
	}
}

// Closed is closed by Close.
func (sv *Supervisor[S]) Closed() <-chan struct{} { return sv.closed }

// Ready returns nil while a session is live, and otherwise an error saying
// since when the connection is down and why. It does not block.
func (sv *Supervisor[S]) Ready() error {
	select {
	case <-sv.closed:
		return fmt.Errorf("%s: %w", sv.cfg.Name, sv.cfg.Closed)
	default:
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.live {
		return nil
	}
	return fmt.Errorf("%s: not connected to %s since %s (%d reconnect attempts failed): %w",
		sv.cfg.Name, sv.cfg.URL, sv.lostAt.UTC().Format(time.RFC3339), sv.attempts, sv.lastErr)
}

// Lost marks s dead with err and makes Current wait for its successor.
// Only the first call for a session counts.
func (sv *Supervisor[S]) Lost(s S, err error) {
	l := s.life()
	l.once.Do(func() {
		sv.mu.Lock()
		if sv.live && sv.sess.life() == l {
			var zero S
			sv.sess, sv.live = zero, false
			sv.ready = make(chan struct{})
			sv.lostAt, sv.lastErr, sv.attempts = time.Now(), err, 0
		}
		sv.mu.Unlock()
		l.err = err
		close(l.ch())
	})
}

// Close stops the supervision, marks the live session dead and closes it,
// and waits until the supervisor exited. It is safe to call more than once.
func (sv *Supervisor[S]) Close() {
	sv.closeOnce.Do(func() { close(sv.closed) })
	<-sv.done
}

func (sv *Supervisor[S]) install(s S) {
	sv.mu.Lock()
	sv.sess, sv.live = s, true
	close(sv.ready)
	sv.mu.Unlock()
}

func (sv *Supervisor[S]) supervise(s S) {
	defer close(sv.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sv.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := sv.cfg.Logger
	for {
		select {
		case <-s.life().Dead():
		case <-sv.closed:
			sv.Lost(s, sv.cfg.Closed)
			s.Close()
			return
		}
		s.Close()
		log.Warn(sv.cfg.Name+": connection lost, reconnecting", "url", sv.cfg.URL, "queue", sv.cfg.Queue, "err", s.life().Err())
		wait := Waits(sv.cfg.Backoff)
		backoff := wait()
		for {
			select {
			case <-sv.closed:
				return
			case <-time.After(backoff):
			}
			next, err := sv.cfg.Connect(ctx)
			if err == nil {
				s = next
				break
			}
			if ctx.Err() != nil {
				return // closed while connecting
			}
			sv.mu.Lock()
			sv.lastErr = err
			sv.attempts++
			sv.mu.Unlock()
			backoff = wait()
			log.Warn(sv.cfg.Name+": reconnect failed", "url", sv.cfg.URL, "err", err, "retry_in", backoff)
		}
		sv.install(s)
		log.Info(sv.cfg.Name+": reconnected", "url", sv.cfg.URL, "queue", sv.cfg.Queue)
	}
}

// DefaultReconnect is the reconnect backoff of rabbitmq and amqp10:
// 500ms doubling up to 30s; rabbitmq exact, amqp10 ±50% (SetDefaults'
// jitter).
var DefaultReconnect = inboxkit.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2}

// DefaultDialTimeout is their Config.DialTimeout.
const DefaultDialTimeout = 10 * time.Second

// SetDefaults fills the zero fields of an adapter's Config.Reconnect from
// DefaultReconnect with jitter (inboxkit.Backoff.Jitter: -1 for none), and
// a zero Config.DialTimeout.
func SetDefaults(reconnect *inboxkit.Backoff, jitter float64, dialTimeout *time.Duration) {
	def := DefaultReconnect
	def.Jitter = jitter
	*reconnect = reconnect.Or(def)
	if *dialTimeout == 0 {
		*dialTimeout = DefaultDialTimeout
	}
}

// Validate checks those settings; the errors name the fields with prefix
// (the package name).
func Validate(prefix string, reconnect inboxkit.Backoff, dialTimeout time.Duration) error {
	if err := reconnect.Validate(prefix + ": Config.Reconnect"); err != nil {
		return err
	}
	if dialTimeout < 0 {
		return fmt.Errorf("%s: Config.DialTimeout must not be negative", prefix)
	}
	return nil
}
