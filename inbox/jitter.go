package inbox

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// JitterFactor is the randomization of the default retry delays
// (DefaultBackoff here, consumer.DefaultRequeueDelay for broker
// redeliveries): a delay d is drawn uniformly from [d×(1−JitterFactor),
// d×(1+JitterFactor)], so that messages that failed together (an outage)
// do not all come back at the same moment.
const JitterFactor = 0.5

// Jitter returns d randomized by JitterFactor, with the randomization of
// github.com/cenkalti/backoff/v4. It is safe for concurrent use; d <= 0 is
// returned as is.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval: d, RandomizationFactor: JitterFactor, Multiplier: 1, MaxInterval: d,
		Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	b.Reset()
	return b.NextBackOff()
}
