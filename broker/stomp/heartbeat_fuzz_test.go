package stomp

import (
	"testing"
	"time"
)

// FuzzParseHeartBeat: any CONNECTED heart-beat header gives intervals from
// 0 to a day, so that three intervals (the read deadline) never overflow.
func FuzzParseHeartBeat(f *testing.F) {
	for _, s := range []string{"0,0", "10000,10000", " 5 , 7 ", "4000000000000,9223372036854775807", "-1,0", "1,", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sx, sy, ok := parseHeartBeat(v)
		if !ok {
			if sx != 0 || sy != 0 {
				t.Fatalf("%q: not ok but %s/%s", v, sx, sy)
			}
			return
		}
		for _, d := range []time.Duration{sx, sy} {
			if d < 0 || d > 24*time.Hour || 3*d < 0 {
				t.Fatalf("%q: interval %s", v, d)
			}
		}
	})
}
