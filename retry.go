package inboxkit

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy is the one retry and backout policy of the toolkit: how often a
// message that fails technically is tried before it is dead-lettered, how
// long the broker waits before it delivers it again, and whether a transient
// failure is retried at once, in process. It is set once, on the inbox store
// (inbox.Config.Retry), and read from there by the transactional runtime
// (consumer), the store-then-process worker (inbox.Worker) and the in-process
// retry (classify.Do).
//
// The zero RetryPolicy is ready to use: a zero field means its default, and
// the defaults are:
//
//	MaxAttempts       5
//	Redelivery        1s after the first failure, doubling up to 1 minute, ±50% jitter
//	InProcessRetries  0 (no in-process retries: the redelivery retries)
//	InProcess         100ms, doubling up to 2s, ±50% jitter
//	InProcessMaxTime  5s
//
// A RetryPolicy is a value; it is safe to use from many goroutines.
type RetryPolicy struct {
	// MaxAttempts is the backout threshold: after this many recorded
	// technical failures (and attempts that never came back: a process that
	// died in the handler) the message is dead-lettered with reason
	// MAX_ATTEMPTS_EXCEEDED. Attempts marked NoAttempt (an open circuit
	// breaker) are not counted. Defaults to 5.
	//
	// There is no "unlimited": zero means the default, never IBM MQ's
	// BOTHRESH(0) (no threshold, an endless redelivery loop), and a negative
	// value is refused by Validate.
	MaxAttempts int

	// Redelivery is the delay before a message that failed technically is
	// tried again: the requeue delay the runtime asks the broker for, and
	// NEXT_ATTEMPT_AT of a store-then-process entry. It grows with ATTEMPTS;
	// a handler error's RetryAfter hint wins. Defaults to 1s doubling up to
	// 1 minute, ±50% jitter (DefaultRedelivery).
	Redelivery Backoff

	// InProcessRetries is how many times a transient failure (deadlock, lock
	// timeout, lost connection, classify.Retry; see
	// classify.IsTransientReason) is retried at once, in process, before
	// the message is handed back; every try is an attempt counted in the
	// inbox. Only the transactional runtime retries in process: a
	// store-then-process consumer refuses a positive value (its worker
	// retries after Redelivery). Defaults to 0: no in-process retries.
	InProcessRetries int

	// InProcess is the wait between in-process retries. Defaults to 100ms
	// doubling up to 2s, ±50% jitter (DefaultInProcess).
	InProcess Backoff

	// InProcessMaxTime bounds the in-process retries of one delivery: no
	// retry starts after it. Keep it well below the broker's acknowledgement
	// timeout and the handler's transaction timeout. Defaults to 5s.
	InProcessMaxTime time.Duration
}

// The defaults of RetryPolicy, documented there.
const (
	DefaultMaxAttempts      = 5
	DefaultInProcessMaxTime = 5 * time.Second
)

// Default backoffs of RetryPolicy.
var (
	DefaultRedelivery = Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.5}
	DefaultInProcess  = Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 0.5}
)

// WithDefaults returns p with every zero field set to its default, so that
// p.WithDefaults().MaxAttempts is the backout threshold in effect.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	p.Redelivery = p.Redelivery.Or(DefaultRedelivery)
	p.InProcess = p.InProcess.Or(DefaultInProcess)
	if p.InProcessMaxTime == 0 {
		p.InProcessMaxTime = DefaultInProcessMaxTime
	}
	return p
}

// Validate reports the first invalid field, by name (RetryPolicy.MaxAttempts,
// RetryPolicy.Redelivery.Max, ...). Zero values are valid: they mean the
// default.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("RetryPolicy.MaxAttempts is %d: it must be at least 1 (leave it 0 for the default %d); a message is never retried forever", p.MaxAttempts, DefaultMaxAttempts)
	case p.InProcessRetries < 0:
		return fmt.Errorf("RetryPolicy.InProcessRetries is %d: it must not be negative (0: no in-process retries)", p.InProcessRetries)
	case p.InProcessMaxTime < 0:
		return fmt.Errorf("RetryPolicy.InProcessMaxTime is %s: it must not be negative", p.InProcessMaxTime)
	}
	if err := p.Redelivery.Or(DefaultRedelivery).Validate("RetryPolicy.Redelivery"); err != nil {
		return err
	}
	return p.InProcess.Or(DefaultInProcess).Validate("RetryPolicy.InProcess")
}

