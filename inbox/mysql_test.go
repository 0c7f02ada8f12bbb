package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// On MariaDB the attempt marker is one statement: a marked delivery costs
// the marker, BEGIN, the claim, the handler's INSERT and COMMIT, and its
// duplicate the marker alone; a first delivery BEGIN, its INSERT, the
// handler's, COMMIT, and its duplicate BEGIN, the INSERT that fails, a
// SELECT of the row it met and ROLLBACK (the one SELECT: the marker would
// be a write). Counted by the server (the session's Questions and
// Com_select), on one connection.
func TestMariaDBStatementsPerDelivery(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.MySQL)
	db.DB.SetMaxOpenConns(1)
	s, _ := setup(t, db, inbox.Config{})
	questions := func() int { return sessionQuestions(t, db) }
	selects := func() int { return sessionStatus(t, db, "Com_select") }
	for _, c := range []struct {
		name    string
		e       inbox.Entry
		outcome inboxkit.Outcome
		want    int
		selects int
	}{
		{"first delivery", first("Q-FIRST"), inboxkit.OutcomeProcessed, 4, 0},
		{"its duplicate", first("Q-FIRST"), inboxkit.OutcomeDuplicate, 4, 1},
		{"marked", entry("Q-MARKED"), inboxkit.OutcomeProcessed, 5, 0},
		{"its duplicate, marked", entry("Q-MARKED"), inboxkit.OutcomeDuplicate, 1, 0},
	} {
		selectsBefore := selects()
		before := questions()
		res := mustProcess(t, s, c.e, letterOf(c.e.EventID))
		got := questions() - before - 1 // the SHOW itself counts
		if n := selects() - selectsBefore; n != c.selects {
			t.Errorf("%s: %d SELECT statements, want %d", c.name, n, c.selects)
		}
		if res.Outcome != c.outcome || res.Status != inboxkit.StatusProcessed || res.Attempts != 1 {
			t.Fatalf("%s: %+v, want %s, PROCESSED at attempt 1", c.name, res, c.outcome)
		}
		if got != c.want {
			t.Errorf("%s: %d statements, want %d", c.name, got, c.want)
		}
	}
}

// MariaDB's upserts read what they found from the last insert id: an
// AUTO_INCREMENT column of a legacy table (whose values are the last insert
// id of an INSERT that inserts) is not taken for a found row, and a row
// another unique index finds (not the event's key) is left as it is: the
// delivery fails as it did with a plain INSERT, and counts no attempt on
// another event's row.
func TestMariaDBUpsertReadsItsOwnRow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.MySQL)
	s, _ := setup(t, db, inbox.Config{})
	ctx := context.Background()
	row := func(id string) string {
		r, err := s.Get(ctx, id, consumerName)
		dbtest.Must(t, err, "get %s", id)
		return fmt.Sprintf("%s %d %v %v %q", r.Status, r.Attempts, r.UpdatedAt, r.FirstFailedAt, r.LastError)
	}
	for _, ddl := range []string{
		`ALTER TABLE INBOX_EVENT_PROCESSING ADD COLUMN LEGACY_ID BIGINT NOT NULL AUTO_INCREMENT UNIQUE`,
		`CREATE UNIQUE INDEX LEGACY_CORR ON INBOX_EVENT_PROCESSING (CORRELATION_ID)`,
	} {
		_, err := db.ExecContext(ctx, ddl)
		dbtest.Must(t, err, "%s", ddl)
	}
	ok := func(context.Context, *sql.Tx) error { return nil }
	for _, e := range []inbox.Entry{first("U-FIRST"), entry("U-MARKED")} {
		wantOutcome(t, mustProcess(t, s, e, ok), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		res := mustProcess(t, s, e, ok)
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		if res.Attempts != 1 {
			t.Fatalf("%s duplicate: attempts %d, want 1", e.EventID, res.Attempts)
		}
	}
	// A failed attempt: the marker counts the next one on the row it found,
	// also where the retry comes as a first delivery (a producer's resend),
	// whose INSERT met the row.
	for _, e := range []inbox.Entry{entry("U-RETRY"), first("U-RETRY-FIRST")} {
		mustProcess(t, s, e, func(context.Context, *sql.Tx) error { return errors.New("database down") })
		res := mustProcess(t, s, e, ok)
		if res.Outcome != inboxkit.OutcomeProcessed || res.Attempts != 2 {
			t.Fatalf("%s retry: %+v, want processed at attempt 2", e.EventID, res)
		}
	}

	before := row("U-MARKED")
	for _, e := range []inbox.Entry{first("U-OTHER-1"), entry("U-OTHER-2")} {
		e.CorrelationID = "corr-U-MARKED" // U-MARKED's: the unique index finds its row
		ran := false
		_, err := s.Process(ctx, e, func(context.Context, *sql.Tx) error { ran = true; return nil })
		if err == nil || ran || !strings.Contains(err.Error(), "kept changing") {
			t.Fatalf("%s on another event's unique value: err %v, handler ran %v; want the error of a row that keeps changing", e.EventID, err, ran)
		}
	}
	if after := row("U-MARKED"); after != before {
		t.Fatalf("another event's row changed: %s, was %s", after, before)
	}
}

// On MariaDB a batch of first deliveries that meets an event's row keeps
// its transaction: the INSERT of all rows fails on the duplicate key, the
// rows of the batch's events are read, the others inserted, and the
// handlers run; the duplicate is reported from the row read. Counted by
// the server on one connection: BEGIN, the INSERT that fails, the SELECT,
// the INSERT of the new rows, a handler's INSERT per new event, COMMIT.
func TestMariaDBBatchMeetsARow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.MySQL)
	db.DB.SetMaxOpenConns(1)
	s, _ := setup(t, db, inbox.Config{})
	ctx := context.Background()
	questions := func() int { return sessionQuestions(t, db) }
	mustProcess(t, s, first("B-DONE"), letterOf("B-DONE"))
	var items []inbox.BatchItem
	for _, id := range []string{"B-1", "B-DONE", "B-2", "B-3"} {
		items = append(items, inbox.BatchItem{Entry: first(id), Handler: letterOf(id), EffectsInTx: true})
	}
	before := questions()
	res, err := s.ProcessBatch(ctx, items)
	dbtest.Must(t, err, "ProcessBatch")
	got := questions() - before - 1 // the SHOW itself counts
	for i, r := range res {
		want := inboxkit.OutcomeProcessed
		if items[i].Entry.EventID == "B-DONE" {
			want = inboxkit.OutcomeDuplicate
		}
		if r.Outcome != want || r.Status != inboxkit.StatusProcessed || r.Attempts != 1 {
			t.Errorf("%s: %+v, want %s, PROCESSED at attempt 1", items[i].Entry.EventID, r, want)
		}
	}
	if want := 1 + 3 + 3 + 1; got != want {
		t.Errorf("%d statements, want %d", got, want)
	}
}

// sessionQuestions is the server's count of statements on db's one
// connection (SHOW counts itself).
func sessionQuestions(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	return sessionStatus(t, db, "Questions")
}

// sessionStatus is the session's status variable name on db (one
// connection).
func sessionStatus(t *testing.T, db *dbtest.DB, name string) int {
	t.Helper()
	var got string
	var n int
	dbtest.Must(t, db.DB.QueryRowContext(context.Background(), `SHOW SESSION STATUS LIKE '`+name+`'`).Scan(&got, &n), "session status %s", name)
	return n
}

// letterOf is a handler writing the business row of event id.
func letterOf(id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO business (event_id, note) VALUES (?, ?)`, id, "x")
		return err
	}
}
