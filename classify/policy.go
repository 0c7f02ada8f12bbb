package classify

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/inboxkit/inboxkit"
)

// Default values of [Policy].
const (
	DefaultMaxAttempts         = 5
	DefaultMaxRetries          = 3
	DefaultInitialInterval     = 100 * time.Millisecond
	DefaultMaxInterval         = 2 * time.Second
	DefaultMaxElapsedTime      = 5 * time.Second
	DefaultMultiplier          = 2.0
	DefaultRandomizationFactor = 0.5
)

// Policy decides what happens to a failed message and retries transient
// failures in process. The zero Policy is ready to use: a zero field means
// its default. Call [Policy.Validate] when the configuration is loaded; [Policy.Do]
// refuses to run with an invalid Policy.
//
// A Policy is a value; it is safe to use from many goroutines.
type Policy struct {
	// MaxAttempts is the backout threshold: after this many recorded
	// technical failures the message is dead-lettered with reason
	// MAX_ATTEMPTS_EXCEEDED. Attempts marked NoAttempt (an open circuit
	// breaker) are not counted. Defaults to 5.
	//
	// There is no "unlimited": zero means the default, never IBM MQ's
	// BOTHRESH(0) (no threshold, an endless redelivery loop), and a negative
	// value is refused by Validate.
	MaxAttempts int

	// MaxRetries is the number of in-process retries of a transient failure
	// after the first call, within one delivery. Defaults to 3. Set it to -1
	// to disable in-process retries (fn runs once; redelivery does the rest).
	MaxRetries int

	// InitialInterval is the first wait between in-process retries.
	// Defaults to 100ms.
	InitialInterval time.Duration

	// MaxInterval caps the wait between in-process retries. Defaults to 2s.
	MaxInterval time.Duration

	// MaxElapsedTime bounds the in-process retries of one call: no retry
	// starts after it. Keep it well below the broker's acknowledgement
	// timeout and the handler's transaction timeout. Defaults to 5s.
	MaxElapsedTime time.Duration

	// Multiplier grows the wait after each retry (exponential backoff); it
	// must be at least 1. Defaults to 2.
	Multiplier float64

	// RandomizationFactor is the jitter: each wait is drawn from
	// [wait*(1-f), wait*(1+f)]. It must be in [0, 1]. Defaults to 0.5; set it
	// to -1 for no jitter.
	RandomizationFactor float64

	// ClassifyFunc, when set, decides instead of [Of]; it may call Of and
	// adjust the result (treat a vendor's error code as a business rejection,
	// say). A decision is retried in process when it is technical, without
	// NoAttempt, and its reason is a transient code (see [IsTransientReason]).
	// A zero Class counts as technical. Defaults to nil (Of decides).
	ClassifyFunc func(error) inboxkit.Decision
}

// Validate reports the first invalid field, by name. Zero values are valid:
// they mean the default.
func (p Policy) Validate() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("classify: Policy.MaxAttempts is %d; must be at least 1 (zero means the default, %d)", p.MaxAttempts, DefaultMaxAttempts)
	case p.MaxRetries < -1:
		return fmt.Errorf("classify: Policy.MaxRetries is %d; must be -1 (no retries), 0 (default) or positive", p.MaxRetries)
	case p.InitialInterval < 0:
		return fmt.Errorf("classify: Policy.InitialInterval is %s; must not be negative", p.InitialInterval)
	case p.MaxInterval < 0:
		return fmt.Errorf("classify: Policy.MaxInterval is %s; must not be negative", p.MaxInterval)
	case p.MaxElapsedTime < 0:
		return fmt.Errorf("classify: Policy.MaxElapsedTime is %s; must not be negative", p.MaxElapsedTime)
	case p.Multiplier != 0 && p.Multiplier < 1:
		return fmt.Errorf("classify: Policy.Multiplier is %g; must be at least 1", p.Multiplier)
	case p.RandomizationFactor != -1 && (p.RandomizationFactor < 0 || p.RandomizationFactor > 1):
		return fmt.Errorf("classify: Policy.RandomizationFactor is %g; must be in [0, 1], or -1 for no jitter", p.RandomizationFactor)
	}
	q := p.WithDefaults()
	if q.MaxInterval < q.InitialInterval {
		return fmt.Errorf("classify: Policy.MaxInterval (%s) is less than Policy.InitialInterval (%s)", q.MaxInterval, q.InitialInterval)
	}
	return nil
}

// WithDefaults returns p with every zero field set to its default, so that
// p.WithDefaults().MaxAttempts is the backout threshold in effect.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	if p.MaxElapsedTime == 0 {
		p.MaxElapsedTime = DefaultMaxElapsedTime
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.RandomizationFactor == 0 {
		p.RandomizationFactor = DefaultRandomizationFactor
	}
	return p
}

// Decide returns the decision for err: ClassifyFunc's when set, else [Of]'s.
// A zero Class from ClassifyFunc becomes technical. Decide(nil) is the zero
// Decision. It can be used as the inbox's ClassifyFunc.
func (p Policy) Decide(err error) inboxkit.Decision {
	if err == nil {
		return inboxkit.Decision{}
	}
	if p.ClassifyFunc == nil {
		return Of(err)
	}
	d := p.ClassifyFunc(err)
	if d.Class == "" {
		d.Class = inboxkit.ClassTechnical
	}
	return d
}

// Do calls fn and retries it in process while it fails transiently (see
// [Policy.Decide] and [IsTransient]), with exponential backoff and jitter
// from github.com/cenkalti/backoff/v4, honouring a [RetryAfter] hint.
//
//   - A business rejection or poison is returned at once, never retried.
//   - An unknown technical error (and a constraint violation) is returned at
//     once too: the message's redelivery retries it, counted against
//     MaxAttempts, so a bug does not run its side effects many times per
//     delivery.
//   - A NoAttempt error (open circuit breaker) is returned at once.
//   - Retries stop after MaxRetries retries or when the next one would start
//     after MaxElapsedTime; the last error is returned unchanged.
//   - When ctx is done while waiting, Do returns the last error wrapped together
//     with ctx.Err(): errors.Is(err, context.Canceled) holds, and [Of] still
//     reads the last error's decision.
//
// fn receives ctx unchanged. An invalid Policy returns the Validate error
// without calling fn.
func (p Policy) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := p.Validate(); err != nil {
		return err
	}
	p = p.WithDefaults()
	var b backoff.BackOff = &backoff.StopBackOff{}
	if p.MaxRetries > 0 {
		eb := backoff.NewExponentialBackOff()
		eb.InitialInterval = p.InitialInterval
		eb.MaxInterval = p.MaxInterval
		eb.MaxElapsedTime = p.MaxElapsedTime
		eb.Multiplier = p.Multiplier
		eb.RandomizationFactor = max(p.RandomizationFactor, 0)
		b = backoff.WithContext(backoff.WithMaxRetries(eb, uint64(p.MaxRetries)), ctx)
	}
	b.Reset()
	start := time.Now()
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		d := p.Decide(err)
		if !transientDecision(d) {
			return err
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return stopped(err, ctxErr)
			}
			return err
		}
		if d.RetryAfter > wait {
			wait = d.RetryAfter
			if time.Since(start)+wait > p.MaxElapsedTime {
				return err
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return stopped(err, ctx.Err())
		case <-t.C:
		}
	}
}

// stopped wraps the last error of fn together with the context's error.
func stopped(err, ctxErr error) error {
	return fmt.Errorf("%w (retries stopped: %w)", err, ctxErr)
}
