package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrWindowTooShort is returned by Purge for a window shorter than the
// configured redelivery horizon.
var ErrWindowTooShort = errors.New("inbox: retention window shorter than the redelivery horizon")

// PurgeOptions bound one retention run.
type PurgeOptions struct {
	// OlderThan is the retention window: terminal rows whose terminal time
	// (PROCESSED_AT; CREATED_AT for a row without one, as a legacy consumer
	// may have left) is older than now-OlderThan are deleted. Required;
	// must be at least Config.RedeliveryHorizon.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction. Defaults to 1000.
	BatchSize int
	// MaxBatches stops the run after this many batches (0: until done).
	MaxBatches int
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// MaxRowsPerSecond caps the rate of deletion, so that a purge running
	// beside live consumers leaves them their throughput: after a batch of
	// n rows that took t, Purge waits n/MaxRowsPerSecond - t before the
	// next. 0 means DefaultPurgeMaxRowsPerSecond; negative: no cap, batch
	// after batch (a maintenance window).
	MaxRowsPerSecond int
}

// DefaultPurgeMaxRowsPerSecond is PurgeOptions.MaxRowsPerSecond when it is
// left 0. Why a cap: deleting a row writes its share of a full page image
// to the write-ahead log, and the consumers' commits wait for that log, so
// what a purge takes from them follows its rate. The figure comes from the
// bench module's purge section (docs/decisions.md, bench/README.md).
const DefaultPurgeMaxRowsPerSecond = 150_000

// Purge deletes terminal rows (PROCESSED, REJECTED, DEAD_LETTERED) whose
// terminal time (PROCESSED_AT, or CREATED_AT where it is NULL) is older
// than the window, in bounded batches, each in its own short transaction.
// TECHNICAL_FAILURE rows, and the store-then-process variant's RECEIVED and
// IN_PROGRESS rows, are never deleted: the message is still expected.
//
// A window shorter than Config.RedeliveryHorizon is refused with
// ErrWindowTooShort: a row deleted while the broker may still redeliver its
// event lets the duplicate be processed a second time.
//
// A run that deleted rows is recorded in INBOXKIT_HISTORY (PurgeRuns:
// when, the cutoff, the window, the horizon, the rows), also when it is
// interrupted, so that a duplicate it made possible can be tied to it
// (inboxctl check, purged-then-redelivered).
func (s *Store) Purge(ctx context.Context, opt PurgeOptions) (total int64, err error) {
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
	if opt.MaxRowsPerSecond == 0 {
		opt.MaxRowsPerSecond = DefaultPurgeMaxRowsPerSecond
	}
	now := s.now()
	run := PurgeRun{At: now, Cutoff: now.Add(-opt.OlderThan), Window: opt.OlderThan, Horizon: s.cfg.RedeliveryHorizon}
	cutoff := s.t(run.Cutoff)
	if opt.DryRun {
		var n int64
		if err := s.db.QueryRowContext(ctx, s.q.countPurgeable, cutoff, cutoff).Scan(&n); err != nil {
			return 0, fmt.Errorf("inbox: purge (dry run): %w", err)
		}
		return n, nil
	}
	defer func() {
		if total == 0 {
			return
		}
		run.Rows = total
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := s.recordPurge(rctx, run); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%w (the %d deleted rows are gone)", rerr, total))
		}
	}()
	tried, err := s.d.TableExists(ctx, s.db, AttemptTable) // its rows go with the batch's
	if err != nil {
		return 0, fmt.Errorf("inbox: purge: %w", err)
	}
	var took time.Duration // the last batch's
	var n int64            // the last batch's rows
	for batch := 0; opt.MaxBatches == 0 || batch < opt.MaxBatches; batch++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if batch > 0 {
			if err := s.pause(ctx, purgePause(took, n, opt.MaxRowsPerSecond)); err != nil {
				return total, err
			}
		}
		began := time.Now()
		n, err = s.purgeBatch(ctx, cutoff, opt.BatchSize, tried)
		took = time.Since(began)
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

// purgeDue is true for a terminal row finished before the cutoff (bound
// twice): by PROCESSED_AT, or by CREATED_AT where PROCESSED_AT is NULL (a
// legacy consumer's PROCESSED row may have none). The first test keeps
// the (STATUS, PROCESSED_AT) index usable.
const purgeDue = `(PROCESSED_AT < ? OR (PROCESSED_AT IS NULL AND CREATED_AT < ?))`

// purgePause is the wait after a batch of rows rows that took took, so
// that the batch and the wait take rows/maxRate seconds together; no wait
// without a cap (maxRate < 0).
func purgePause(took time.Duration, rows int64, maxRate int) time.Duration {
	if maxRate <= 0 {
		return 0
	}
	return max(0, time.Duration(float64(rows)/float64(maxRate)*float64(time.Second))-took)
}

