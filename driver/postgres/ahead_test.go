package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit/internal/hold"
)

// beginAfter runs hold.Ahead's BeginAfter on a connection of db: first
// returns its id.
func beginAfter(t *testing.T, conn *sql.Conn, first, then hold.Stmt) (found bool, id int, affected int64, err error) {
	t.Helper()
	rerr := conn.Raw(func(dc any) error {
		a, ok := dc.(hold.Ahead)
		if !ok {
			t.Fatalf("the driver's connection %T is not hold.Ahead", dc)
		}
		found, affected, err = a.BeginAfter(context.Background(), first, []any{&id}, then)
		return nil
	})
	if rerr != nil {
		t.Fatal(rerr)
	}
	return found, id, affected, err
}

func conn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// BeginAfter commits first before then runs, and leaves then's
// transaction open for the connection's BeginTx: a rollback takes back
// then and what followed it, never first.
func TestBeginAfterCommitsFirstAndLeavesThenOpen(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO h VALUES (10)`); err != nil {
		t.Fatal(err)
	}
	c := conn(t, db)
	found, id, affected, err := beginAfter(t, c,
		hold.Stmt{Query: `INSERT INTO h VALUES ($1) RETURNING id`, Args: []any{1}},
		hold.Stmt{Query: `UPDATE h SET id = 11 WHERE id = $1`, Args: []any{10}})
	if err != nil || !found || id != 1 || affected != 1 {
		t.Fatalf("BeginAfter = %v, %d, %d, %v; want true, 1, 1, nil", found, id, affected, err)
	}
	// first is committed: another connection sees it while then's
	// transaction is open.
	if n := count(t, db, `id = 1`); n != 1 {
		t.Errorf("another connection sees %d rows of first, want 1 (committed)", n)
	}
	if _, err := c.ExecContext(ctx, `SELECT 1`); err == nil {
		t.Error("a statement before BeginTx on a connection BeginAfter left open succeeded; want the contract's error")
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The transaction BeginTx returned is then's: it sees then's UPDATE.
	if n := count(t, tx, `id = 11`); n != 1 {
		t.Errorf("the transaction BeginTx returned sees %d rows of then's UPDATE, want 1 (then's transaction)", n)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `id IN (1, 10)`); n != 2 {
		t.Errorf("after the rollback %d of rows 1 and 10, want 2 (first kept, then rolled back)", n)
	}
	if n := count(t, db, `id IN (2, 11)`); n != 0 {
		t.Errorf("after the rollback %d of rows 2 and 11, want 0", n)
	}
	// The connection is idle again: a second BeginAfter and a commit.
	if _, _, _, err := beginAfter(t, c,
		hold.Stmt{Query: `INSERT INTO h VALUES ($1) RETURNING id`, Args: []any{3}},
		hold.Stmt{Query: `INSERT INTO h VALUES ($1)`, Args: []any{4}}); err != nil {
		t.Fatal(err)
	}
	tx, err = c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `id IN (3, 4)`); n != 2 {
		t.Errorf("after the commit %d of rows 3 and 4, want 2", n)
	}
}

// A first that fails commits nothing and runs no then; a then that fails
// leaves first committed and no transaction open; the connection goes on.
func TestBeginAfterFailures(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO h VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	c := conn(t, db)
	_, _, _, err := beginAfter(t, c,
		hold.Stmt{Query: `INSERT INTO h VALUES ($1) RETURNING id`, Args: []any{1}},
		hold.Stmt{Query: `INSERT INTO h VALUES ($1)`, Args: []any{2}})
	var pg *pgconn.PgError
	var then *hold.ThenError
	if !errors.As(err, &pg) || pg.Code != "23505" || errors.As(err, &then) {
		t.Fatalf("BeginAfter with a failing first = %v, want its 23505, not a ThenError", err)
	}
	if n := count(t, db, `id = 2`); n != 0 {
		t.Errorf("then ran after a failed first: %d rows", n)
	}
	found, id, _, err := beginAfter(t, c,
		hold.Stmt{Query: `INSERT INTO h VALUES ($1) RETURNING id`, Args: []any{3}},
		hold.Stmt{Query: `INSERT INTO h VALUES ($1)`, Args: []any{1}})
	if !errors.As(err, &then) || !errors.As(err, &pg) || pg.Code != "23505" || !found || id != 3 {
		t.Fatalf("BeginAfter with a failing then = %v, %d, %v; want first's row 3 and then's 23505 as a ThenError", found, id, err)
	}
	if n := count(t, db, `id = 3`); n != 1 {
		t.Errorf("first's row after a failed then: %d, want 1 (committed)", n)
	}
	// Nothing is open: a statement runs on the connection at once.
	if _, err := c.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 4); err != nil {
		t.Fatalf("the connection after a failed then: %v", err)
	}
}

// A connection given back to the pool with then's transaction open is
// closed by the pool, not handed out in it: its locks go with it.
func TestBeginAfterOpenTransactionClosedByThePool(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	db.SetMaxOpenConns(1)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := beginAfter(t, c,
		hold.Stmt{Query: `SELECT 0`},
		hold.Stmt{Query: `INSERT INTO h VALUES ($1)`, Args: []any{1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Row 1's INSERT would wait for the open transaction's lock.
	if _, err := db.ExecContext(ctx, `INSERT INTO h VALUES (1)`); err != nil {
		t.Fatalf("the pool after a connection came back with BeginAfter's transaction open: %v", err)
	}
}
