package postgres_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// holdDB is a test schema with table h (id primary key), opened through
// DriverName.
func holdDB(t *testing.T) *sql.DB {
	t.Helper()
	d := dbtest.New(t, dbtest.Postgres)
	if d.Driver != postgres.DriverName {
		t.Fatalf("dbtest opened PostgreSQL through %q, want %q", d.Driver, postgres.DriverName)
	}
	if _, err := d.Exec(`CREATE TABLE h (id integer PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return d.DB
}

func begin(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func count(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, where string) int {
	t.Helper()
	var n int
	if err := q.QueryRowContext(context.Background(), `SELECT count(*) FROM h WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A held INSERT that fails is reported by Commit, named, and the row is
// not written: had the driver sent it at once, Exec would have failed.
func TestHeldStatementFailsAtCommit(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO h VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	res, err := tx.ExecContext(hold.Until(ctx, "row one again"), `INSERT INTO h VALUES ($1)`, 1)
	if err != nil {
		t.Fatalf("held INSERT of a duplicate failed at once (not held): %v", err)
	}
	if _, err := res.RowsAffected(); err == nil || !strings.Contains(err.Error(), "held") {
		t.Errorf("RowsAffected of a held statement = %v, want an error saying it is held", err)
	}
	err = tx.Commit()
	var pg *pgconn.PgError
	if err == nil || !strings.HasPrefix(err.Error(), "row one again: ") || !errors.As(err, &pg) || pg.Code != "23505" {
		t.Fatalf("Commit = %v, want the held statement's 23505 named \"row one again\"", err)
	}
	if n := count(t, db, `true`); n != 1 {
		t.Errorf("%d rows after the failed commit, want 1 (row 2 rolled back)", n)
	}
	// The connection went back idle and works.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`INSERT INTO h VALUES (3)`); err != nil {
		t.Fatalf("the pool's connection after a failed held commit: %v", err)
	}
}

// Held statements reach the server before any later statement of the
// transaction (an Exec, a Query, a prepared statement), in order, and are
// committed with the COMMIT.
func TestHeldStatementsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	held := hold.Until(ctx, "held")
	tx := begin(t, db)
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, id := range []int{1, 2} {
		if _, err := tx.ExecContext(held, `INSERT INTO h VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	// An Exec that needs the held rows, sent in one pipeline with them.
	res, err := tx.ExecContext(ctx, `UPDATE h SET id = id + 10 WHERE id IN (1, 2)`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 2 {
		t.Errorf("UPDATE after two held INSERTs affected %d rows, want 2", n)
	}
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES (3)`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, tx, `id = 3`); n != 1 {
		t.Errorf("a query after a held INSERT sees %d of its rows, want 1", n)
	}
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	st, err := tx.PrepareContext(ctx, `SELECT count(*) FROM h WHERE id = $1`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES (5)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.QueryRowContext(ctx, 5).Scan(&n); err != nil || n != 1 {
		t.Errorf("a prepared statement after a held INSERT sees %d of its rows (%v), want 1", n, err)
	}
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES ($1)`, 6); err != nil {
		t.Fatal(err)
	}
	// Two statements in one string, no arguments: sent as a simple query,
	// after the held INSERT.
	if _, err := tx.ExecContext(ctx, `UPDATE h SET id = 16 WHERE id = 6; UPDATE h SET id = 26 WHERE id = 16`); err != nil {
		t.Fatalf("two statements without arguments after a held INSERT: %v", err)
	}
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES ($1)`, 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `id IN (11, 12, 3, 4, 5, 26, 7)`); n != 7 {
		t.Errorf("%d of the 7 rows committed", n)
	}
}

// A rollback drops the held statements; outside a transaction nothing is
// held.
func TestHeldStatementsRollBack(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	held := hold.Until(ctx, "held")
	tx := begin(t, db)
	if _, err := tx.ExecContext(held, `INSERT INTO h VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(held, `INSERT INTO h VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(held, `INSERT INTO h VALUES (2)`); err == nil {
		t.Error("a marked duplicate outside a transaction did not fail at once")
	}
	if n := count(t, db, `true`); n != 1 {
		t.Errorf("%d rows, want 1 (row 1 rolled back, row 2 written at once)", n)
	}
}

// The BEGIN goes with the transaction's first statement: a connection
// lost while idle fails that statement, not BeginTx, and a transaction
// that runs nothing commits without the server.
func TestBeginGoesWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pid int
	if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	empty, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx on a connection whose server ended it: %v; want no error (the BEGIN waits for a statement)", err)
	}
	if err := empty.Commit(); err != nil {
		t.Errorf("Commit of a transaction that ran nothing: %v", err)
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 1); err == nil {
		t.Error("the first statement on a connection whose server ended it succeeded")
	}
	_ = tx.Rollback()
}

