package inbox

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dberr"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// The pipelined marked path (pipeline.go) must commit the attempt marker
// before the handler runs (rule 5): seen from a second connection while
// the handler runs, the row is TECHNICAL_FAILURE at the attempt that runs,
// so a process that dies in the handler leaves the attempt counted; and the
// handler's transaction holds the claim of that row.
func TestPipelinedMarkerIsCommittedBeforeTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Postgres)
	s, err := New(db.DB, Postgres, Config{})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, s.Migrate(ctx), "migrate")

	conn, err := db.DB.Conn(ctx)
	dbtest.Must(t, err, "conn")
	dbtest.Must(t, conn.Raw(func(dc any) error {
		if pgxBatchOf(dc) == nil {
			t.Errorf("no pgx batch found on the driver connection %T: the pipelined path never runs", dc)
		}
		return nil
	}), "raw")
	dbtest.Must(t, conn.Close(), "close")

	// outside reads the row from another connection, and tries its lock.
	outside := func(id string) (status string, attempts int, locked bool) {
		t.Helper()
		tx, err := db.DB.BeginTx(ctx, nil)
		dbtest.Must(t, err, "begin outside")
		defer func() { _ = tx.Rollback() }()
		err = tx.QueryRowContext(ctx, `SELECT STATUS, ATTEMPTS FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1 AND CONSUMER_NAME = 'c'`, id).Scan(&status, &attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return "", 0, false
		}
		dbtest.Must(t, err, "read the marker")
		_, err = tx.ExecContext(ctx, `SELECT 1 FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1 AND CONSUMER_NAME = 'c' FOR UPDATE NOWAIT`, id)
		if c, ok := dberr.Of(err); ok && c.SQLState == "55P03" {
			return status, attempts, true
		}
		dbtest.Must(t, err, "lock the row")
		return status, attempts, false
	}
	for attempt, h := range []func(ctx context.Context, tx *sql.Tx) error{
		func(context.Context, *sql.Tx) error { return errors.New("connection reset") }, // a technical failure: the row stays
		func(context.Context, *sql.Tx) error { return nil },
	} {
		var st string
		var n int
		var locked bool
		res, err := s.Process(ctx, Entry{EventID: "E-1", ConsumerName: "c"}, func(ctx context.Context, tx *sql.Tx) error {
			st, n, locked = outside("E-1")
			return h(ctx, tx)
		})
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt+1, err)
		}
		if st != string(inboxkit.StatusTechnicalFailure) || n != attempt+1 || !locked {
			t.Fatalf("attempt %d: while the handler ran, another connection saw status %q attempts %d, locked %v; want TECHNICAL_FAILURE %d, locked by the handler's transaction (the marker is committed before the handler, rule 5)", attempt+1, st, n, locked, attempt+1)
		}
		if res.Attempts != attempt+1 {
			t.Fatalf("attempt %d: result %+v", attempt+1, res)
		}
	}
	if s.nopipe.Load() {
		t.Fatal("the store fell back to the ordinary marked path on pgx")
	}
}

// What the batch opened is closed when the handler does not run (a
// duplicate, an exhausted row), so the pool's connection goes back
// outside any transaction and is kept.
func TestPipelinedMarkerLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Postgres)
	db.DB.SetMaxOpenConns(1) // the pipeline, the handler, the decision and the check share one connection
	s, err := New(db.DB, Postgres, Config{})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, s.Migrate(ctx), "migrate")
	// pgx's driver discards a connection that comes back to the pool in a
	// transaction: the batch's transaction left open would show as a new
	// backend after every delivery.
	pid := func() (pid int) {
		t.Helper()
		dbtest.Must(t, db.DB.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid), "backend pid")
		return pid
	}
	first := pid()
	idle := func(what string) {
		t.Helper()
		if p := pid(); p != first {
			t.Fatalf("after %s the pool's connection was replaced (backend %d, was %d): it came back inside a transaction", what, p, first)
		}
	}
	ok := func(context.Context, *sql.Tx) error { return nil }
	fail := func(context.Context, *sql.Tx) error { return errors.New("connection reset") }
	want := func(what string, res Result, err error, o inboxkit.Outcome) {
		t.Helper()
		if err != nil || res.Outcome != o {
			t.Fatalf("%s: %v %+v, want %s", what, err, res, o)
		}
		idle(what)
	}
	res, err := s.Process(ctx, Entry{EventID: "E-1", ConsumerName: "c"}, ok)
	want("a new event", res, err, inboxkit.OutcomeProcessed)
	res, err = s.Process(ctx, Entry{EventID: "E-1", ConsumerName: "c"}, ok)
	want("a duplicate", res, err, inboxkit.OutcomeDuplicate)
	for range s.cfg.Retry.MaxAttempts {
		_, err = s.Process(ctx, Entry{EventID: "E-2", ConsumerName: "c"}, fail)
		if err != nil {
			t.Fatal(err)
		}
	}
	idle("the last failure")
	res, err = s.Process(ctx, Entry{EventID: "E-2", ConsumerName: "c"}, ok)
	want("an exhausted row", res, err, inboxkit.OutcomeDeadLetter)
	if res.Reason != inboxkit.ReasonMaxAttemptsExceeded {
		t.Fatalf("exhausted row: %+v", res)
	}
}

// Every BEGIN and COMMIT of the pipelined path reaches the server in its
// place: the server sends no notice (a BEGIN inside a transaction is
// warning 25001, a COMMIT outside one 25P01, and the server logs both),
// for a new event, a technical failure, a retry, a duplicate and an
// exhausted row.
func TestPipelinedMarkerLogsNoWarning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.Postgres)
	cfg, err := pgx.ParseConfig(db.DSN)
	dbtest.Must(t, err, "parse DSN")
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Severity+" "+n.Code+": "+n.Message)
	}
	sdb := stdlib.OpenDB(*cfg)
	defer sdb.Close()
	s, err := New(sdb, Postgres, Config{})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, s.Migrate(ctx), "migrate")
	ok := func(context.Context, *sql.Tx) error { return nil }
	fail := func(context.Context, *sql.Tx) error { return errors.New("connection reset") }
	for i, step := range []struct {
		id   string
		h    Handler
		want inboxkit.Outcome
	}{
		{"E-1", ok, inboxkit.OutcomeProcessed},
		{"E-1", ok, inboxkit.OutcomeDuplicate},
		{"E-2", fail, inboxkit.OutcomeRetry},
		{"E-2", ok, inboxkit.OutcomeProcessed},
		{"E-3", fail, inboxkit.OutcomeRetry},
		{"E-3", fail, inboxkit.OutcomeRetry},
		{"E-3", fail, inboxkit.OutcomeRetry},
		{"E-3", fail, inboxkit.OutcomeRetry},
		{"E-3", fail, inboxkit.OutcomeDeadLetter},
		{"E-3", ok, inboxkit.OutcomeDeadLetter},
	} {
		res, err := s.Process(ctx, Entry{EventID: step.id, ConsumerName: "c"}, step.h)
		if err != nil || res.Outcome != step.want {
			t.Fatalf("step %d (%s): %v %+v, want %s", i+1, step.id, err, res, step.want)
		}
	}
	if s.nopipe.Load() {
		t.Fatal("the store fell back to the ordinary marked path on pgx")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) > 0 {
		t.Fatalf("the server sent %d notice(s), first %q", len(notices), notices[0])
	}
}
