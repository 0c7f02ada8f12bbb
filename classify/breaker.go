package classify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker"

	"github.com/inboxkit/inboxkit"
)

// ErrCircuitOpen is wrapped by the error a [Breaker] returns while it refuses
// calls: errors.Is(err, classify.ErrCircuitOpen).
var ErrCircuitOpen = errors.New("classify: circuit breaker is open")

// BreakerState is the state of a [Breaker].
type BreakerState string

// Breaker states.
const (
	// StateClosed: calls pass; consecutive failures are counted.
	StateClosed BreakerState = "closed"
	// StateHalfOpen: OpenTimeout has passed; up to HalfOpenMaxCalls trial
	// calls pass. That many successes close the breaker; one failure opens it
	// again.
	StateHalfOpen BreakerState = "half-open"
	// StateOpen: calls fail fast with CIRCUIT_OPEN, fn is not called.
	StateOpen BreakerState = "open"
)

// Default values of [BreakerConfig].
const (
	DefaultBreakerName      = "breaker"
	DefaultMaxFailures      = 5
	DefaultOpenTimeout      = 30 * time.Second
	DefaultHalfOpenMaxCalls = 1
)

// BreakerConfig configures a [Breaker]. A zero field means its default.
type BreakerConfig struct {
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
	OnStateChangeFunc func(name string, from, to BreakerState)

	// IsFailureFunc, when set, tells whether an error returned by fn counts
	// as a failure of the downstream. Defaults to: an error counts unless its
	// decision (see [Of]) is a business rejection or poison (the downstream
	// answered; the message is at fault) or it is context.Canceled (the
	// caller gave up).
	IsFailureFunc func(error) bool
}

func (c BreakerConfig) validate() error {
	switch {
	case c.MaxFailures < 0:
		return fmt.Errorf("classify: BreakerConfig.MaxFailures is %d; must be at least 1 (zero means the default, %d)", c.MaxFailures, DefaultMaxFailures)
	case c.OpenTimeout < 0:
		return fmt.Errorf("classify: BreakerConfig.OpenTimeout is %s; must not be negative", c.OpenTimeout)
	case c.HalfOpenMaxCalls < 0:
		return fmt.Errorf("classify: BreakerConfig.HalfOpenMaxCalls is %d; must be at least 1 (zero means the default, %d)", c.HalfOpenMaxCalls, DefaultHalfOpenMaxCalls)
	}
	return nil
}

func (c *BreakerConfig) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultBreakerName
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
	c := Of(err).Class
	return c != inboxkit.ClassBusiness && c != inboxkit.ClassPoison
}

// Breaker is a circuit breaker for calls to a downstream service (the letter
// service, a partner API), built on github.com/sony/gobreaker. While it is
// open, [Breaker.Do] fails fast with an error whose decision is technical,
// reason CIRCUIT_OPEN, NoAttempt: the message is handed back without counting
// towards the backout threshold, so an outage of the downstream does not
// dead-letter the whole queue. Consumers should also pause their intake while
// [Breaker.Open] is true (see BreakerConfig.OnStateChangeFunc).
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	cb  *gobreaker.CircuitBreaker
	cfg BreakerConfig
}

// NewBreaker returns a closed Breaker, or an error naming the invalid field
// of cfg.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
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
// called and Do returns an [*Error] wrapping [ErrCircuitOpen] with the
// decision {Technical, CIRCUIT_OPEN, RetryAfter: OpenTimeout, NoAttempt}.
// A panic in fn counts as a failure and is re-raised.
func (b *Breaker) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	called := false
	_, err := b.cb.Execute(func() (any, error) {
		called = true
		return nil, fn(ctx)
	})
	if !called && err != nil {
		return &Error{
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
func (b *Breaker) State() BreakerState { return stateOf(b.cb.State()) }

// Open reports whether the breaker is open, that is, refusing every call.
// A consumer pauses its intake while it is true.
func (b *Breaker) Open() bool { return b.State() == StateOpen }

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.cfg.Name }

func stateOf(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// circuitOpenError is the cause of a refused call: it matches ErrCircuitOpen
// and unwraps to gobreaker's error.
type circuitOpenError struct {
	name  string
	state BreakerState
	cause error
}

func (e *circuitOpenError) Error() string {
	return fmt.Sprintf("circuit breaker %q is %s", e.name, e.state)
}

func (e *circuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

func (e *circuitOpenError) Unwrap() error { return e.cause }
