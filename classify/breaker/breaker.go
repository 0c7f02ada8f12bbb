// Package breaker is a circuit breaker for calls to a downstream service
// (the letter service, a partner API), built on github.com/sony/gobreaker.
// After Config.MaxFailures consecutive failures it opens: calls fail fast
// with an error whose decision is technical, reason CIRCUIT_OPEN and
// NoAttempt, so the message is handed back without raising ATTEMPTS, and an
// outage of the downstream does not dead-letter the whole queue. After
// Config.OpenTimeout it lets a trial call through (half-open); a success
// closes it. Business rejections and poison do not count as failures: the
// downstream answered. A consumer pauses its intake while [Breaker.Open] is
// true (consumer.Config.PausedFunc).
//
// It is a package of its own, apart from classify, so that a program that
// only classifies errors or runs an inbox does not link gobreaker.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// ErrOpen is wrapped by the error a [Breaker] returns while it refuses
// calls: errors.Is(err, breaker.ErrOpen).
var ErrOpen = errors.New("breaker: circuit breaker is open")

// State is the state of a [Breaker].
type State string

// Breaker states.
const (
	// StateClosed: calls pass; consecutive failures are counted.
	StateClosed State = "closed"
	// StateHalfOpen: OpenTimeout has passed; up to HalfOpenMaxCalls trial
	// calls pass. That many successes close the breaker; one failure opens it
	// again.
	StateHalfOpen State = "half-open"
	// StateOpen: calls fail fast with CIRCUIT_OPEN, fn is not called.
	StateOpen State = "open"
)

// Default values of [Config].
const (
	DefaultName             = "breaker"
	DefaultMaxFailures      = 5
	DefaultOpenTimeout      = 30 * time.Second
	DefaultHalfOpenMaxCalls = 1
)

// Config configures a [Breaker]. A zero field means its default.
type Config struct {
	// Name identifies the breaker in errors and in OnStateChangeFunc
	// ("letter-service"). Defaults to "breaker".
	Name string

	// MaxFailures is the number of consecutive failures that open the
	// breaker. Defaults to 5.
	MaxFailures int

	// OpenTimeout is how long the breaker stays open before it lets trial
	// calls through (half-open). Defaults to 30s.
	OpenTimeout time.Duration

	// HalfOpenMaxCalls is the number of trial calls let through while
	// half-open; that many consecutive successes close the breaker. Defaults
	// to 1.
	HalfOpenMaxCalls int

	// OnStateChangeFunc, when set, is called on every state change, for
	// example to pause the consumer's intake while the breaker is open. It
	// runs while the breaker holds its lock: it must return quickly and must
	// not call the Breaker's methods. The change from open to half-open is
	// seen by the first Do or State call after OpenTimeout. Defaults to nil.
	OnStateChangeFunc func(name string, from, to State)

	// IsFailureFunc, when set, tells whether an error returned by fn counts
	// as a failure of the downstream. Defaults to: an error counts unless its
	// decision (see classify.Of) is a business rejection or poison (the downstream
	// answered; the message is at fault) or it is context.Canceled (the
	// caller gave up).
	IsFailureFunc func(error) bool
}

func (c Config) validate() error {
	switch {
	case c.MaxFailures < 0:
		return fmt.Errorf("breaker: Config.MaxFailures is %d; must be at least 1 (zero means the default, %d)", c.MaxFailures, DefaultMaxFailures)
	case c.OpenTimeout < 0:
		return fmt.Errorf("breaker: Config.OpenTimeout is %s; must not be negative", c.OpenTimeout)
	case c.HalfOpenMaxCalls < 0:
		return fmt.Errorf("breaker: Config.HalfOpenMaxCalls is %d; must be at least 1 (zero means the default, %d)", c.HalfOpenMaxCalls, DefaultHalfOpenMaxCalls)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.HalfOpenMaxCalls == 0 {
		c.HalfOpenMaxCalls = DefaultHalfOpenMaxCalls
	}
	if c.IsFailureFunc == nil {
		c.IsFailureFunc = defaultIsFailure
	}
}

func defaultIsFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	c := classify.Of(err).Class
	return c != inboxkit.ClassBusiness && c != inboxkit.ClassPoison
}

// Breaker is a circuit breaker for calls to a downstream service. While it
// is open, [Breaker.Do] fails fast with an error whose decision is technical,
// reason CIRCUIT_OPEN, NoAttempt: the message is handed back without counting
// towards the backout threshold, so an outage of the downstream does not
// dead-letter the whole queue. Consumers should also pause their intake while
// [Breaker.Open] is true (see Config.OnStateChangeFunc).
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	cb  *gobreaker.CircuitBreaker
	cfg Config
}

// New returns a closed Breaker, or an error naming the invalid field of
// cfg.
func New(cfg Config) (*Breaker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	b := &Breaker{cfg: cfg}
	st := gobreaker.Settings{
		Name:        cfg.Name,
		MaxRequests: uint32(cfg.HalfOpenMaxCalls),
		Timeout:     cfg.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.MaxFailures)
		},
		IsSuccessful: func(err error) bool { return !cfg.IsFailureFunc(err) },
	}
	if f := cfg.OnStateChangeFunc; f != nil {
		st.OnStateChange = func(name string, from, to gobreaker.State) {
			f(name, stateOf(from), stateOf(to))
		}
	}
	b.cb = gobreaker.NewCircuitBreaker(st)
	return b, nil
}

// Do calls fn(ctx) through the breaker and returns its error unchanged. While
// the breaker is open (or half-open with all trial calls taken), fn is not
// called and Do returns a [*classify.Error] wrapping [ErrOpen] with the
// decision {Technical, CIRCUIT_OPEN, RetryAfter: OpenTimeout, NoAttempt}.
// A panic in fn counts as a failure and is re-raised.
func (b *Breaker) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	called := false
	_, err := b.cb.Execute(func() (any, error) {
		called = true
		return nil, fn(ctx)
	})
	if !called && err != nil {
		return &classify.Error{
			Decision: inboxkit.Decision{
				Class:      inboxkit.ClassTechnical,
				Reason:     inboxkit.ReasonCircuitOpen,
				RetryAfter: b.cfg.OpenTimeout,
				NoAttempt:  true,
			},
			Err: &circuitOpenError{name: b.cfg.Name, state: b.State(), cause: err},
		}
	}
	return err
}

// State returns the breaker's current state.
func (b *Breaker) State() State { return stateOf(b.cb.State()) }

// Open reports whether the breaker is open, that is, refusing every call.
// A consumer pauses its intake while it is true.
func (b *Breaker) Open() bool { return b.State() == StateOpen }

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.cfg.Name }

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// circuitOpenError is the cause of a refused call: it matches ErrOpen
// and unwraps to gobreaker's error.
type circuitOpenError struct {
	name  string
	state State
	cause error
}

func (e *circuitOpenError) Error() string {
	return fmt.Sprintf("circuit breaker %q is %s", e.name, e.state)
}

func (e *circuitOpenError) Is(target error) bool { return target == ErrOpen }

func (e *circuitOpenError) Unwrap() error { return e.cause }
