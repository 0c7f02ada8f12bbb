package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// twin is two stores on one database (two tables, one clock), so one
// scenario can run through Process on one and ProcessBatch on the other.
type twin struct {
	single, batch *inbox.Store
	clock         *clock
}

func newTwin(t *testing.T, db *dbtest.DB, cfg inbox.Config) twin {
	t.Helper()
	_, b := setup(t, db, cfg) // the business table, the default inbox table
	d, _ := inbox.DialectByName(db.Backend)
	store := func(table string) *inbox.Store {
		c := cfg
		c.Table, c.Clock = table, b.clock
		s, err := inbox.New(db.DB, d, c)
		dbtest.Must(t, err, "store %s", table)
		dbtest.Must(t, s.Migrate(context.Background()), "migrate %s", table)
		return s
	}
	return twin{single: store("INBOX_SINGLE"), batch: store("INBOX_BATCH"), clock: b.clock}
}

// scenarioItem is one delivery of the batch scenario; its handler writes a
// business row noted with the store's table, then returns err.
type scenarioItem struct {
	entry inbox.Entry
	err   error
}

func (it scenarioItem) handler(db *dbtest.DB, note string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		if err := insertBusiness(db, it.entry.EventID, note)(ctx, tx); err != nil {
			return err
		}
		return it.err
	}
}

// comparable drops what differs between equal results (error values).
func comparable(r inbox.Result) string {
	msg := ""
	if r.Err != nil {
		msg = r.Err.Error()
	}
	return fmt.Sprintf("%s %s %s %s attempts=%d retryAfter=%s err=%q", r.Outcome, r.Status, r.Class, r.Reason, r.Attempts, r.RetryAfter, msg)
}

func rowOf(t *testing.T, s *inbox.Store, id string) string {
	t.Helper()
	r, err := s.Get(context.Background(), id, consumerName)
	if errors.Is(err, inbox.ErrNotFound) {
		return "no row"
	}
	dbtest.Must(t, err, "get %s", id)
	return fmt.Sprintf("%+v", r)
}

// A batch of every kind of delivery gives, item by item, the results and
// rows Process gives for the same deliveries one by one, and the business
// writes of rejected and failed items are rolled back while their
// neighbours' commit.
//
// The same holds for first deliveries (Entry.FirstDelivery), one by one and
// in a batch: without a marker, and in a batch without savepoints, they
// leave the rows and results the marked path leaves. "first-batch-ok" is a
// batch whose handlers all succeed, so it commits without the marked path
// (events with a row already run after it); in "first-batch" a handler
// fails and the batch runs again the marked way.
func TestProcessBatchIsProcessOneByOne(t *testing.T) {
	t.Parallel()
	technical := errors.New("letter service timeout")
	every := []scenarioItem{
		{entry("NEW-1"), nil},
		{entry("REJECT"), fmt.Errorf("customer 77 unknown: %w", reject("CUSTOMER_UNKNOWN"))},
		{entry("REJECT-UNNAMED"), reject("")},
		{entry("NEW-2"), nil},
		{entry("POISON"), poison("MALFORMED_PAYLOAD")},
		{entry("TECHNICAL"), technical},
		{entry("DONE"), nil},
		{entry("FAILED-ONCE"), technical},
		{entry("EXHAUSTED"), nil},
		{entry("FAILED-THEN-OK"), nil},
		{entry("NO-ATTEMPT"), decided{inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: "CIRCUIT_OPEN", NoAttempt: true}, "breaker open"}},
		{inbox.Entry{ConsumerName: consumerName}, nil},
		{entry("NEW-1"), nil}, // the same event twice in one batch
		{entry("NEW-3"), nil},
	}
	var succeeding []scenarioItem
	for _, it := range every {
		if it.err == nil {
			succeeding = append(succeeding, it)
		}
	}
	process := func(s *inbox.Store, items []inbox.BatchItem) ([]inbox.Result, error) {
		var out []inbox.Result
		for _, it := range items {
			res, err := s.Process(context.Background(), it.Entry, it.Handler)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
		return out, nil
	}
	batch := func(s *inbox.Store, items []inbox.BatchItem) ([]inbox.Result, error) {
		return s.ProcessBatch(context.Background(), items)
	}
	// The same batches with every handler declared EffectsInTx: they run
	// without savepoints, and where one fails, again with them.
	inTx := func(s *inbox.Store, items []inbox.BatchItem) ([]inbox.Result, error) {
		for i := range items {
			items[i].EffectsInTx = true
		}
		return s.ProcessBatch(context.Background(), items)
	}
	for _, v := range []struct {
		name  string
		items []scenarioItem
		first bool
		run   func(*inbox.Store, []inbox.BatchItem) ([]inbox.Result, error)
	}{
		{"batch", every, false, batch},
		{"first", every, true, process},
		{"first-batch", every, true, batch},
		{"first-batch-ok", succeeding, true, batch},
		{"batch-effects-in-tx", every, false, inTx},
		{"batch-ok-effects-in-tx", succeeding, false, inTx},
		{"first-batch-effects-in-tx", every, true, inTx},
		{"first-batch-ok-effects-in-tx", succeeding, true, inTx},
	} {
		t.Run(v.name, func(t *testing.T) {
			sameAsProcess(t, v.items, v.first, v.run)
		})
	}
}

