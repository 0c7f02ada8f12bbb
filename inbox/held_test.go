package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // pgx's plain "pgx", beside dbtest's inboxkit-pgx

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// ProcessInTx's first delivery through inboxkit-pgx sends its INSERT with
// the handler's first statement; through pgx's plain driver before the
// handler, as Process does. Both end alike: a new event is PROCESSED or
// REJECTED at attempt 1, a duplicate's handler leaves nothing (whether it
// wrote, wrote nothing, or failed), a resend of a failed event is a retry
// at attempt 2 whose marker is committed before its handler runs (through
// Process too), and an INSERT the database refuses is Process's error
// with nothing written. Only inboxkit-pgx lets the handler see that
// error: the one behaviour that tells the INSERT was held.
func TestProcessInTxHeldInsert(t *testing.T) {
	t.Parallel()
	eachDriver(t, "HELD", func(t *testing.T, db *dbtest.DB, s *inbox.Store, table string, held bool) {
		ctx := context.Background()
		letters, lettersOf := letterTable(t, db, table, "event_id text NOT NULL")
		// A trigger refuses the inbox row of event H-BOOM.
		_, err := db.Exec(`CREATE FUNCTION ` + table + `_boom() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.EVENT_ID = 'H-BOOM' THEN RAISE EXCEPTION 'no row for H-BOOM'; END IF; RETURN NEW; END $$;
				CREATE TRIGGER boom BEFORE INSERT ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION ` + table + `_boom()`)
		dbtest.Must(t, err, "trigger")
		runs := 0
		letter := func(ctx context.Context, tx *sql.Tx, id string) error {
			runs++
			_, err := tx.ExecContext(ctx, `INSERT INTO `+letters+` (event_id) VALUES ($1)`, id)
			return err
		}
		process := func(id string, h inbox.Handler) (inbox.Result, error) {
			t.Helper()
			runs = 0
			return s.ProcessInTx(ctx, first(id), h)
		}
		writes := func(id string) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx) error { return letter(ctx, tx, id) }
		}

		res, err := process("H-1", writes("H-1"))
		dbtest.Must(t, err, "new event")
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if r := get(t, s, "H-1"); r.Status != inboxkit.StatusProcessed || r.Attempts != 1 || lettersOf("H-1") != 1 {
			t.Fatalf("new event: row %s at %d attempts, %d letters; want PROCESSED, 1, 1", r.Status, r.Attempts, lettersOf("H-1"))
		}

		// New events whose handler sends no statement: nothing, or
		// only what the driver may hold for the COMMIT. It runs once.
		for _, tc := range []struct {
			id      string
			letters int
			h       inbox.Handler
		}{
			{"H-5", 0, func(context.Context, *sql.Tx) error { runs++; return nil }},
			{"H-6", 1, func(ctx context.Context, tx *sql.Tx) error {
				runs++
				_, err := tx.ExecContext(hold.Until(ctx, "letter"), `INSERT INTO `+letters+` (event_id) VALUES ($1)`, "H-6")
				return err
			}},
		} {
			res, err := process(tc.id, tc.h)
			dbtest.Must(t, err, "new event %s", tc.id)
			wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			if r := get(t, s, tc.id); runs != 1 || r.Attempts != 1 || lettersOf(tc.id) != tc.letters {
				t.Errorf("new event %s: the handler ran %d times, %d attempts, %d letters; want 1, 1, %d", tc.id, runs, r.Attempts, lettersOf(tc.id), tc.letters)
			}
		}

		// Duplicates: the handler writes, writes only what the driver
		// may hold for the COMMIT (as outbox.Add does), writes
		// nothing, or fails.
		for name, h := range map[string]inbox.Handler{
			"writes": writes("H-1"),
			"holds": func(ctx context.Context, tx *sql.Tx) error {
				runs++
				_, err := tx.ExecContext(hold.Until(ctx, "letter"), `INSERT INTO `+letters+` (event_id) VALUES ($1)`, "H-1")
				return err
			},
			"nothing": func(context.Context, *sql.Tx) error { runs++; return nil },
			"fails":   func(context.Context, *sql.Tx) error { runs++; return errors.New("connection reset by peer") },
		} {
			res, err := process("H-1", h)
			dbtest.Must(t, err, "duplicate whose handler %s", name)
			if res.Outcome != inboxkit.OutcomeDuplicate || res.Status != inboxkit.StatusProcessed {
				t.Errorf("duplicate whose handler %s: %+v, want a duplicate of a PROCESSED row", name, res)
			}
			if want := map[bool]int{true: 1, false: 0}[held]; runs != want {
				t.Errorf("duplicate whose handler %s: the handler ran %d times, want %d", name, runs, want)
			}
		}
		if r := get(t, s, "H-1"); r.Status != inboxkit.StatusProcessed || r.Attempts != 1 || lettersOf("H-1") != 1 {
			t.Errorf("after the duplicates: row %s at %d attempts, %d letters; want PROCESSED, 1, 1", r.Status, r.Attempts, lettersOf("H-1"))
		}

		// A rejection of a new event, then its resend after a technical
		// failure: a retry at attempt 2.
		res, err = process("H-2", func(ctx context.Context, tx *sql.Tx) error {
			if err := letter(ctx, tx, "H-2"); err != nil {
				return err
			}
			return classify.Reject("NO_CUSTOMER", errors.New("customer unknown"))
		})
		dbtest.Must(t, err, "rejection")
		wantOutcome(t, res, inboxkit.OutcomeRejected, inboxkit.StatusRejected)
		if r := get(t, s, "H-2"); r.Attempts != 1 || lettersOf("H-2") != 0 {
			t.Errorf("rejection: %d attempts, %d letters; want 1 and 0", r.Attempts, lettersOf("H-2"))
		}
		// Through ProcessInTx and Process: the resend's INSERT finds
		// the row (read with the rollback through inboxkit-pgx), and
		// its marker is committed before the handler runs again:
		// another connection sees attempt 2.
		other, err := inbox.New(db.Open(t), inbox.Postgres, s.Config())
		dbtest.Must(t, err, "second store")
		for _, id := range []string{"H-3", "H-4"} {
			run := process
			if id == "H-4" {
				run = func(id string, h inbox.Handler) (inbox.Result, error) { runs = 0; return s.Process(ctx, first(id), h) }
			}
			res, err = run(id, func(context.Context, *sql.Tx) error { return errors.New("connection reset by peer") })
			dbtest.Must(t, err, "technical failure")
			wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
			var seen inbox.Record
			res, err = run(id, func(ctx context.Context, tx *sql.Tx) error {
				var err error
				if seen, err = other.Get(ctx, id, consumerName); err != nil {
					return err
				}
				return letter(ctx, tx, id)
			})
			dbtest.Must(t, err, "resend")
			wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			if r := get(t, s, id); r.Attempts != 2 || lettersOf(id) != 1 || seen.Status != inboxkit.StatusTechnicalFailure || seen.Attempts != 2 {
				t.Errorf("%s, resend after a failure: %d attempts, %d letters, while the handler ran %s at %d; want 2 and 1, TECHNICAL_FAILURE at 2 (the marker committed)", id, r.Attempts, lettersOf(id), seen.Status, seen.Attempts)
			}
		}

		// inboxkit-pgx read the rows with the rollbacks (hold.RollbackFirst
		// honoured); through pgx's plain driver they were read in the
		// transactions, and only a marked delivery finds out that its
		// connections cannot run ahead.
		if held && !inbox.Ahead(s) {
			t.Error("the store stopped running ahead through inboxkit-pgx, want it running ahead")
		}

		// An INSERT the database refuses, whether the handler returns
		// the error of its statement or not.
		for _, swallow := range []bool{false, true} {
			var seen error
			_, err = process("H-BOOM", func(ctx context.Context, tx *sql.Tx) error {
				seen = letter(ctx, tx, "H-BOOM")
				if swallow {
					return nil
				}
				return seen
			})
			if err == nil || !strings.Contains(err.Error(), "no row for H-BOOM") {
				t.Errorf("refused INSERT (handler swallows: %v): Process = %v, want the trigger's error", swallow, err)
			}
			if held && (seen == nil || !strings.Contains(seen.Error(), "inbox: insert event")) {
				t.Errorf("refused INSERT: the handler's statement returned %v, want the held INSERT's error", seen)
			}
			if !held && runs != 0 {
				t.Errorf("refused INSERT through pgx: the handler ran")
			}
			if _, err := s.Get(ctx, "H-BOOM", consumerName); !errors.Is(err, inbox.ErrNotFound) || lettersOf("H-BOOM") != 0 {
				t.Errorf("refused INSERT: Get = %v, %d letters; want no row and none", err, lettersOf("H-BOOM"))
			}
		}
	})
}

