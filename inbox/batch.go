package inbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// BatchItem is one delivery of a batch.
type BatchItem struct {
	Entry   Entry
	Handler Handler
	// Context, if set, is the item's context for its handler and for the
	// dead letter or rejection the store publishes for it (a Store
	// WithPorts); nil: ProcessBatch's.
	Context context.Context
	// EffectsInTx declares that Handler's effects are all in the
	// transaction it is given: every write goes through tx, it calls no
	// other service and sends nothing (what must leave after the commit
	// goes through an outbox, outbox.Store.Add), so running it again
	// after a rollback leaves what one run leaves. A batch whose handlers
	// that run all declare it runs them without a savepoint each (see
	// ProcessBatch, "Without savepoints"). The store never guesses it:
	// false keeps the item behind its savepoint.
	EffectsInTx bool
}

// ProcessBatch runs up to len(items) deliveries in one database transaction
// and records what happened to each, as Process does for one: results[i] is
// what Process would have returned for items[i] (the same row writes, the
// same Result), decided by the same decision table.
//
// A batch of first deliveries only (Entry.FirstDelivery; see Process) has
// no markers to commit where the dialect inserts many rows in one
// statement (PostgreSQL, MySQL, SQLite): its business transaction starts
// with one INSERT of every row as PROCESSED, and a handler that does not
// succeed turns its row back into the marker it skipped, behind its
// savepoint, so every outcome is recorded as below. An event that has a
// row already (a resend) is left out of the INSERT (on MySQL, whose INSERT
// fails on it, by reading the rows it met and inserting the others): a
// processed or rejected one is reported a duplicate, any other runs alone
// after the batch.
//
// Otherwise the attempt markers of the whole batch are committed in one transaction
// before the handlers run (rule 5). Then every handler runs in the batch's
// business transaction behind its own savepoint: a business rejection, a
// poison message or a technical failure rolls back only its own writes and
// never makes its neighbours fail. One commit records the batch. Technical
// failures are then recorded in their own transactions (rule 4).
//
// When the commit fails, ProcessBatch returns an error and no results: hand
// the whole batch back to the broker. No attempt counts for the deliveries
// whose handler succeeded or was not run (their markers are taken back);
// failed handlers keep their attempt, as in Process. An item whose outcome
// could not be recorded after the commit (the database went away in
// between) gets OutcomeRetry with Err saying why, and its attempt is taken
// back.
//
// The same event id (and consumer name) twice in one batch is processed
// once: the later items are reported as OutcomeDuplicate with the status and
// attempts of the first. Items without a usable event id get
// OutcomeDeadLetter as from Process. An empty consumer name or a nil handler
// is an error wrapping ErrInvalidEntry before anything is written.
//
// An event attempted before and not finished (its row is TECHNICAL_FAILURE:
// an earlier handler failed, or the process died while a batch holding it
// ran) is not run in the batch: it runs alone, through Process's path, after
// the batch committed. A delivery that kills the process therefore charges
// an attempt to its batch neighbours at most once, and then only to itself,
// instead of sending valid events of every batch it lands in to the
// dead-letter queue.
//
// Without savepoints: when every item whose handler runs in the batch
// declares BatchItem.EffectsInTx, the handlers run first without a
// savepoint each, and the batch commits when all of them succeeded. When
// one does not (a rejection, poison, a technical failure, a claim lost to
// a competing delivery, a statement that fails, a transaction left
// aborted), the whole transaction is rolled back, every handler's writes
// with it, and the batch runs again as above, with savepoints: the results
// and rows are those of a batch with savepoints, and the handlers of the
// batch's other items run twice, the first time without a trace. A panic
// in a handler ends ProcessBatch as it does with savepoints, nothing of the
// business transaction committed. On a pool opened with
// driver/postgres's DriverName, the handlers' statements with arguments
// are then pipelined: the driver sends them with the batch's next
// statement that needs an answer (a query, a RowsAffected read, the
// inbox's own) instead of one round trip each, so a handler's ExecContext
// returns nil and an error its statement meets fails the batch from a
// later statement; run again with savepoints, the handler sees it from
// its own. A handler must not change what it passed to ExecContext (a
// slice's elements, a value behind a pointer) before ProcessBatch
// returns; a slice of bytes ([]byte, json.RawMessage) is copied.
//
// Handlers run in the order of items, those of the events run alone last.
// Deliveries of one event in this process take turns with Process and other
// batches, as in Process.
func (s *Store) ProcessBatch(ctx context.Context, items []BatchItem) ([]Result, error) {
	jobs, dupOf, err := s.batchJobs(ctx, items)
	if err != nil {
		return nil, err
	}
	defer lockTurns(jobs)()
	err = s.run(ctx, jobs)
	switch {
	case err != nil && classify.ValueReason(err) == "":
		return nil, err
	case err != nil:
		// The database refused a value of one of the deliveries, which
		// fails the batch's statements for all of them: each runs alone,
		// so that only the one at fault is dead-lettered (see Process).
		for _, j := range jobs {
			if j.state != jobDecided {
				*j = job{i: j.i, ctx: j.ctx, e: j.e, h: j.h}
			}
			_, _ = s.single(j)
		}
	}
	results := make([]Result, len(items))
	for _, j := range jobs {
		results[j.i] = j.result()
	}
	for i, first := range dupOf {
		if first >= 0 {
			r := results[first]
			results[i] = Result{Outcome: inboxkit.OutcomeDuplicate, Status: r.Status, Attempts: r.Attempts}
		}
	}
	return results, nil
}

