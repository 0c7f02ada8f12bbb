package inbox_test

import (
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
)

// CheckSpread fails unless the delays lie within base ± JitterFactor and
// are spread over that interval: no lockstep after an outage (issue 11,
// item 4). It computes delays; nothing is timed.
func checkSpread(t *testing.T, what string, base time.Duration, delay func() time.Duration) {
	t.Helper()
	const n = 2000
	lo, hi := time.Duration(float64(base)*(1-inbox.JitterFactor)), time.Duration(float64(base)*(1+inbox.JitterFactor))
	distinct := map[time.Duration]bool{}
	var buckets [10]int // tenths of [lo, hi]
	for range n {
		d := delay()
		if d < lo || d > hi {
			t.Fatalf("%s: delay %s outside [%s, %s]", what, d, lo, hi)
		}
		distinct[d] = true
		b := int(float64(d-lo) / float64(hi-lo) * 10)
		buckets[min(b, 9)]++
	}
	if len(distinct) < n*9/10 {
		t.Errorf("%s: only %d distinct delays of %d: retries would come in lockstep", what, len(distinct), n)
	}
	for i, c := range buckets {
		if c < n/20 { // uniform gives n/10 per tenth
			t.Errorf("%s: tenth %d of [%s, %s] holds %d of %d delays, want about %d: %v", what, i, lo, hi, c, n, n/10, buckets)
		}
	}
	t.Logf("%s: %d delays in [%s, %s], %d distinct, per tenth %v", what, n, lo, hi, len(distinct), buckets)
}

func TestDefaultBackoffJitter(t *testing.T) {
	checkSpread(t, "DefaultBackoff(3)", 4*time.Second, func() time.Duration { return inbox.DefaultBackoff(3) })
	checkSpread(t, "DefaultBackoff(50)", 5*time.Minute, func() time.Duration { return inbox.DefaultBackoff(50) })
}