// sameAsProcess runs items through Process (marked) on one store and
// through run (with Entry.FirstDelivery = first) on another, and compares
// results, rows and business writes.
func sameAsProcess(t *testing.T, items []scenarioItem, first bool, run func(*inbox.Store, []inbox.BatchItem) ([]inbox.Result, error)) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		tw := newTwin(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		ctx := context.Background()
		technical := errors.New("letter service timeout")
		// Before the batch, on both stores: one event processed, one failed
		// once (at the threshold after one more failure), one failed twice
		// (exhausted: dead letter without running).
		before := []scenarioItem{
			{entry("DONE"), nil},
			{entry("FAILED-ONCE"), technical},
			{entry("EXHAUSTED"), technical},
			{entry("EXHAUSTED"), technical},
			{entry("FAILED-THEN-OK"), technical},
		}
		for _, s := range []*inbox.Store{tw.single, tw.batch} {
			for _, it := range before {
				if _, err := s.Process(ctx, it.entry, it.handler(db, "before")); err != nil {
					t.Fatalf("before: %v", err)
				}
			}
		}
		tw.clock.Add(10)
		var want []inbox.Result
		for _, it := range items {
			res, err := tw.single.Process(ctx, it.entry, it.handler(db, "INBOX_SINGLE"))
			dbtest.Must(t, err, "Process %s", it.entry.EventID)
			want = append(want, res)
		}
		batch := make([]inbox.BatchItem, len(items))
		for i, it := range items {
			e := it.entry
			e.FirstDelivery = first
			batch[i] = inbox.BatchItem{Entry: e, Handler: it.handler(db, "INBOX_BATCH")}
		}
		got, err := run(tw.batch, batch)
		dbtest.Must(t, err, "run")
		if len(got) != len(items) {
			t.Fatalf("%d results for %d items", len(got), len(items))
		}
		for i, it := range items {
			if g, w := comparable(got[i]), comparable(want[i]); g != w {
				t.Errorf("item %d (%s):\n batch   %s\n process %s", i, it.entry.EventID, g, w)
			}
			if it.entry.EventID == "" {
				continue
			}
			if g, w := rowOf(t, tw.batch, it.entry.EventID), rowOf(t, tw.single, it.entry.EventID); g != w {
				t.Errorf("row of %s:\n batch   %s\n process %s", it.entry.EventID, g, w)
			}
		}
		for _, it := range items {
			var n [2]int
			for k, note := range []string{"INBOX_SINGLE", "INBOX_BATCH"} {
				q := `SELECT COUNT(*) FROM business WHERE event_id = ? AND note = ?`
				if db.Backend == dbtest.Postgres {
					q = inbox.Postgres.Rebind(q)
				}
				dbtest.Must(t, db.QueryRow(q, it.entry.EventID, note).Scan(&n[k]), "count")
			}
			want := 0
			if it.err == nil && it.entry.EventID != "" && it.entry.EventID != "DONE" && it.entry.EventID != "EXHAUSTED" {
				want = 1
			}
			if n[0] != want || n[1] != want {
				t.Errorf("business rows of %s: process %d, batch %d; want %d", it.entry.EventID, n[0], n[1], want)
			}
		}
	})
}

