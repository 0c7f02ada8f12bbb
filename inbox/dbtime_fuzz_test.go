package inbox

import (
	"testing"
	"time"
)

// FuzzDBTimeScan: a timestamp text from any driver either parses to a UTC
// time or is refused with an error; it never panics.
func FuzzDBTimeScan(f *testing.F) {
	for _, s := range []string{"2026-01-05 10:11:12.123456789", "2026-01-05T10:11:12+02:00", "2026-01-05 10:11:12", "", "x", "9999-99-99 99:99:99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d dbTime
		err := d.Scan(s)
		if err == nil && (!d.Valid || d.Time.Location() != time.UTC) {
			t.Fatalf("%q: scanned to %v (valid %v)", s, d.Time, d.Valid)
		}
		var b dbTime
		if berr := b.Scan([]byte(s)); (berr == nil) != (err == nil) || !b.Time.Equal(d.Time) {
			t.Fatalf("%q: string and []byte scan differ: %v / %v", s, err, berr)
		}
	})
}
