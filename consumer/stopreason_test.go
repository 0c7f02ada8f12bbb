package consumer

import (
	"strings"
	"testing"
)

// A job stops at N events failed again, or at more than P percent of the
// events replayed once it replayed the minimum sample; the reason names
// the figures.
func TestStopReason(t *testing.T) {
	for _, tc := range []struct {
		failed, replayed int64
		n                int
		pct              float64
		want             string // "" to go on
	}{
		{2, 10, 3, 0, ""},
		{3, 10, 3, 0, "3 of the 10 events replayed failed again (--stop-after-failures 3)"},
		{19, 19, 0, 10, ""}, // under the sample: not judged
		{2, 20, 0, 10, ""},  // 10 %: not more than 10 %
		{3, 20, 0, 10, "3 of the 20 events replayed failed again: 15.0%, more than 10% (--stop-after-failures 10%, judged after 20 events)"},
		{0, 0, 0, 0, ""},
	} {
		got := stopReason(tc.failed, tc.replayed, tc.n, tc.pct, DefaultStopMinSample)
		if got != tc.want {
			t.Errorf("stopReason(%d of %d, n %d, %g%%) = %q, want %q", tc.failed, tc.replayed, tc.n, tc.pct, got, tc.want)
		}
	}
	if got := stopReason(5, 5, 0, 50, 5); !strings.Contains(got, "judged after 5 events") {
		t.Errorf("a sample of 5: %q", got)
	}
}
