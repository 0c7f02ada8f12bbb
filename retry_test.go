package inboxkit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
)

func TestRetryPolicyDefaults(t *testing.T) {
	var zero inboxkit.RetryPolicy
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero RetryPolicy: %v", err)
	}
	d := zero.WithDefaults()
	want := inboxkit.RetryPolicy{
		MaxAttempts:      5,
		Redelivery:       inboxkit.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.5},
		InProcessRetries: 0,
		InProcess:        inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 0.5},
		InProcessMaxTime: 5 * time.Second,
	}
	if d != want {
		t.Errorf("defaults = %+v\nwant       %+v", d, want)
	}
	if got := (inboxkit.RetryPolicy{MaxAttempts: 1}).WithDefaults().MaxAttempts; got != 1 {
		t.Errorf("MaxAttempts 1 became %d", got)
	}
	// An Initial above the default Max raises Max instead of failing.
	if got := (inboxkit.Backoff{Initial: 2 * time.Minute}).Or(inboxkit.DefaultRedelivery); got.Max != 2*time.Minute {
		t.Errorf("Initial 2m: Max %s, want 2m", got.Max)
	}
}

func TestRetryPolicyValidateNamesTheField(t *testing.T) {
	for _, tt := range []struct {
		p     inboxkit.RetryPolicy
		field string
	}{
		{inboxkit.RetryPolicy{MaxAttempts: -1}, "RetryPolicy.MaxAttempts"},
		{inboxkit.RetryPolicy{InProcessRetries: -1}, "RetryPolicy.InProcessRetries"},
		{inboxkit.RetryPolicy{InProcessMaxTime: -1}, "RetryPolicy.InProcessMaxTime"},
		{inboxkit.RetryPolicy{Redelivery: inboxkit.Backoff{Initial: -1}}, "RetryPolicy.Redelivery.Initial"},
		{inboxkit.RetryPolicy{Redelivery: inboxkit.Backoff{Initial: time.Minute, Max: time.Second}}, "RetryPolicy.Redelivery.Max"},
		{inboxkit.RetryPolicy{InProcess: inboxkit.Backoff{Multiplier: 0.5}}, "RetryPolicy.InProcess.Multiplier"},
		{inboxkit.RetryPolicy{InProcess: inboxkit.Backoff{Jitter: 1.5}}, "RetryPolicy.InProcess.Jitter"},
		{inboxkit.RetryPolicy{InProcess: inboxkit.Backoff{Jitter: -0.5}}, "RetryPolicy.InProcess.Jitter"},
	} {
		if err := tt.p.Validate(); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.p, err, tt.field)
		}
	}
	for _, p := range []inboxkit.RetryPolicy{{Redelivery: inboxkit.Backoff{Jitter: -1}}, {InProcess: inboxkit.Backoff{Jitter: 1}}, {InProcessRetries: 3}} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := inboxkit.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -1}
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 6: 32 * time.Second, 7: time.Minute, 500: time.Minute} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	if got := (inboxkit.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 3, Jitter: -1}).Delay(5); got != time.Second {
		t.Errorf("capped at Initial: %s", got)
	}
}

// Redelivery delays are randomized, so messages handed back together (an
// outage) come back spread out, not in lockstep: every delay lies within
// d ± 50% and the delays cover that interval. It computes delays; nothing is
// timed.
func TestRedeliveryDelayJitter(t *testing.T) {
	var p inboxkit.RetryPolicy
	for _, tc := range []struct {
		attempts int
		base     time.Duration
	}{{1, time.Second}, {3, 4 * time.Second}, {20, time.Minute}} {
		const n = 2000
		lo, hi := tc.base/2, tc.base*3/2
		distinct := map[time.Duration]bool{}
		var buckets [10]int // tenths of [lo, hi]
		for range n {
			d := p.RedeliveryDelay(tc.attempts)
			if d < lo || d > hi {
				t.Fatalf("RedeliveryDelay(%d) = %s, outside [%s, %s]", tc.attempts, d, lo, hi)
			}
			distinct[d] = true
			buckets[min(int(float64(d-lo)/float64(hi-lo)*10), 9)]++
		}
		if len(distinct) < n*9/10 {
			t.Errorf("RedeliveryDelay(%d): only %d distinct delays of %d: retries would come in lockstep", tc.attempts, len(distinct), n)
		}
		for i, c := range buckets {
			if c < n/20 { // uniform gives n/10 per tenth
				t.Errorf("RedeliveryDelay(%d): tenth %d of [%s, %s] holds %d of %d delays, want about %d: %v", tc.attempts, i, lo, hi, c, n, n/10, buckets)
			}
		}
	}
}