// pause waits d, or until ctx is done.
func (s *Store) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if s.purgeWait != nil {
		return s.purgeWait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pgPurgeBatch is PostgreSQL's purge batch. PostgreSQL has no DELETE ...
// LIMIT, so a subquery picks the rows by ctid: a sequential scan that stops
// after ?3 matches (synchronized scans start it near where the previous
// batch stopped, on a table larger than a quarter of shared_buffers), then
// one TID scan of the sorted array; "ctid IN (subquery)" hashed the ctids
// and fetched them one by one, and took about twice the time (psql, one
// million rows in batches of 1000). A row updated meanwhile (a replay) has
// a new ctid and is not deleted.
//
// The batch commits with synchronous_commit off for its own implicit
// transaction (set_config(..., true), as the attempt marker does), so it
// does not wait for its WAL flush. Why that is safe: a crash of the server
// before the flush brings back rows that were due for deletion anyway, and
// the next purge deletes them; nothing that is still needed can be lost.
const pgPurgeBatch = `WITH sync AS (SELECT set_config('synchronous_commit', 'off', true)) ` +
	`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s, sync WHERE STATUS IN (%[2]s) AND %[3]s LIMIT ?))`

// pgPurgeTried is pgPurgeBatch that also deletes the attempt rows
// (AttemptTable) of the rows it deletes, by their keys, and returns how
// many inbox rows it deleted: a data-modifying WITH runs whether or not
// the query reads it.
const pgPurgeTried = `WITH sync AS (SELECT set_config('synchronous_commit', 'off', true)), ` +
	`gone AS (DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s, sync WHERE STATUS IN (%[2]s) AND %[3]s LIMIT ?)) RETURNING EVENT_ID, CONSUMER_NAME), ` +
	`tried AS (DELETE FROM ` + AttemptTable + ` a USING gone g WHERE a.TABLE_NAME = %[4]s AND a.EVENT_ID = g.EVENT_ID AND a.CONSUMER_NAME = g.CONSUMER_NAME) ` +
	`SELECT count(*) FROM gone`

// purgeBatch deletes one batch of at most n due rows, and where
// AttemptTable exists (tried) their attempt rows with them, in one
// transaction; it returns the inbox rows deleted.
func (s *Store) purgeBatch(ctx context.Context, cutoff any, n int, tried bool) (int64, error) {
	switch {
	case !tried:
		res, err := s.db.ExecContext(ctx, s.q.purgeBatch, cutoff, cutoff, n)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	case s.q.purgeTried != "":
		var k int64
		err := s.db.QueryRowContext(ctx, s.q.purgeTried, cutoff, cutoff, n).Scan(&k)
		return k, err
	}
	var total int64
	err := func() error {
		tx, err := s.begin(ctx, "purge", s.d.lockingTx)
		if err != nil {
			return err
		}
		defer tx.rollback()
		keys, err := s.purgeKeys(ctx, tx, cutoff, n)
		if err != nil {
			return err
		}
		for consumer, ids := range keys {
			for len(ids) > 0 {
				chunk := ids[:min(len(ids), 500)]
				ids = ids[len(chunk):]
				in := strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")
				params := []any{consumer}
				for _, id := range chunk {
					params = append(params, id)
				}
				if _, err := tx.ExecContext(ctx, s.d.Rebind(`DELETE FROM `+AttemptTable+` WHERE TABLE_NAME = `+sqlString(s.cfg.Table)+` AND CONSUMER_NAME = ? AND EVENT_ID IN (`+in+`)`), params...); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, s.d.Rebind(`DELETE FROM `+s.cfg.Table+` WHERE CONSUMER_NAME = ? AND EVENT_ID IN (`+in+`)`), params...)
				if err != nil {
					return err
				}
				k, err := res.RowsAffected()
				if err != nil {
					return err
				}
				total += k
			}
		}
		return tx.commit()
	}()
	return total, err
}

// purgeKeys returns the event ids of at most n due rows, by consumer,
// locked in tx (purgeKeys).
func (s *Store) purgeKeys(ctx context.Context, tx *txn, cutoff any, n int) (map[string][]string, error) {
	rows, err := tx.QueryContext(ctx, s.q.purgeKeys, cutoff, cutoff, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := map[string][]string{}
	for rows.Next() {
		var id, consumer string
		if err := rows.Scan(&id, &consumer); err != nil {
			return nil, err
		}
		keys[consumer] = append(keys[consumer], id)
	}
	return keys, rows.Err()
}
