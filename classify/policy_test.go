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

// fast is a Policy with millisecond intervals, for tests.
func fast() classify.Policy {
	return classify.Policy{
		InitialInterval: time.Millisecond,
		MaxInterval:     5 * time.Millisecond,
		MaxRetries:      1000,
		MaxElapsedTime:  time.Minute,
	}
}

func TestPolicyDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	var zero classify.Policy
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero Policy: %v", err)
	}
	d := zero.WithDefaults()
	if d.MaxAttempts != 5 || d.MaxRetries != 3 || d.InitialInterval != 100*time.Millisecond ||
		d.MaxInterval != 2*time.Second || d.MaxElapsedTime != 5*time.Second || d.Multiplier != 2 || d.RandomizationFactor != 0.5 {
		t.Errorf("defaults = %+v", d)
	}
	if got := (classify.Policy{MaxAttempts: 1}).WithDefaults().MaxAttempts; got != 1 {
		t.Errorf("MaxAttempts 1 became %d", got)
	}
	for _, tt := range []struct {
		p     classify.Policy
		field string
	}{
		{classify.Policy{MaxAttempts: -1}, "MaxAttempts"},
		{classify.Policy{MaxRetries: -2}, "MaxRetries"},
		{classify.Policy{InitialInterval: -1}, "InitialInterval"},
		{classify.Policy{MaxInterval: -1}, "MaxInterval"},
		{classify.Policy{MaxElapsedTime: -1}, "MaxElapsedTime"},
		{classify.Policy{Multiplier: 0.5}, "Multiplier"},
		{classify.Policy{RandomizationFactor: 1.5}, "RandomizationFactor"},
		{classify.Policy{RandomizationFactor: -0.5}, "RandomizationFactor"},
		{classify.Policy{InitialInterval: time.Minute}, "MaxInterval"},
	} {
		err := tt.p.Validate()
		if err == nil || !strings.Contains(err.Error(), "Policy."+tt.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.p, err, tt.field)
		}
	}
	for _, p := range []classify.Policy{{MaxRetries: -1}, {RandomizationFactor: -1}, {RandomizationFactor: 1}} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	// Do refuses an invalid policy without calling fn.
	err := classify.Policy{MaxAttempts: -3}.Do(context.Background(), func(context.Context) error {
		t.Error("fn called")
		return nil
	})
	if err == nil {
		t.Error("Do with invalid Policy = nil")
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

func TestPolicyDoNotRetried(t *testing.T) {
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
			if err := fast().Do(context.Background(), fn); err != tt.err {
				t.Errorf("Do = %v, want the error unchanged", err)
			}
			if n.Load() != 1 {
				t.Errorf("fn called %d times, want 1", n.Load())
			}
		})
	}
}

func TestPolicyDoRetriesTransient(t *testing.T) {
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
			if err := fast().Do(context.Background(), fn); err != nil {
				t.Errorf("Do = %v", err)
			}
			if n.Load() != 3 {
				t.Errorf("fn called %d times, want 3", n.Load())
			}
		})
	}
}

func TestPolicyDoMaxRetries(t *testing.T) {
	t.Parallel()
	want := classify.Retry(nil)
	p := fast()
	p.MaxRetries = 2
	fn, n := count(want)
	if err := p.Do(context.Background(), fn); err != want {
		t.Errorf("Do = %v, want the last error", err)
	}
	if n.Load() != 3 {
		t.Errorf("fn called %d times, want 3 (1 + MaxRetries)", n.Load())
	}

	p.MaxRetries = -1
	fn, n = count(want)
	_ = p.Do(context.Background(), fn)
	if n.Load() != 1 {
		t.Errorf("MaxRetries -1: fn called %d times, want 1", n.Load())
	}
}

func TestPolicyDoStopsAtMaxElapsedTime(t *testing.T) {
	t.Parallel()
	p := fast()
	p.MaxElapsedTime = 100 * time.Millisecond
	want := classify.Retry(errors.New("still down"))
	fn, n := count(want)
	start := time.Now()
	err := p.Do(context.Background(), fn)
	elapsed := time.Since(start)
	if err != want {
		t.Errorf("Do = %v, want the last error", err)
	}
	if n.Load() < 2 {
		t.Errorf("fn called %d times, want retries", n.Load())
	}
	if elapsed > 2*time.Second {
		t.Errorf("Do took %s; MaxElapsedTime is 100ms", elapsed)
	}
}

func TestPolicyDoRetryAfterBeyondMaxElapsedTime(t *testing.T) {
	t.Parallel()
	p := fast()
	p.MaxElapsedTime = 50 * time.Millisecond
	want := classify.RetryAfter(time.Hour, nil)
	fn, n := count(want)
	start := time.Now()
	if err := p.Do(context.Background(), fn); err != want {
		t.Errorf("Do = %v", err)
	}
	if n.Load() != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("fn called %d times in %s; a RetryAfter past MaxElapsedTime must not wait", n.Load(), time.Since(start))
	}
}

func TestPolicyDoStopsOnCancel(t *testing.T) {
	t.Parallel()
	p := fast()
	p.InitialInterval = 20 * time.Millisecond
	p.MaxInterval = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := classify.Retry(errors.New("down"))
	var n atomic.Int32
	start := time.Now()
	err := p.Do(ctx, func(context.Context) error {
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

func TestPolicyClassifyFunc(t *testing.T) {
	t.Parallel()
	vendorBusy := errors.New("vendor: E4711 busy")
	p := fast()
	p.ClassifyFunc = func(err error) inboxkit.Decision {
		if errors.Is(err, vendorBusy) {
			return inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonTransient}
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "PARTNER_GONE"}
		}
		return classify.Of(err)
	}
	fn, n := count(vendorBusy, nil)
	if err := p.Do(context.Background(), fn); err != nil || n.Load() != 2 {
		t.Errorf("override to transient: Do = %v after %d calls, want nil after 2", err, n.Load())
	}
	fn, n = count(syscall.ECONNREFUSED)
	if err := p.Do(context.Background(), fn); err != syscall.ECONNREFUSED || n.Load() != 1 {
		t.Errorf("override to business: Do = %v after %d calls, want the error after 1", err, n.Load())
	}
	if got := p.Decide(syscall.ECONNREFUSED); got.Class != inboxkit.ClassBusiness {
		t.Errorf("Decide = %+v", got)
	}
	if got := (classify.Policy{ClassifyFunc: func(error) inboxkit.Decision { return inboxkit.Decision{} }}).Decide(vendorBusy); got.Class != inboxkit.ClassTechnical {
		t.Errorf("zero Class from ClassifyFunc = %+v, want technical", got)
	}
	if got := p.Decide(nil); got != (inboxkit.Decision{}) {
		t.Errorf("Decide(nil) = %+v", got)
	}
}