// A delivery that is twice in one batch runs its handler once.
func TestProcessBatchSameEventTwice(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		var calls atomic.Int32
		h := func(ctx context.Context, tx *sql.Tx) error {
			calls.Add(1)
			return insertBusiness(db, "TWICE", "x")(ctx, tx)
		}
		res, err := s.ProcessBatch(context.Background(), []inbox.BatchItem{{Entry: entry("TWICE"), Handler: h}, {Entry: entry("OTHER"), Handler: insertBusiness(db, "OTHER", "x")}, {Entry: redelivered("TWICE"), Handler: h}})
		dbtest.Must(t, err, "ProcessBatch")
		wantOutcome(t, res[0], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, res[1], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, res[2], inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		if calls.Load() != 1 || b.businessRows(t, "TWICE") != 1 {
			t.Errorf("handler ran %d times, %d business rows; want 1, 1", calls.Load(), b.businessRows(t, "TWICE"))
		}
	})
}

// Bad items are refused before anything is written.
func TestProcessBatchInvalid(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ok := insertBusiness(db, "OK", "x")
		for name, items := range map[string][]inbox.BatchItem{
			"no consumer name": {{Entry: entry("OK"), Handler: ok}, {Entry: inbox.Entry{EventID: "X"}, Handler: ok}},
			"nil handler":      {{Entry: entry("OK"), Handler: ok}, {Entry: entry("X"), Handler: nil}},
		} {
			if _, err := s.ProcessBatch(context.Background(), items); !errors.Is(err, inbox.ErrInvalidEntry) {
				t.Errorf("%s: err = %v, want ErrInvalidEntry", name, err)
			}
		}
		if _, err := s.Get(context.Background(), "OK", consumerName); !errors.Is(err, inbox.ErrNotFound) {
			t.Errorf("a refused batch wrote a row: %v", err)
		}
		res, err := s.ProcessBatch(context.Background(), nil)
		if err != nil || len(res) != 0 {
			t.Errorf("empty batch: %v %v", res, err)
		}
	})
}

// A handler that returns nil after a failed statement leaves a PostgreSQL
// transaction aborted: in a batch it is a technical failure of its own,
// and its neighbours commit. Elsewhere the failed statement changed
// nothing and the handler's nil stands.
//
// With the handlers declared EffectsInTx (a batch without savepoints), the
// same: the batch runs again with savepoints, which find the handler.
func TestProcessBatchHandlerHidesFailedStatement(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "savepoints", true: "effects-in-tx"}[inTx], func(t *testing.T) {
			t.Parallel()
			handlerHidesFailedStatement(t, inTx)
		})
	}
}

