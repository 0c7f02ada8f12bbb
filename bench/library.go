package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
)

// op is one message's worth of work; it returns an error only for a
// failure that must stop the measurement.
type op func(ctx context.Context, worker int) error

// rate runs op in conc goroutines for d and returns operations per second.
func rate(ctx context.Context, conc int, d time.Duration, fn op) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	began := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				if err := fn(cctx, w); err != nil {
					if cctx.Err() != nil {
						return
					}
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(began).Seconds(), first
}

// namedOp is one contender of a section that measures ops.
type namedOp struct {
	name string
	op   op
	// rate, when set, measures the contender in place of op: at c
	// clients for -d, in messages per second (a pgbench cell).
	rate func(ctx context.Context, c int) (float64, error)
}

// interleaved measures every op at every goroutine count of -c, -d each,
// for -rounds interleaved rounds, logging each cell as section, and
// returns the median rate of an op at a goroutine count.
func interleaved(ctx context.Context, o options, section string, kinds []namedOp) (func(name string, c int) float64, error) {
	rates := map[string][]float64{}
	key := func(name string, c int) string { return fmt.Sprintf("%s/%d", name, c) }
	for round := 1; round <= o.rounds; round++ {
		for _, c := range o.concs {
			for _, k := range kinds {
				var r float64
				var err error
				if k.rate != nil {
					r, err = k.rate(ctx, c)
				} else {
					r, err = rate(ctx, c, o.dur, k.op)
				}
				if err != nil {
					return nil, fmt.Errorf("%s at %d goroutines: %w", k.name, c, err)
				}
				rates[key(k.name, c)] = append(rates[key(k.name, c)], r)
				fmt.Fprintf(o.log, "%s round %d c=%-3d %-20s %8.0f msgs/s\n", section, round, c, k.name, r)
			}
		}
	}
	return func(name string, c int) float64 { return median(rates[key(name, c)]) }, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rawNewSQL is what inboxkit writes for a processed message, done by hand.
const rawNewSQL = `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
VALUES ($1, 'bench', 'PROCESSED', $2, now(), now(), now(), 1, $3)`

// rawNew is the raw database/sql twin of a new message: BEGIN, the inbox
// row, one letter, COMMIT.
func rawNew(k dbKind, db *sql.DB) op {
	return rawKeyed(k, db, newID, func(id string) string { return id })
}

// rawKeyed is rawNew with the event id from key and the payload hash
// hash(id).
func rawKeyed(k dbKind, db *sql.DB, key func() string, hash func(id string) string) op {
	return func(ctx context.Context, _ int) error {
		id := key()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // no-op after Commit
		if _, err := tx.ExecContext(ctx, k.rawNew, id, "corr", hash(id)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, k.insertLetter, id, "I-1", "C-1"); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// rawMarked is the raw twin of a marked delivery, the same guarantee by
// hand: the attempt marker committed on its own (so that an attempt that
// dies in its handler is counted), then BEGIN, the claim of the marker's
// row, one letter, COMMIT.
func rawMarked(k dbKind, db *sql.DB) op {
	return func(ctx context.Context, _ int) error {
		id := newID()
		if _, err := db.ExecContext(ctx, k.rawMark, id, "corr", id); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // no-op after Commit
		r, err := tx.ExecContext(ctx, k.rawClaim, id)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("raw marked %s: the claim updated %d rows (%v), want 1", id, n, err)
		}
		if _, err := tx.ExecContext(ctx, k.insertLetter, id, "I-1", "C-1"); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// rawResendRead is the raw twin of a resend that, as inboxkit, tells a
// processed row (a duplicate) from one still to be retried: BEGIN, the
// inbox INSERT finds the row (PostgreSQL: nothing inserted; MariaDB: the
// duplicate key), the row's STATUS read in the transaction, ROLLBACK.
func rawResendRead(k dbKind, db *sql.DB, ids []string) op {
	return func(ctx context.Context, _ int) error {
		id := ids[mrand.IntN(len(ids))]
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // the point
		r, err := tx.ExecContext(ctx, k.rawResend, id, "corr", id)
		if err == nil {
			if n, nerr := r.RowsAffected(); nerr != nil || n != 0 {
				return fmt.Errorf("raw resend %s: inserted %d rows (%v), want none", id, n, nerr)
			}
		} else if !k.isDuplicate(err) {
			return fmt.Errorf("raw resend %s: %w", id, err)
		}
		var st string
		if err := tx.QueryRowContext(ctx, k.rawStatus, id).Scan(&st); err != nil {
			return fmt.Errorf("raw resend %s: read its status: %w", id, err)
		}
		if st != "PROCESSED" {
			return fmt.Errorf("raw resend %s: status %s, want PROCESSED", id, st)
		}
		return nil
	}
}

// rawDuplicate is the raw twin of a resend: BEGIN, the inbox INSERT fails
// on the primary key, ROLLBACK.
func rawDuplicate(k dbKind, db *sql.DB, ids []string) op {
	return func(ctx context.Context, w int) error {
		id := ids[mrand.IntN(len(ids))]
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // the point
		_, err = tx.ExecContext(ctx, k.rawNew, id, "corr", id)
		if k.isDuplicate(err) {
			return nil
		}
		return fmt.Errorf("raw duplicate %s: expected a duplicate key, got %v", id, err)
	}
}

func letterHandler(id string) inbox.Handler { return letterIn(insertLetter, id) }

// letterIn is letterHandler with the letter's INSERT of a dialect.
func letterIn(insert, id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insert, id, "I-1", "C-1")
		return err
	}
}

// processNew is Store.Process of a new message writing one letter, as a
// delivery the broker does not vouch is its first (the attempt marker is
// committed before the handler).
func processNew(s *inbox.Store) op { return processNewAs(s, insertLetter, false, false) }

// processFirst is processNew for a broker's first delivery
// (Entry.FirstDelivery, as the consumer runtime sets it from the adapters):
// no marker.
func processFirst(s *inbox.Store) op { return processNewAs(s, insertLetter, true, false) }

// processWith is Store.Process, or Store.ProcessInTx where inTx (the
// handler's effects declared in the transaction).
func processWith(s *inbox.Store, inTx bool) func(context.Context, inbox.Entry, inbox.Handler) (inbox.Result, error) {
	if inTx {
		return s.ProcessInTx
	}
	return s.Process
}

// processNewAs is processNew (first false) or processFirst writing the
// letter with insert; inTx: through Store.ProcessInTx.
func processNewAs(s *inbox.Store, insert string, first, inTx bool) op {
	process := processWith(s, inTx)
	return func(ctx context.Context, _ int) error {
		id := newID()
		res, err := process(ctx, inbox.Entry{EventID: id, ConsumerName: "bench", CorrelationID: "corr", PayloadHash: id, FirstDelivery: first}, letterIn(insert, id))
		if err != nil {
			return err
		}
		if res.Outcome != inboxkit.OutcomeProcessed {
			return fmt.Errorf("process %s: outcome %s, want processed", id, res.Outcome)
		}
		return nil
	}
}

// processDuplicate is Store.Process of a resend of a processed event: a
// producer's resend is a new broker message, so a first delivery; first
// false is a delivery no broker vouched for (IBM MQ's), the marked path;
// inTx: through Store.ProcessInTx.
func processDuplicate(s *inbox.Store, insert string, ids []string, first, inTx bool) op {
	process := processWith(s, inTx)
	return func(ctx context.Context, _ int) error {
		id := ids[mrand.IntN(len(ids))]
		res, err := process(ctx, inbox.Entry{EventID: id, ConsumerName: "bench", CorrelationID: "corr", PayloadHash: id, FirstDelivery: first}, letterIn(insert, id))
		if err != nil {
			return err
		}
		if res.Outcome != inboxkit.OutcomeDuplicate {
			return fmt.Errorf("process %s again: outcome %s, want duplicate", id, res.Outcome)
		}
		return nil
	}
}

// storeSchema opens schema name (see newSchema) with a migrated inbox and
// the letters table in it.
func storeSchema(ctx context.Context, admin *sql.DB, base, name string, conns int) (*schema, *inbox.Store, error) {
	sc, err := newSchema(ctx, admin, base, name, conns)
	if err != nil {
		return nil, nil, err
	}
	s, err := inbox.New(sc.Store, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
	if err == nil {
		err = s.Migrate(ctx)
	}
	if err == nil {
		_, err = sc.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+lettersDDL[len("CREATE TABLE "):])
	}
	if err != nil {
		sc.drop(admin) // the schema newSchema created goes too
		return nil, nil, err
	}
	return sc, s, nil
}

// generateRows inserts n terminal rows (PROCESSED, consumer "bench") with
// generate_series, ids md5(prefix || i) spread over the key space like
// real event ids, in chunks of a million, processed age ago.
func generateRows(ctx context.Context, db *sql.DB, prefix string, from, to int, age time.Duration, progress func(done int)) error {
	const chunk = 1_000_000
	for lo := from; lo <= to; lo += chunk {
		hi := min(lo+chunk-1, to)
		_, err := db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING
  (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
SELECT md5($1 || i), 'bench', 'PROCESSED', 'C-' || i, now() - $4 * interval '1 second', now() - $4 * interval '1 second', now() - $4 * interval '1 second', 1, md5('h' || i)
FROM generate_series($2::bigint, $3::bigint) AS i`, prefix, lo, hi, int64(age.Seconds()))
		if err != nil {
			return fmt.Errorf("generate rows %d..%d: %w", lo, hi, err)
		}
		if progress != nil {
			progress(hi - from + 1)
		}
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