// RedeliveryDelay is the delay before the next try of a message whose
// attempts-th attempt failed (1 for the first): Redelivery.Delay with the
// defaults applied.
func (p RetryPolicy) RedeliveryDelay(attempts int) time.Duration {
	return p.Redelivery.Or(DefaultRedelivery).Delay(attempts)
}

// Backoff is a capped exponential backoff with jitter: the delay after the
// n-th failure is Initial × Multiplier^(n-1), at most Max, drawn from
// [d×(1−Jitter), d×(1+Jitter)] so that messages that failed together (an
// outage) do not all come back at the same moment. Every place that waits
// before trying again uses it: the redelivery and in-process retries of
// RetryPolicy, and the broker adapters' reconnects. A zero field means the
// default of the place that uses it (see Or).
type Backoff struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Max caps the delay (before the jitter). It must not be less than
	// Initial.
	Max time.Duration
	// Multiplier grows the delay per failure; at least 1. Zero means 2.
	Multiplier float64
	// Jitter randomizes each delay by ±Jitter×delay; in [0, 1]. Zero means
	// 0.5; -1 means no jitter.
	Jitter float64
}

// Or returns b with its zero fields taken from def (a zero Multiplier or
// Jitter in both becomes 2 or 0.5).
func (b Backoff) Or(def Backoff) Backoff {
	if b.Initial == 0 {
		b.Initial = def.Initial
	}
	if b.Max == 0 {
		b.Max = max(def.Max, b.Initial)
	}
	if b.Multiplier == 0 {
		b.Multiplier = def.Multiplier
	}
	if b.Multiplier == 0 {
		b.Multiplier = 2
	}
	if b.Jitter == 0 {
		b.Jitter = def.Jitter
	}
	if b.Jitter == 0 {
		b.Jitter = 0.5
	}
	return b
}

// Validate reports the first invalid field, prefixed with name (the field
// that holds b, such as "rabbitmq: Config.Reconnect").
func (b Backoff) Validate(name string) error {
	switch {
	case b.Initial < 0:
		return fmt.Errorf("%s.Initial is %s: it must not be negative", name, b.Initial)
	case b.Max < 0:
		return fmt.Errorf("%s.Max is %s: it must not be negative", name, b.Max)
	case b.Max != 0 && b.Max < b.Initial:
		return fmt.Errorf("%s.Max (%s) is less than %s.Initial (%s)", name, b.Max, name, b.Initial)
	case b.Multiplier != 0 && b.Multiplier < 1:
		return fmt.Errorf("%s.Multiplier is %g: it must be at least 1", name, b.Multiplier)
	case b.Jitter != -1 && (b.Jitter < 0 || b.Jitter > 1):
		return fmt.Errorf("%s.Jitter is %g: it must be in [0, 1], or -1 for no jitter", name, b.Jitter)
	}
	return nil
}

// Delay returns the delay after the n-th failure (n < 1 counts as 1), with
// the jitter drawn at random. A zero Multiplier or Jitter means 2 or 0.5; a
// Max below Initial means Initial (call Or first for a place's defaults of
// Initial and Max). It is safe for concurrent use.
func (b Backoff) Delay(n int) time.Duration {
	b = b.Or(Backoff{})
	b.Multiplier = max(b.Multiplier, 1)
	d := float64(b.Initial)
	limit := max(float64(b.Max), d)
	for i := 1; i < n && d < limit; i++ {
		d *= b.Multiplier
	}
	d = min(d, limit)
	if b.Jitter > 0 {
		d *= 1 + b.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}