func handlerHidesFailedStatement(t *testing.T, inTx bool) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		declare := func(items []inbox.BatchItem) []inbox.BatchItem {
			for i := range items {
				items[i].EffectsInTx = inTx
			}
			return items
		}
		hides := func(ctx context.Context, tx *sql.Tx) error {
			_, _ = tx.ExecContext(ctx, `INSERT INTO no_such_table VALUES (1)`)
			return nil
		}
		res, err := s.ProcessBatch(context.Background(), declare([]inbox.BatchItem{
			{Entry: entry("A"), Handler: insertBusiness(db, "A", "x")}, {Entry: entry("HIDES"), Handler: hides}, {Entry: entry("C"), Handler: insertBusiness(db, "C", "x")},
		}))
		dbtest.Must(t, err, "ProcessBatch")
		wantOutcome(t, res[0], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, res[2], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if db.Backend == dbtest.Postgres {
			wantOutcome(t, res[1], inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		} else {
			wantOutcome(t, res[1], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		}
		if b.businessRows(t, "A") != 1 || b.businessRows(t, "C") != 1 {
			t.Errorf("neighbours' business rows %d, %d; want 1, 1", b.businessRows(t, "A"), b.businessRows(t, "C"))
		}
		// Last in its batch: found before the commit.
		res, err = s.ProcessBatch(context.Background(), declare([]inbox.BatchItem{{Entry: entry("D"), Handler: insertBusiness(db, "D", "x")}, {Entry: entry("HIDES-LAST"), Handler: hides}}))
		dbtest.Must(t, err, "ProcessBatch")
		wantOutcome(t, res[0], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if db.Backend == dbtest.Postgres {
			wantOutcome(t, res[1], inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		} else {
			wantOutcome(t, res[1], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		}
		if b.businessRows(t, "D") != 1 {
			t.Errorf("business rows of D: %d, want 1", b.businessRows(t, "D"))
		}
	})
}

// A batch whose commit fails because the database went away is handed
// back whole and counts no attempt (a failure that could not be recorded
// is none either): after the outage the same batch is processed at
// attempt 1.
func TestProcessBatchOutageIsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db, s, b, proxy := setupViaProxy(t, backend, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
			ctx := context.Background()
			cut := func(ctx context.Context, tx *sql.Tx) error {
				if err := insertBusiness(db, "C-3", "x")(ctx, tx); err != nil {
					return err
				}
				proxy.Cut()
				return nil
			}
			items := []inbox.BatchItem{
				{Entry: entry("C-1"), Handler: insertBusiness(db, "C-1", "x")},
				{Entry: entry("C-2"), Handler: func(context.Context, *sql.Tx) error { return errors.New("letter service timeout") }},
				{Entry: entry("C-3"), Handler: cut},
			}
			if _, err := s.ProcessBatch(ctx, items); err == nil {
				t.Fatal("ProcessBatch succeeded although the connection was cut before the commit")
			}
			proxy.Restore()
			items[2].Handler = insertBusiness(db, "C-3", "x")
			items[1].Handler = insertBusiness(db, "C-2", "x")
			res, err := s.ProcessBatch(ctx, items)
			dbtest.Must(t, err, "after the repair")
			for i, want := range []int{1, 1, 1} {
				wantOutcome(t, res[i], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
				id := items[i].Entry.EventID
				if r := get(t, s, id); res[i].Attempts != want || r.Attempts != want {
					t.Errorf("%s: result attempts %d, row %d; want %d", id, res[i].Attempts, r.Attempts, want)
				}
				if n := b.businessRows(t, id); n != 1 {
					t.Errorf("%s: business rows %d, want 1", id, n)
				}
			}
		})
	}
}

// Many goroutines process overlapping batches (in shuffled order) and
// single deliveries of the same events at once: every event is processed
// exactly once, and nothing deadlocks.
func TestProcessBatchConcurrent(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		const events, workers, rounds = 24, 6, 4
		var calls [events]atomic.Int32
		handler := func(i int) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx) error {
				calls[i].Add(1)
				return insertBusiness(db, "K-"+strconv.Itoa(i), "x")(ctx, tx)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for round := 0; round < rounds; round++ {
					perm := r.Perm(events)[:8]
					if w == 0 {
						for _, i := range perm {
							if _, err := s.Process(context.Background(), entry("K-"+strconv.Itoa(i)), handler(i)); err != nil {
								errs <- err
							}
						}
						continue
					}
					items := make([]inbox.BatchItem, len(perm))
					for k, i := range perm {
						items[k] = inbox.BatchItem{Entry: entry("K-" + strconv.Itoa(i)), Handler: handler(i)}
					}
					if _, err := s.ProcessBatch(context.Background(), items); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent batch: %v", err)
		}
		for i := 0; i < events; i++ {
			id := "K-" + strconv.Itoa(i)
			if calls[i].Load() > 1 || b.businessRows(t, id) > 1 {
				t.Errorf("%s: handler ran %d times, %d business rows", id, calls[i].Load(), b.businessRows(t, id))
			}
		}
	})
}

