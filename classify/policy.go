package classify

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

// Do calls fn and retries it in process while it fails transiently, as p
// says: at most p.InProcessRetries retries, waiting p.InProcess.Delay(n)
// (or a longer [RetryAfter] hint) before the n-th, and none that would start
// after p.InProcessMaxTime. p is the one retry policy of the toolkit
// ([inboxkit.RetryPolicy], set on the inbox store); its zero fields mean the
// defaults documented there, so with the zero policy fn runs once.
//
// decide classifies fn's errors (the store's ClassifyFunc); nil means [Of].
// A zero Class from decide counts as technical.
//
//   - A business rejection or poison is returned at once, never retried.
//   - An unknown technical error (and a constraint violation) is returned at
//     once too: the message's redelivery retries it, counted against
//     MaxAttempts, so a bug does not run its side effects many times per
//     delivery.
//   - A NoAttempt error (open circuit breaker) is returned at once.
//   - A technical error whose reason is transient ([IsTransientReason]) is
//     retried; when the retries are used up, the last error is returned
//     unchanged.
//   - When ctx is done while waiting, Do returns the last error wrapped
//     together with ctx.Err(): errors.Is(err, context.Canceled) holds, and
//     [Of] still reads the last error's decision.
//
// fn receives ctx unchanged. An invalid policy returns the Validate error
// without calling fn.
func Do(ctx context.Context, p inboxkit.RetryPolicy, decide func(error) inboxkit.Decision, fn func(ctx context.Context) error) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("classify: %w", err)
	}
	p = p.WithDefaults()
	if decide == nil {
		decide = Of
	}
	start := time.Now()
	for retry := 1; ; retry++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		d := decide(err)
		if d.Class == "" {
			d.Class = inboxkit.ClassTechnical
		}
		if !transientDecision(d) || retry > p.InProcessRetries {
			return err
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return stopped(err, ctxErr)
		}
		wait := max(p.InProcess.Delay(retry), d.RetryAfter)
		if time.Since(start)+wait > p.InProcessMaxTime {
			return err
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