// In a batch without savepoints (every handler declared EffectsInTx)
// through inboxkit-pgx a handler's writes are pipelined: an INSERT that
// fails returns nil to the handler, the batch then fails and runs again
// with savepoints, where the handler sees the error and rejects its
// event. RowsAffected still counts (a handler that checks it runs once).
// Through pgx's plain driver the handler sees the error in both runs; the
// results, rows and letters are the same through both.
func TestPlainBatchPipelinesHandlers(t *testing.T) {
	t.Parallel()
	eachDriver(t, "PIPE", func(t *testing.T, db *dbtest.DB, s *inbox.Store, table string, held bool) {
		ctx := context.Background()
		letters := table + "_LETTERS"
		_, err := db.Exec(`CREATE TABLE ` + letters + ` (event_id text PRIMARY KEY)`)
		dbtest.Must(t, err, "letters")
		_, err = db.Exec(`INSERT INTO ` + letters + ` VALUES ('P-TAKEN')`)
		dbtest.Must(t, err, "a letter")
		runs := map[string]int{}
		var saw []string // what the handler of P-DUP saw of its INSERT, per run
		handler := func(id, letter string) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx) error {
				runs[id]++
				res, err := tx.ExecContext(ctx, `INSERT INTO `+letters+` (event_id) VALUES ($1)`, letter)
				if id == "P-DUP" {
					saw = append(saw, map[bool]string{true: "nil", false: "error"}[err == nil])
				}
				if err != nil {
					return classify.Reject("LETTER_EXISTS", err)
				}
				if n, err := res.RowsAffected(); err != nil || n != 1 {
					return fmt.Errorf("letter of %s: %d rows, %v", id, n, err)
				}
				return nil
			}
		}
		batch := func(ids ...string) []inbox.Result {
			t.Helper()
			var items []inbox.BatchItem
			for _, id := range ids {
				letter := id
				if id == "P-DUP" {
					letter = "P-TAKEN"
				}
				items = append(items, inbox.BatchItem{Entry: first(id), Handler: handler(id, letter), EffectsInTx: true})
			}
			clear(runs)
			res, err := s.ProcessBatch(ctx, items)
			dbtest.Must(t, err, "batch")
			return res
		}

		res := batch("P-1", "P-2", "P-3")
		for i, id := range []string{"P-1", "P-2", "P-3"} {
			wantOutcome(t, res[i], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			if runs[id] != 1 {
				t.Errorf("%s: handler ran %d times, want once (RowsAffected counted its letter)", id, runs[id])
			}
		}

		res = batch("P-4", "P-DUP", "P-5")
		wantOutcome(t, res[0], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, res[1], inboxkit.OutcomeRejected, inboxkit.StatusRejected)
		wantOutcome(t, res[2], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		want := "[nil error]" // held; then, with savepoints, sent at once
		if !held {
			want = "[error error]"
		}
		if fmt.Sprint(saw) != want {
			t.Errorf("P-DUP's handler saw its INSERT return %v, want %s", saw, want)
		}
		var n int
		dbtest.Must(t, db.QueryRow(`SELECT count(*) FROM `+letters).Scan(&n), "count letters")
		if n != 6 {
			t.Errorf("%d letters, want 6 (P-TAKEN and one for each processed event)", n)
		}
	})
}

