package inboxkit_test

import (
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

// The delay after each failure: doubling from Initial up to Max. Jitter -1
// turns the randomness off, so the figures are exact; with jitter (the
// default, ±50%) each delay is drawn around them.
func ExampleBackoff_Delay() {
	b := inboxkit.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -1}
	for n := 1; n <= 8; n++ {
		fmt.Printf("failure %d: %s\n", n, b.Delay(n))
	}

	// The default redelivery backoff: 1s doubling up to 1 minute, ±50%.
	d := inboxkit.DefaultRedelivery.Delay(3) // around 4s
	fmt.Println("third failure, with jitter, within 2s..6s:", d >= 2*time.Second && d <= 6*time.Second)
	// Output:
	// failure 1: 1s
	// failure 2: 2s
	// failure 3: 4s
	// failure 4: 8s
	// failure 5: 16s
	// failure 6: 32s
	// failure 7: 1m0s
	// failure 8: 1m0s
	// third failure, with jitter, within 2s..6s: true
}
