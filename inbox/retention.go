package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrWindowTooShort is returned by Purge for a window shorter than the
// configured redelivery horizon.
var ErrWindowTooShort = errors.New("inbox: retention window shorter than the redelivery horizon")

// PurgeOptions bound one retention run.
type PurgeOptions struct {
	// OlderThan is the retention window: terminal rows whose terminal time
	// (PROCESSED_AT) is older than now-OlderThan are deleted. Required; must
	// be at least Config.RedeliveryHorizon.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction. Defaults to 1000.
	BatchSize int
	// MaxBatches stops the run after this many batches (0: until done).
	MaxBatches int
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
}

// Purge deletes terminal rows (PROCESSED, REJECTED, DEAD_LETTERED) whose
// terminal time is older than the window, in bounded batches, each in its
// own short transaction. TECHNICAL_FAILURE rows, and the store-then-process
// variant's RECEIVED and IN_PROGRESS rows, are never deleted: the message is
// still expected.
//
// A window shorter than Config.RedeliveryHorizon is refused with
// ErrWindowTooShort: a row deleted while the broker may still redeliver its
// event lets the duplicate be processed a second time.
func (s *Store) Purge(ctx context.Context, opt PurgeOptions) (int64, error) {
	if opt.OlderThan <= 0 {
		return 0, fmt.Errorf("inbox: Purge: OlderThan must be positive (got %s)", opt.OlderThan)
	}
	if opt.OlderThan < s.cfg.RedeliveryHorizon {
		return 0, fmt.Errorf("%w: window %s < horizon %s; choose a window of at least %s, or lower Config.RedeliveryHorizon if your brokers really cannot redeliver that late",
			ErrWindowTooShort, opt.OlderThan, s.cfg.RedeliveryHorizon, s.cfg.RedeliveryHorizon)
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 1000
	}
	cutoff := s.t(s.now().Add(-opt.OlderThan))
	if opt.DryRun {
		var n int64
		if err := s.db.QueryRowContext(ctx, s.q.countPurgeable, cutoff).Scan(&n); err != nil {
			return 0, fmt.Errorf("inbox: purge (dry run): %w", err)
		}
		return n, nil
	}
	var total int64
	for batch := 0; opt.MaxBatches == 0 || batch < opt.MaxBatches; batch++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := s.db.ExecContext(ctx, s.q.purgeBatch, cutoff, opt.BatchSize)
		if err != nil {
			return total, fmt.Errorf("inbox: purge batch %d: %w", batch+1, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: purge batch %d: %w", batch+1, err)
		}
		total += n
		if n < int64(opt.BatchSize) {
			break
		}
	}
	return total, nil
}