// eachDriver runs body as a subtest per driver, on one PostgreSQL
// database: inboxkit-pgx, which holds statements (held), with a store on
// table prefix+"_A", and pgx's plain driver on prefix+"_B".
func eachDriver(t *testing.T, prefix string, body func(t *testing.T, db *dbtest.DB, s *inbox.Store, table string, held bool)) {
	t.Helper()
	db := dbtest.New(t, dbtest.Postgres)
	for _, tc := range []struct {
		driver, table string
		held          bool
	}{{db.Driver, prefix + "_A", true}, {"pgx", prefix + "_B", false}} {
		t.Run(tc.driver, func(t *testing.T) { body(t, db, storeThrough(t, db, tc.driver, tc.table), tc.table, tc.held) })
	}
}

// A worker's entry alone records its PROCESSED row with an UPDATE that
// fails its transaction when the lease is lost: inboxkit-pgx sends it
// with the COMMIT (hold.Counted), pgx's plain driver at once. Through both
// a new entry is PROCESSED with its letter; an entry whose lease another
// owner took while the handler ran is ErrLeaseLost with no letter and the
// other owner's row untouched; a handler that swallowed a failed statement
// and one whose held statement fails at the COMMIT leave no letter and a
// TECHNICAL_FAILURE due again, its cause named. In a worker's batch the
// UPDATE goes with the next statement that needs an answer.
func TestWorkerFencedRecord(t *testing.T) {
	t.Parallel()
	eachDriver(t, "FENCE", func(t *testing.T, db *dbtest.DB, s *inbox.Store, table string, held bool) {
		ctx := context.Background()
		letters, lettersOf := letterTable(t, db, table, "event_id text PRIMARY KEY")
		takeOver := func(id string) {
			t.Helper()
			_, err := db.Exec(`UPDATE `+table+` SET LEASE_OWNER = 'other', ATTEMPTS = ATTEMPTS + 1 WHERE EVENT_ID = $1`, id)
			dbtest.Must(t, err, "take the lease of %s over", id)
		}
		var then func(ctx context.Context, tx *sql.Tx, id string) // after the letter, per case
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+letters+` (event_id) VALUES ($1)`, m.ID); err != nil {
				return err
			}
			if then != nil {
				then(ctx, tx, m.ID)
			}
			return nil
		}})
		process := func(id string, f func(ctx context.Context, tx *sql.Tx, id string)) (inbox.Result, error) {
			t.Helper()
			receive(t, s, id)
			then = f
			return w.Process(ctx, claimOne(t, w))
		}

		res, err := process("F-1", nil)
		if err != nil || res.Outcome != inboxkit.OutcomeProcessed || lettersOf("F-1") != 1 {
			t.Fatalf("new entry: %+v, %v, %d letters; want PROCESSED with its letter", res, err, lettersOf("F-1"))
		}
		if r := get(t, s, "F-1"); r.Status != inboxkit.StatusProcessed || r.Attempts != 1 {
			t.Fatalf("F-1's row = %+v", r)
		}

		_, err = process("F-LOST", func(ctx context.Context, tx *sql.Tx, id string) { takeOver(id) })
		if !errors.Is(err, inbox.ErrLeaseLost) || lettersOf("F-LOST") != 0 {
			t.Fatalf("lease taken over: %v, %d letters; want ErrLeaseLost and no letter", err, lettersOf("F-LOST"))
		}
		if r := get(t, s, "F-LOST"); r.Status != inboxkit.StatusInProgress || r.Attempts != 2 {
			t.Fatalf("F-LOST's row = %+v, want the other owner's IN_PROGRESS at attempt 2", r)
		}

		runs, errs := map[string]int{}, map[string]error{}
		// batch runs ids as one worker batch, whose handler takes the
		// lease of an entry over where take says (by id and run), then
		// writes its letter.
		batch := func(effectsInTx bool, take func(id string, run int) bool, ids ...string) {
			t.Helper()
			w := newWorker(t, s, inbox.WorkerConfig{Owner: "b", BatchSize: len(ids), ClaimSize: len(ids), EffectsInTx: effectsInTx,
				HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
					if runs[m.ID]++; take(m.ID, runs[m.ID]) {
						takeOver(m.ID)
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO `+letters+` (event_id) VALUES ($1)`, m.ID)
					return err
				}})
			for _, id := range ids {
				receive(t, s, id)
			}
			observe := func(ctx context.Context, c inbox.Claimed) (context.Context, func(inbox.Result, error)) {
				return ctx, func(_ inbox.Result, err error) { errs[c.Message.ID] = err }
			}
			if n, err := w.RunOnce(ctx, observe); n != len(ids) || err != nil {
				t.Fatalf("batch %v: RunOnce: %d, %v", ids, n, err)
			}
		}

		// A batch without savepoints (EffectsInTx) whose middle entry's
		// lease is taken over in its first run: that run fails (through
		// inboxkit-pgx at its check, the UPDATE held with the last
		// handler's writes), and the batch runs again with savepoints,
		// where the middle entry is ErrLeaseLost and the others are
		// PROCESSED, each with one letter.
		batch(true, func(id string, run int) bool { return id == "FB-2" && run == 1 }, "FB-1", "FB-2", "FB-3")
		// FB-3 ran in the first run only where FB-2's UPDATE was held: at
		// once it failed and ended that run.
		for id, want := range map[string]int{"FB-1": 2, "FB-3": map[bool]int{true: 2, false: 1}[held]} {
			if r := get(t, s, id); errs[id] != nil || r.Status != inboxkit.StatusProcessed || lettersOf(id) != 1 || runs[id] != want {
				t.Errorf("%s: %v, %+v, %d letters, %d runs; want PROCESSED with one letter, %d runs", id, errs[id], r, lettersOf(id), runs[id], want)
			}
		}
		if !errors.Is(errs["FB-2"], inbox.ErrLeaseLost) || lettersOf("FB-2") != 0 {
			t.Errorf("FB-2: %v, %d letters; want ErrLeaseLost and no letter", errs["FB-2"], lettersOf("FB-2"))
		}

		// A batch with savepoints whose second and last entries' leases
		// are taken over: through inboxkit-pgx the second's held UPDATE
		// fails the third's SAVEPOINT, the last's the RELEASE after it;
		// each is ErrLeaseLost with no letter, and the first is PROCESSED.
		batch(false, func(id string, _ int) bool { return id != "FS-1" }, "FS-1", "FS-2", "FS-3")
		if r := get(t, s, "FS-1"); errs["FS-1"] != nil || r.Status != inboxkit.StatusProcessed || lettersOf("FS-1") != 1 {
			t.Errorf("FS-1: %v, %+v, %d letters; want PROCESSED with one letter", errs["FS-1"], r, lettersOf("FS-1"))
		}
		for _, id := range []string{"FS-2", "FS-3"} {
			if !errors.Is(errs[id], inbox.ErrLeaseLost) || lettersOf(id) != 0 {
				t.Errorf("%s: %v, %d letters; want ErrLeaseLost and no letter", id, errs[id], lettersOf(id))
			}
		}

		// Last, claimed together: each is due again about a second after
		// it failed, and a claim after that would take it.
		receive(t, s, "F-ABORTED")
		receive(t, s, "F-HELD")
		claims, err := w.Claim(ctx, 2)
		if err != nil || len(claims) != 2 {
			t.Fatalf("claim F-ABORTED and F-HELD: %v, %v", claims, err)
		}
		for i, tc := range []struct {
			id, cause string
			then      func(ctx context.Context, tx *sql.Tx, id string)
		}{
			{"F-ABORTED", "current transaction is aborted", func(ctx context.Context, tx *sql.Tx, id string) {
				_, _ = tx.ExecContext(ctx, `SELECT CAST($1 AS INTEGER)`, id) // fails; the error is swallowed
			}},
			{"F-HELD", "a held statement", func(ctx context.Context, tx *sql.Tx, id string) {
				_, _ = tx.ExecContext(hold.Until(ctx, "a held statement"), `INSERT INTO `+letters+` (event_id) VALUES ($1)`, id)
			}},
		} {
			if !held {
				tc.cause = "current transaction is aborted" // the statement ran at once, and failed
			}
			then = tc.then
			res, err := w.Process(ctx, claims[i])
			if err != nil || res.Outcome != inboxkit.OutcomeRetry || !strings.Contains(fmt.Sprint(res.Err), tc.cause) || lettersOf(tc.id) != 0 {
				t.Errorf("%s: %+v, %v, %d letters; want a retry caused by %q and no letter", tc.id, res, err, lettersOf(tc.id), tc.cause)
			}
			if r := get(t, s, tc.id); r.Status != inboxkit.StatusTechnicalFailure || r.Attempts != 1 {
				t.Errorf("%s's row = %+v, want TECHNICAL_FAILURE at attempt 1", tc.id, r)
			}
		}
	})
}

// letterTable creates the letters table of a store's table (its one
// column as defined) and returns its name and the count of an event's
// letters.
func letterTable(t *testing.T, db *dbtest.DB, table, column string) (string, func(id string) int) {
	t.Helper()
	letters := table + "_LETTERS"
	_, err := db.Exec(`CREATE TABLE ` + letters + ` (` + column + `)`)
	dbtest.Must(t, err, "letters")
	return letters, func(id string) int {
		t.Helper()
		var n int
		dbtest.Must(t, db.QueryRow(`SELECT count(*) FROM `+letters+` WHERE event_id = $1`, id).Scan(&n), "count letters")
		return n
	}
}