// batchJobs checks the items and returns the deliveries to run, in order:
// the items without a usable event id decided (poison), and dupOf[i] is
// the index of the first item of the same event (else -1).
func (s *Store) batchJobs(ctx context.Context, items []BatchItem) ([]*job, []int, error) {
	jobs := make([]*job, 0, len(items))
	dupOf := make([]int, len(items))
	first := make(map[jobKey]int, len(items))
	for i, it := range items {
		dupOf[i] = -1
		e, poison, err := normalize(it.Entry)
		if err != nil {
			return nil, nil, fmt.Errorf("inbox: batch item %d: %w", i, err)
		}
		if it.Handler == nil {
			return nil, nil, fmt.Errorf("%w: batch item %d: handler is nil", ErrInvalidEntry, i)
		}
		j := &job{i: i, ctx: ctx, e: e, h: it.Handler, effectsInTx: it.EffectsInTx}
		if it.Context != nil {
			j.ctx = it.Context
		}
		if poison != "" {
			j.decided(poisonFound(poison))
			jobs = append(jobs, j)
			continue
		}
		if f, ok := first[j.key()]; ok {
			dupOf[i] = f
			continue
		}
		first[j.key()] = i
		jobs = append(jobs, j)
	}
	return jobs, dupOf, nil
}

// lockTurns takes the turns (see Process) of the jobs' events in sorted
// order and each stripe once (two batches, or a batch and a Process, would
// deadlock otherwise), and returns their unlock.
func lockTurns(jobs []*job) func() {
	stripes := make([]uint32, 0, len(jobs))
	for _, j := range jobs {
		if j.state == jobNew {
			stripes = append(stripes, turn(j.e))
		}
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, t := range stripes {
		turns[t].Lock()
	}
	return func() {
		for _, t := range stripes {
			turns[t].Unlock()
		}
	}
}

// unprocess turns the row of a first delivery (inserted as PROCESSED by
// firstBatch) into the attempt marker the marked path would have committed,
// after its handler's writes were rolled back to its savepoint. It does
// nothing for other jobs (and nil, the worker's items).
func (s *Store) unprocess(ctx context.Context, tx *txn, j *job) error {
	if j == nil || !j.first {
		return nil
	}
	if _, err := s.q.unprocess.exec(ctx, tx, j.e.key()); err != nil {
		return fmt.Errorf("inbox: roll back a batch item: %w", err)
	}
	return nil
}