// A commit that fails with the database up (a deferred constraint on
// PostgreSQL) hands the batch back: the handlers that succeeded count no
// attempt, the one that failed technically keeps its attempt and its
// recorded failure.
func TestProcessBatchCommitFails(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	s, b := setup(t, db, inbox.Config{})
	ctx := context.Background()
	_, err := db.Exec(`CREATE TABLE once (k INT, CONSTRAINT once_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)`)
	dbtest.Must(t, err, "create table once")
	twice := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO once VALUES (1), (1)`) // fails at commit
		return err
	}
	items := []inbox.BatchItem{
		{Entry: entry("D-1"), Handler: insertBusiness(db, "D-1", "x")},
		{Entry: entry("D-2"), Handler: func(context.Context, *sql.Tx) error { return errors.New("letter service timeout") }},
		{Entry: entry("D-3"), Handler: twice},
	}
	if _, err := s.ProcessBatch(ctx, items); err == nil {
		t.Fatal("ProcessBatch succeeded although its commit violates a deferred constraint")
	}
	for id, want := range map[string]int{"D-1": 0, "D-2": 1, "D-3": 0} {
		if r := get(t, s, id); r.Status != inboxkit.StatusTechnicalFailure || r.Attempts != want {
			t.Errorf("%s after the failed commit: %s attempts %d, want TECHNICAL_FAILURE attempts %d", id, r.Status, r.Attempts, want)
		}
	}
	if r := get(t, s, "D-2"); r.LastError != "letter service timeout" {
		t.Errorf("D-2's failure was not recorded: %+v", r)
	}
	if n := b.businessRows(t, "D-1"); n != 0 {
		t.Errorf("business rows of D-1 after the failed commit: %d", n)
	}
	items[1].Handler = insertBusiness(db, "D-2", "x")
	items[2].Handler = insertBusiness(db, "D-3", "x")
	res, err := s.ProcessBatch(ctx, items)
	dbtest.Must(t, err, "second batch")
	for i, want := range []int{1, 2, 1} {
		wantOutcome(t, res[i], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if res[i].Attempts != want {
			t.Errorf("%s: attempts %d, want %d", items[i].Entry.EventID, res[i].Attempts, want)
		}
	}
}

// A worker with BatchSize 16 gives, entry by entry, the results, rows,
// dead letters and rejections a worker with BatchSize 1 gives for the same
// entries: processed, rejected (published), poison, technical failures
// before and at the threshold, a claim past the threshold, stored headers
// that do not decode. With the handler declared EffectsInTx the batches
// run without savepoints first, and again with them where one fails: the
// same results.
func TestWorkerBatchIsProcessOneByOne(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "savepoints", true: "effects-in-tx"}[inTx], func(t *testing.T) {
			t.Parallel()
			workerBatchIsProcessOneByOne(t, inTx)
		})
	}
}

func workerBatchIsProcessOneByOne(t *testing.T, inTx bool) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		fixed := inboxkit.Backoff{Initial: time.Second, Max: time.Second, Jitter: -1}
		tw := newTwin(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2, Redelivery: fixed}})
		ctx := context.Background()
		technical := errors.New("letter service timeout")
		errs := map[string]error{
			"REJECT": reject("CUSTOMER_UNKNOWN"), "POISON": poison("MALFORMED_PAYLOAD"),
			"TECH": technical, "TECH-LAST": technical, "TECH-THEN-OK": nil,
		}
		type outcome struct {
			results      map[string]string
			dead, reject []string
		}
		start := tw.clock.Now()
		run := func(s *inbox.Store, table string, batchSize int) outcome {
			out := outcome{results: map[string]string{}}
			dl := &deadLetters{}
			var mu sync.Mutex
			first := true
			handler := businessHandler(db, table)
			rejects := publishFunc(func(headers map[string]string, body []byte) error {
				env, err := dlq.Parse(headers, body)
				mu.Lock()
				defer mu.Unlock()
				out.reject = append(out.reject, env.EventID+"/"+env.Reason)
				return err
			})
			observe := func(ctx context.Context, c inbox.Claimed) (context.Context, func(inbox.Result, error)) {
				return ctx, func(r inbox.Result, err error) {
					if err != nil {
						r.Err = fmt.Errorf("error: %w", err)
					}
					mu.Lock()
					out.results[c.Message.ID] = comparable(r)
					mu.Unlock()
				}
			}
			w := newWorker(t, s, inbox.WorkerConfig{
				Owner: "w", ClaimSize: 16, BatchSize: batchSize, EffectsInTx: inTx && batchSize > 1,
				HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
					if err := handler(ctx, tx, m); err != nil {
						return err
					}
					if m.ID == "TECH-THEN-OK" && first {
						return technical
					}
					return errs[m.ID]
				},
			}, inbox.Ports{DeadLetters: dl, DeadLetterQueue: "DLQ.test", Rejects: rejects, RejectQueue: "REJECTED.test"})
			// Before: TECH-LAST and TECH-THEN-OK failed once, PAST was
			// claimed twice without an outcome.
			tw.clock.set(start)
			receive(t, s, "TECH-LAST")
			receive(t, s, "TECH-THEN-OK")
			cs, err := w.Claim(ctx, 0)
			dbtest.Must(t, err, "claim")
			for _, c := range cs {
				if _, err := w.Process(ctx, c); err != nil {
					t.Fatalf("before: %v", err)
				}
			}
			receive(t, s, "PAST")
			for range 2 {
				dbtest.Must(t, w.Release(ctx, claimOne(t, w)), "release")
			}
			for _, id := range []string{"OK-1", "REJECT", "POISON", "TECH", "OK-2", "BAD-HEADERS"} {
				receive(t, s, id)
			}
			_, err = db.Exec(`UPDATE ` + table + ` SET HEADERS = '{not json' WHERE EVENT_ID = 'BAD-HEADERS'`)
			dbtest.Must(t, err, "corrupt headers")
			tw.clock.Add(2 * time.Second) // the failures are due
			first = false
			out.results = map[string]string{}
			if n, err := w.RunOnce(ctx, observe); err != nil || n != 9 {
				t.Fatalf("RunOnce: %d claimed, %v", n, err)
			}
			out.dead = dl.list()
			slices.Sort(out.dead)
			slices.Sort(out.reject)
			return out
		}
		single := run(tw.single, "INBOX_SINGLE", 1)
		batch := run(tw.batch, "INBOX_BATCH", 16)
		for id, w := range single.results {
			if g := batch.results[id]; g != w {
				t.Errorf("%s:\n batch  %s\n single %s", id, g, w)
			}
			if g, w := rowOf(t, tw.batch, id), rowOf(t, tw.single, id); g != w {
				t.Errorf("row of %s:\n batch  %s\n single %s", id, g, w)
			}
		}
		if len(batch.results) != len(single.results) || len(single.results) != 9 {
			t.Errorf("%d results in batches, %d one by one; want 9", len(batch.results), len(single.results))
		}
		if !slices.Equal(batch.dead, single.dead) || !slices.Equal(batch.reject, single.reject) {
			t.Errorf("dead letters %v, rejections %v in batches; one by one %v, %v", batch.dead, batch.reject, single.dead, single.reject)
		}
		if len(single.dead) != 4 || len(single.reject) != 1 {
			t.Errorf("one by one: dead letters %v, rejections %v; want 4 and 1", single.dead, single.reject)
		}
	})
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// A batch whose leases were taken over while its handlers ran records
// nothing: each entry reports ErrLeaseLost and its business writes roll
// back; the worker that took them over processes them.
func TestWorkerBatchLeaseLost(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} { // SQLite: one writer, no takeover while a batch runs
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			s, b := setup(t, db, inbox.Config{})
			ctx := context.Background()
			for _, id := range []string{"L-1", "L-2"} {
				receive(t, s, id)
			}
			other := newWorker(t, s, inbox.WorkerConfig{Owner: "other", LeaseDuration: time.Minute, HandleFunc: businessHandler(db, "other")})
			var taken []inbox.Claimed
			stalled := businessHandler(db, "stalled")
			var errs []error
			w := newWorker(t, s, inbox.WorkerConfig{Owner: "stalled", LeaseDuration: time.Minute, BatchSize: 2,
				HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
					if taken == nil { // the first handler stalls past the lease; the other worker takes both entries
						b.clock.Add(2 * time.Minute)
						var err error
						taken, err = other.Claim(ctx, 10)
						dbtest.Must(t, err, "claim by the other worker")
					}
					return stalled(ctx, tx, m)
				},
			})
			observe := func(ctx context.Context, c inbox.Claimed) (context.Context, func(inbox.Result, error)) {
				return ctx, func(_ inbox.Result, err error) { errs = append(errs, err) }
			}
			if n, err := w.RunOnce(ctx, observe); n != 2 || err != nil {
				t.Fatalf("RunOnce: %d, %v", n, err)
			}
			if len(errs) != 2 || !errors.Is(errs[0], inbox.ErrLeaseLost) || !errors.Is(errs[1], inbox.ErrLeaseLost) {
				t.Fatalf("errors = %v, want ErrLeaseLost twice", errs)
			}
			if len(taken) != 2 || b.allBusinessRows(t) != 0 {
				t.Fatalf("taken over %d, business rows %d; want 2, 0", len(taken), b.allBusinessRows(t))
			}
			for _, c := range taken {
				if res, err := other.Process(ctx, c); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
					t.Fatalf("the other worker: %+v %v", res, err)
				}
			}
			if b.allBusinessRows(t) != 2 {
				t.Errorf("business rows %d, want 2", b.allBusinessRows(t))
			}
		})
	}
}

// A delivery that kills the process while its batch runs charges its
// neighbours one attempt, once: redelivered, the events attempted before run
// alone after the batch, so the killer's next deaths charge only itself and
// its neighbours are processed, not dead-lettered as MAX_ATTEMPTS_EXCEEDED.
// The death is runtime.Goexit in the killer's handler: the markers stay
// committed, the business transaction is rolled back by its deferred
// rollback, and nothing else of ProcessBatch runs, as when the process dies.
func TestProcessBatchCrashChargesNeighboursOnce(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		ids := []string{"KILLER", "N-1", "N-2", "N-3"}
		kill := func(context.Context, *sql.Tx) error { runtime.Goexit(); return nil }
		items := []inbox.BatchItem{{Entry: entry("KILLER"), Handler: kill}}
		for _, id := range ids[1:] {
			items = append(items, inbox.BatchItem{Entry: entry(id), Handler: insertBusiness(db, id, "x")})
		}
		var final []inbox.Result
		for round := 1; round <= 10 && final == nil; round++ {
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err := s.ProcessBatch(ctx, items)
				if err != nil {
					t.Errorf("ProcessBatch round %d: %v", round, err)
					res = []inbox.Result{}
				}
				final = res
			}()
			<-done
		}
		if len(final) == 0 {
			t.Fatal("the killer still ran after 10 rounds; want it dead-lettered after its MaxAttempts")
		}
		if r := final[0]; r.Outcome != inboxkit.OutcomeDeadLetter || r.Reason != inboxkit.ReasonMaxAttemptsExceeded {
			t.Errorf("killer: %s, want DEAD_LETTER %s", comparable(r), inboxkit.ReasonMaxAttemptsExceeded)
		}
		for i, id := range ids[1:] {
			r := final[i+1]
			if r.Outcome != inboxkit.OutcomeProcessed && r.Outcome != inboxkit.OutcomeDuplicate {
				t.Errorf("%s: %s; want PROCESSED (a neighbour of the killer, charged for its first death only)", id, comparable(r))
			}
			if row := get(t, s, id); row.Status != inboxkit.StatusProcessed || row.Attempts != 2 {
				t.Errorf("%s: row %s attempts %d, want PROCESSED attempts 2", id, row.Status, row.Attempts)
			}
			if n := b.businessRows(t, id); n != 1 {
				t.Errorf("%s: %d business rows, want 1", id, n)
			}
		}
	})
}

// publishFunc is a Publisher of a function.
type publishFunc func(headers map[string]string, body []byte) error

func (f publishFunc) Publish(_ context.Context, _ string, headers map[string]string, body []byte) error {
	return f(headers, body)
}

// A batch whose handlers declare EffectsInTx runs without savepoints; when
// a handler in its middle fails, the whole transaction is rolled back and
// the batch runs again with savepoints: the results, inbox rows and
// business rows are those of the same batch with savepoints, the first
// run's writes are gone (one business row per processed event, not two),
// and the handlers before the failure ran twice, those after it once. A
// batch with one item that does not declare it runs with savepoints at
// once: every handler once.
func TestProcessBatchEffectsInTxFailureRunsAgain(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name     string
		first    bool
		fail     error
		declared func(i int) bool
		calls    []int32 // handler runs per item, A, B, FAIL, C, D
	}{
		{"marked-technical", false, errors.New("letter service timeout"), func(int) bool { return true }, []int32{2, 2, 2, 1, 1}},
		{"first-technical", true, errors.New("letter service timeout"), func(int) bool { return true }, []int32{2, 2, 2, 1, 1}},
		{"first-reject", true, reject("CUSTOMER_UNKNOWN"), func(int) bool { return true }, []int32{2, 2, 2, 1, 1}},
		{"marked-poison", false, poison("MALFORMED_PAYLOAD"), func(int) bool { return true }, []int32{2, 2, 2, 1, 1}},
		{"first-one-undeclared", true, errors.New("letter service timeout"), func(i int) bool { return i != 4 }, []int32{1, 1, 1, 1, 1}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
				tw := newTwin(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
				ids := []string{"A", "B", "FAIL", "C", "D"}
				calls := make([]atomic.Int32, len(ids))
				items := func(note string, count bool) []inbox.BatchItem {
					var out []inbox.BatchItem
					for i, id := range ids {
						e := entry(id)
						e.FirstDelivery = v.first
						write := insertBusiness(db, id, note)
						out = append(out, inbox.BatchItem{Entry: e, EffectsInTx: count && v.declared(i), Handler: func(ctx context.Context, tx *sql.Tx) error {
							if count {
								calls[i].Add(1)
							}
							if err := write(ctx, tx); err != nil {
								return err
							}
							if id == "FAIL" {
								return v.fail
							}
							return nil
						}})
					}
					return out
				}
				ctx := context.Background()
				want, err := tw.single.ProcessBatch(ctx, items("INBOX_SINGLE", false))
				dbtest.Must(t, err, "batch with savepoints")
				got, err := tw.batch.ProcessBatch(ctx, items("INBOX_BATCH", true))
				dbtest.Must(t, err, "batch without savepoints")
				for i, id := range ids {
					if g, w := comparable(got[i]), comparable(want[i]); g != w {
						t.Errorf("%s:\n without savepoints %s\n with savepoints    %s", id, g, w)
					}
					if g, w := rowOf(t, tw.batch, id), rowOf(t, tw.single, id); g != w {
						t.Errorf("row of %s:\n without savepoints %s\n with savepoints    %s", id, g, w)
					}
					if n := calls[i].Load(); n != v.calls[i] {
						t.Errorf("%s: handler ran %d times, want %d", id, n, v.calls[i])
					}
					wantRows := map[bool]int{true: 0, false: 1}[id == "FAIL"]
					for _, note := range []string{"INBOX_SINGLE", "INBOX_BATCH"} {
						q := `SELECT COUNT(*) FROM business WHERE event_id = ? AND note = ?`
						if db.Backend == dbtest.Postgres {
							q = inbox.Postgres.Rebind(q)
						}
						var n int
						dbtest.Must(t, db.QueryRow(q, id, note).Scan(&n), "count")
						if n != wantRows {
							t.Errorf("business rows of %s (%s): %d, want %d", id, note, n, wantRows)
						}
					}
				}
			})
		})
	}
}
