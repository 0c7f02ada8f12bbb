package inbox

import (
	"context"
	"time"
)

// SetPurgeWait replaces the timer Purge waits on between batches, so that a
// test sees the pauses without waiting them out.
func SetPurgeWait(s *Store, wait func(ctx context.Context, d time.Duration) error) {
	s.purgeWait = wait
}

// PurgePause is purgePause, the pause after a batch.
var PurgePause = purgePause
