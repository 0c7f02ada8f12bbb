package classify_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// fast is a policy with millisecond waits, for tests.
func fast() inboxkit.RetryPolicy {
	return inboxkit.RetryPolicy{
		InProcessRetries: 1000,
		InProcess:        inboxkit.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		InProcessMaxTime: time.Minute,
	}
}

// Do refuses an invalid policy without calling fn, naming the field.
func TestDoInvalidPolicy(t *testing.T) {
	t.Parallel()
	err := classify.Do(context.Background(), inboxkit.RetryPolicy{MaxAttempts: -3}, nil, func(context.Context) error {
		t.Error("fn called")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "RetryPolicy.MaxAttempts") {
		t.Errorf("Do with an invalid policy = %v, want an error naming RetryPolicy.MaxAttempts", err)
	}
}

// The zero policy retries nothing: the redelivery retries.
func TestDoZeroPolicyRunsOnce(t *testing.T) {
	t.Parallel()
	fn, n := count(classify.Retry(nil))
	_ = classify.Do(context.Background(), inboxkit.RetryPolicy{}, nil, fn)
	if n.Load() != 1 {
		t.Errorf("fn called %d times, want 1", n.Load())
	}
}

// count returns fn that returns errs[i] on call i (the last one repeatedly)
// and the call counter.
func count(errs ...error) (func(context.Context) error, *atomic.Int32) {
	var n atomic.Int32
	return func(context.Context) error {
		i := int(n.Add(1)) - 1
		return errs[min(i, len(errs)-1)]
	}, &n
}

func TestDoNotRetried(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"reject", classify.Reject("CUSTOMER_UNKNOWN", nil)},
		{"reject of a transient error", classify.Reject("CUSTOMER_UNKNOWN", syscall.ECONNREFUSED)},
		{"poison", classify.Poison(inboxkit.ReasonMalformedPayload, nil)},
		{"unknown", errors.New("boom")},
		{"canceled", context.Canceled},
		{"circuit open", &classify.Error{Decision: inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonCircuitOpen, NoAttempt: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fn, n := count(tt.err)
			if err := classify.Do(context.Background(), fast(), nil, fn); err != tt.err {
				t.Errorf("Do = %v, want the error unchanged", err)
			}
			if n.Load() != 1 {
				t.Errorf("fn called %d times, want 1", n.Load())
			}
		})
	}
}

func TestDoRetriesTransient(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"retry", classify.Retry(errors.New("flaky"))},
		{"retry after", classify.RetryAfter(time.Millisecond, nil)},
		{"detected driver error", syscall.ECONNRESET},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fn, n := count(tt.err, tt.err, nil)
			if err := classify.Do(context.Background(), fast(), nil, fn); err != nil {
				t.Errorf("Do = %v", err)
			}
			if n.Load() != 3 {
				t.Errorf("fn called %d times, want 3", n.Load())
			}
		})
	}
}

func TestDoMaxRetries(t *testing.T) {
	t.Parallel()
	want := classify.Retry(nil)
	p := fast()
	p.InProcessRetries = 2
	fn, n := count(want)
	if err := classify.Do(context.Background(), p, nil, fn); err != want {
		t.Errorf("Do = %v, want the last error", err)
	}
	if n.Load() != 3 {
		t.Errorf("fn called %d times, want 3 (1 + InProcessRetries)", n.Load())
	}
}

func TestDoStopsAtInProcessMaxTime(t *testing.T) {
	t.Parallel()
	p := fast()
	p.InProcessMaxTime = 100 * time.Millisecond
	want := classify.Retry(errors.New("still down"))
	fn, n := count(want)
	start := time.Now()
	err := classify.Do(context.Background(), p, nil, fn)
	elapsed := time.Since(start)
	if err != want {
		t.Errorf("Do = %v, want the last error", err)
	}
	if n.Load() < 2 {
		t.Errorf("fn called %d times, want retries", n.Load())
	}
	if elapsed > 2*time.Second {
		t.Errorf("Do took %s; InProcessMaxTime is 100ms", elapsed)
	}
}

func TestDoRetryAfterBeyondInProcessMaxTime(t *testing.T) {
	t.Parallel()
	p := fast()
	p.InProcessMaxTime = 50 * time.Millisecond
	want := classify.RetryAfter(time.Hour, nil)
	fn, n := count(want)
	start := time.Now()
	if err := classify.Do(context.Background(), p, nil, fn); err != want {
		t.Errorf("Do = %v", err)
	}
	if n.Load() != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("fn called %d times in %s; a RetryAfter past InProcessMaxTime must not wait", n.Load(), time.Since(start))
	}
}

func TestDoStopsOnCancel(t *testing.T) {
	t.Parallel()
	p := fast()
	p.InProcess = inboxkit.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := classify.Retry(errors.New("down"))
	var n atomic.Int32
	start := time.Now()
	err := classify.Do(ctx, p, nil, func(context.Context) error {
		if n.Add(1) == 3 {
			cancel()
		}
		return last
	})
	if time.Since(start) > 5*time.Second {
		t.Errorf("Do took %s after cancel", time.Since(start))
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, last) {
		t.Errorf("Do = %v, want the last error wrapped with context.Canceled", err)
	}
	if got := classify.Of(err).Reason; got != inboxkit.ReasonTransient {
		t.Errorf("Of(err).Reason = %q, want the last error's", got)
	}
	if n.Load() != 3 {
		t.Errorf("fn called %d times, want 3", n.Load())
	}
}

func TestDoDecide(t *testing.T) {
	t.Parallel()
	vendorBusy := errors.New("vendor: E4711 busy")
	decide := func(err error) inboxkit.Decision {
		if errors.Is(err, vendorBusy) {
			return inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonTransient}
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "PARTNER_GONE"}
		}
		return classify.Of(err)
	}
	fn, n := count(vendorBusy, nil)
	if err := classify.Do(context.Background(), fast(), decide, fn); err != nil || n.Load() != 2 {
		t.Errorf("override to transient: Do = %v after %d calls, want nil after 2", err, n.Load())
	}
	fn, n = count(syscall.ECONNREFUSED)
	if err := classify.Do(context.Background(), fast(), decide, fn); err != syscall.ECONNREFUSED || n.Load() != 1 {
		t.Errorf("override to business: Do = %v after %d calls, want the error after 1", err, n.Load())
	}
}