// The options of BeginTx reach the server with the BEGIN, and a first
// statement that fails leaves a transaction that rolls back as any other.
func TestBeginKeepsItsOptions(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var level string
	if err := tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil || level != "serializable" {
		t.Errorf("isolation %q (%v), want serializable", level, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 1)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "25006" {
		t.Errorf("INSERT in a read-only transaction: %v, want 25006", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	if _, err := db.Exec(`INSERT INTO h VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	tx = begin(t, db)
	_, err = tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 1)
	if !errors.As(err, &pg) || pg.Code != "23505" {
		t.Errorf("a duplicate as the first statement: %v, want 23505", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `true`); n != 1 {
		t.Errorf("%d rows after the rollback, want 1", n)
	}
}

// A statement marked by hold.Counted is held like Until's, and its count
// of rows and its error reach the Count when it is sent: with the next
// statement, or with the COMMIT; a rollback leaves the Count unsent.
func TestCountedStatement(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO h VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO h VALUES ($1) ON CONFLICT DO NOTHING`

	// Sent with the next statement: one row, then none for an existing one.
	for _, tc := range []struct {
		id   int
		rows int64
	}{{2, 1}, {1, 0}} {
		var n hold.Count
		tx := begin(t, db)
		res, err := tx.ExecContext(hold.Counted(ctx, "insert", &n), insert, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.RowsAffected(); !errors.Is(err, hold.ErrHeld) {
			t.Errorf("RowsAffected of a counted statement = %v, want hold.ErrHeld", err)
		}
		if n.Sent {
			t.Errorf("row %d: the Count says sent before any other statement", tc.id)
		}
		if _, err := tx.ExecContext(ctx, `SELECT $1::integer`, 0); err != nil {
			t.Fatal(err)
		}
		if n != (hold.Count{Sent: true, Rows: tc.rows}) {
			t.Errorf("row %d after the next statement: %+v, want sent with %d rows", tc.id, n, tc.rows)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}

	// Sent with the COMMIT.
	var n hold.Count
	tx := begin(t, db)
	if _, err := tx.ExecContext(hold.Counted(ctx, "insert", &n), insert, 3); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n != (hold.Count{Sent: true, Rows: 1}) || count(t, db, `id = 3`) != 1 {
		t.Errorf("with the COMMIT: %+v, %d rows 3; want sent with 1 row, and row 3 written", n, count(t, db, `id = 3`))
	}

	// A rollback: never sent.
	n = hold.Count{}
	tx = begin(t, db)
	if _, err := tx.ExecContext(hold.Counted(ctx, "insert", &n), insert, 4); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n.Sent || count(t, db, `id = 4`) != 0 {
		t.Errorf("rolled back: %+v, %d rows 4; want unsent and none", n, count(t, db, `id = 4`))
	}

	// An error: the Count has it unnamed, the next statement named.
	n = hold.Count{}
	tx = begin(t, db)
	if _, err := tx.ExecContext(hold.Counted(ctx, "row one again", &n), `INSERT INTO h VALUES ($1)`, 1); err != nil {
		t.Fatal(err)
	}
	_, err := tx.ExecContext(ctx, `SELECT $1::integer`, 0)
	var pg *pgconn.PgError
	if !n.Sent || !errors.As(n.Err, &pg) || pg.Code != "23505" || strings.HasPrefix(n.Err.Error(), "row one again") {
		t.Errorf("failed: Count %+v, want sent with the unnamed 23505", n)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "row one again: ") {
		t.Errorf("the statement after it = %v, want the 23505 named \"row one again\"", err)
	}
	_ = tx.Rollback()
}

// A statement marked hold.RollbackFirst goes with the transaction's
// ROLLBACK: the transaction's writes are gone, the statement's own is
// committed, its row scanned; the transaction's Rollback then sends
// nothing, and a Commit fails.
func TestRollbackFirst(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		tx := begin(t, db)
		if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 5); err != nil {
			t.Fatal(err)
		}
		var id int
		r := hold.Rolled{Dest: []any{&id}}
		if _, err := tx.ExecContext(hold.RollbackFirst(ctx, &r), `INSERT INTO h VALUES ($1) ON CONFLICT DO NOTHING RETURNING id`, 6); err != nil {
			t.Fatal(err)
		}
		want := !commit // the second time row 6 exists: no row returned
		if !r.Done || r.Found != want || (want && id != 6) {
			t.Errorf("Rolled %+v, id %d; want done, found %v (6)", r, id, want)
		}
		if commit {
			if err := tx.Commit(); err == nil {
				t.Error("Commit after RollbackFirst succeeded, want an error")
			}
		} else if err := tx.Rollback(); err != nil {
			t.Errorf("Rollback after RollbackFirst: %v", err)
		}
		if n5, n6 := count(t, db, `id = 5`), count(t, db, `id = 6`); n5 != 0 || n6 != 1 {
			t.Errorf("rows 5 and 6: %d and %d, want 0 (rolled back) and 1 (committed)", n5, n6)
		}
	}
	// A failed transaction, and a statement not prepared on the
	// connection before.
	tx := begin(t, db)
	if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 6); err == nil {
		t.Fatal("a duplicate row 6 was inserted")
	}
	var id int
	r := hold.Rolled{Dest: []any{&id}}
	if _, err := tx.ExecContext(hold.RollbackFirst(ctx, &r), `INSERT INTO h (id) VALUES ($1) RETURNING id`, 8); err != nil || !r.Found || id != 8 {
		t.Errorf("after a failed statement: %v, Rolled %+v, id %d; want row 8", err, r, id)
	}
	if err := tx.Rollback(); err != nil {
		t.Errorf("Rollback after RollbackFirst: %v", err)
	}
	// The connection is idle and usable (a pool of one).
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`INSERT INTO h VALUES (7)`); err != nil {
		t.Fatal(err)
	}
}

// A statement with arguments marked by hold.Pipelined is held: its own
// error is not ExecContext's. Its RowsAffected sends it when it is still
// held (a count of 1, of 0, or its error named), and reads what it met
// when it went with the next statement or the COMMIT; after a rollback it
// says it never ran. The next statement returns a held statement's error
// named. A []byte argument is copied when it is held. A statement without
// arguments (pgx's simple protocol) is not held.
func TestPipelinedStatement(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	p := hold.Pipelined(ctx, "p")
	if _, err := db.Exec(`INSERT INTO h VALUES (1); CREATE TABLE hb (b bytea)`); err != nil {
		t.Fatal(err)
	}

	// Held: its error comes from RowsAffected, which sends it.
	tx := begin(t, db)
	res, err := tx.ExecContext(p, `INSERT INTO h VALUES ($1)`, 1)
	if err != nil {
		t.Fatalf("a pipelined INSERT of an existing row returned %v at once: it was not held", err)
	}
	_, err = res.RowsAffected()
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23505" || !strings.HasPrefix(err.Error(), "p: ") {
		t.Errorf("RowsAffected of the held duplicate = %v, want the 23505 named \"p\"", err)
	}
	dbtest.Must(t, tx.Rollback(), "rollback")

	// RowsAffected sends it and counts; the next statement is the
	// transaction's as usual.
	tx = begin(t, db)
	ins, err := tx.ExecContext(p, `INSERT INTO h VALUES ($1)`, 2)
	dbtest.Must(t, err, "insert 2")
	upd, err := tx.ExecContext(p, `UPDATE h SET id = id WHERE id = $1`, 99)
	dbtest.Must(t, err, "update 99")
	if n, err := ins.RowsAffected(); n != 1 || err != nil {
		t.Errorf("RowsAffected of a held INSERT = %d, %v; want 1, nil", n, err)
	}
	if n, err := upd.RowsAffected(); n != 0 || err != nil {
		t.Errorf("RowsAffected of a held UPDATE of no row = %d, %v; want 0, nil", n, err)
	}
	if count(t, tx, `id = 2`) != 1 {
		t.Error("row 2 is not in its transaction")
	}
	dbtest.Must(t, tx.Commit(), "commit")

	// With the next statement: its error, named, is that statement's.
	tx = begin(t, db)
	if _, err := tx.ExecContext(p, `INSERT INTO h VALUES ($1)`, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT $1::integer`, 0); err == nil || !strings.HasPrefix(err.Error(), "p: ") {
		t.Errorf("the statement after a held duplicate = %v, want the 23505 named \"p\"", err)
	}
	dbtest.Must(t, tx.Rollback(), "rollback")

	// With the COMMIT, a []byte changed after ExecContext returned.
	tx = begin(t, db)
	buf := []byte("abc")
	res, err = tx.ExecContext(p, `INSERT INTO h VALUES ($1)`, 3)
	dbtest.Must(t, err, "insert 3")
	_, err = tx.ExecContext(p, `INSERT INTO hb VALUES ($1)`, buf)
	dbtest.Must(t, err, "insert bytes")
	raw := json.RawMessage(`"abc"`)
	_, err = tx.ExecContext(p, `INSERT INTO hb VALUES (convert_to($1::jsonb #>> '{}', 'UTF8'))`, raw)
	dbtest.Must(t, err, "insert a json.RawMessage")
	copy(buf, "xyz")
	copy(raw, `"xyz"`)
	dbtest.Must(t, tx.Commit(), "commit")
	if n, err := res.RowsAffected(); n != 1 || err != nil || count(t, db, `id = 3`) != 1 {
		t.Errorf("sent with the COMMIT: RowsAffected %d, %v; want 1, nil and row 3 written", n, err)
	}
	var b []byte
	dbtest.Must(t, db.QueryRow(`SELECT string_agg(convert_from(b, 'UTF8'), ',') FROM hb`).Scan(&b), "read bytes")
	if string(b) != "abc,abc" {
		t.Errorf("bytes written = %q, want %q as they were when held", b, "abc,abc")
	}

	// A rollback: never sent.
	tx = begin(t, db)
	res, err = tx.ExecContext(p, `INSERT INTO h VALUES ($1)`, 4)
	dbtest.Must(t, err, "insert 4")
	dbtest.Must(t, tx.Rollback(), "rollback")
	if _, err := res.RowsAffected(); err == nil || count(t, db, `id = 4`) != 0 {
		t.Errorf("rolled back: RowsAffected err %v, %d rows 4; want an error and none", err, count(t, db, `id = 4`))
	}

	// Without arguments: sent at once.
	tx = begin(t, db)
	if _, err := tx.ExecContext(p, `INSERT INTO h VALUES (1)`); err == nil {
		t.Error("a pipelined statement without arguments was held")
	}
	dbtest.Must(t, tx.Rollback(), "rollback")
}

// A transaction whose first statement the server cannot prepare (pgx
// prepares a pipeline's new statements before it sends the BEGIN) has not
// begun: its later statements fail too instead of running on their own,
// its Rollback ends it, and the connection serves the next transaction.
func TestUnbegunTransaction(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"first statement", ctx}, {"held statement", hold.Until(ctx, "p")}} {
		tx := begin(t, db)
		_, err := tx.ExecContext(tc.ctx, `INSERT INTO no_such_table VALUES ($1)`, 1)
		if tc.ctx != ctx {
			if err != nil {
				t.Fatalf("%s: held statement: %v", tc.name, err)
			}
			_, err = tx.ExecContext(ctx, `SELECT $1::integer`, 0)
		}
		if err == nil {
			t.Fatalf("%s: a statement on a missing table succeeded", tc.name)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 7); err == nil {
			t.Errorf("%s: the statement after it succeeded outside a transaction", tc.name)
		}
		dbtest.Must(t, tx.Rollback(), "rollback")
		if n := count(t, db, `id = 7`); n != 0 {
			t.Fatalf("%s: %d rows 7 after the rollback, want none", tc.name, n)
		}
	}
	tx := begin(t, db)
	if _, err := tx.ExecContext(ctx, `INSERT INTO h VALUES ($1)`, 8); err != nil {
		t.Fatal(err)
	}
	dbtest.Must(t, tx.Commit(), "commit")
	if count(t, db, `id = 8`) != 1 {
		t.Error("the next transaction did not write row 8")
	}
}

// A statement without arguments marked hold.Single goes in the pipeline
// of the BEGIN and the held statements, answered at once: a held
// statement's error is its error, named, and the statement did not run.
// Unmarked it goes alone, after them, as a simple query: only there do two
// statements in one string run (the proof that the marked one went through
// the pipeline, which refuses them).
func TestSingleStatement(t *testing.T) {
	t.Parallel()
	db := holdDB(t)
	ctx := context.Background()
	one := hold.Single(ctx)

	tx := begin(t, db)
	_, err := tx.ExecContext(hold.Until(ctx, "p"), `INSERT INTO h VALUES ($1)`, 1)
	dbtest.Must(t, err, "held insert")
	_, err = tx.ExecContext(one, `SAVEPOINT s`)
	dbtest.Must(t, err, "savepoint")
	_, err = tx.ExecContext(hold.Until(ctx, "p"), `INSERT INTO h VALUES ($1)`, 1) // a duplicate
	dbtest.Must(t, err, "held duplicate")
	_, err = tx.ExecContext(one, `RELEASE SAVEPOINT s`)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23505" || !strings.HasPrefix(err.Error(), "p: ") {
		t.Fatalf("RELEASE after a held duplicate = %v, want the 23505 named \"p\"", err)
	}
	_, err = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT s`)
	dbtest.Must(t, err, "rollback to the savepoint, which the RELEASE did not release")
	dbtest.Must(t, tx.Commit(), "commit")
	if n := count(t, db, `id = 1`); n != 1 {
		t.Errorf("%d rows 1, want the first", n)
	}

	for _, marked := range []bool{false, true} {
		tx := begin(t, db)
		c := ctx
		if marked {
			c = one
		}
		_, err := tx.ExecContext(c, `SELECT 1; SELECT 2`) // with the BEGIN still to send
		if marked == (err == nil) {
			t.Errorf("two statements in one string, marked %v: %v", marked, err)
		}
		dbtest.Must(t, tx.Rollback(), "rollback")
	}
}
