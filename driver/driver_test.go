package driver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	_ "github.com/inboxkit/inboxkit/driver/mysql"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// The errors in these tests are provoked on the real servers; nothing is
// mocked. Each case returns the driver's error as database/sql hands it out,
// and classify reads it through package dberr. SQLite runs through the
// plain driver and the "connection refused" case through pgx's plain
// "pgx", as a program that never heard of inboxkit's driver packages does;
// the other PostgreSQL cases through dbtest's driver/postgres.DriverName,
// whose errors are pgx's (driver/postgres registers no error reader);
// MySQL through driver/mysql, which it needs.

func TestOfRealErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		provoke   func(t *testing.T) error
		reason    string
		transient bool
	}{
		{"postgres deadlock", func(t *testing.T) error { return deadlock(t, dbtest.Postgres) }, inboxkit.ReasonDeadlock, true},
		{"mariadb deadlock", func(t *testing.T) error { return deadlock(t, dbtest.MySQL) }, inboxkit.ReasonDeadlock, true},
		{"postgres serialization failure", pgSerializationFailure, inboxkit.ReasonSerializationFailure, true},
		{"postgres lock timeout", func(t *testing.T) error { return lockTimeout(t, dbtest.Postgres) }, inboxkit.ReasonLockTimeout, true},
		{"mariadb lock wait timeout", func(t *testing.T) error { return lockTimeout(t, dbtest.MySQL) }, inboxkit.ReasonLockTimeout, true},
		{"sqlite busy", sqliteBusy, inboxkit.ReasonDBBusy, true},
		{"postgres connection refused", func(t *testing.T) error {
			return refused(t, "pgx", "postgres://postgres@127.0.0.1:1/x?connect_timeout=5")
		}, inboxkit.ReasonConnection, true},
		{"mariadb connection refused", func(t *testing.T) error { return refused(t, "mysql", "root@tcp(127.0.0.1:1)/x?timeout=5s") }, inboxkit.ReasonConnection, true},
		{"tcp connection refused", func(t *testing.T) error { _, err := net.Dial("tcp", "127.0.0.1:1"); return err }, inboxkit.ReasonConnection, true},
		{"postgres connection terminated", func(t *testing.T) error { return killed(t, dbtest.Postgres) }, inboxkit.ReasonConnection, true},
		{"mariadb connection killed", func(t *testing.T) error { return killed(t, dbtest.MySQL) }, inboxkit.ReasonConnection, true},
		{"postgres statement deadline", pgDeadline, inboxkit.ReasonTimeout, true},
		{"postgres unique violation", func(t *testing.T) error { return uniqueViolation(t, dbtest.Postgres) }, inboxkit.ReasonConstraintViolation, false},
		{"mariadb unique violation", func(t *testing.T) error { return uniqueViolation(t, dbtest.MySQL) }, inboxkit.ReasonConstraintViolation, false},
		{"sqlite unique violation", func(t *testing.T) error { return uniqueViolation(t, dbtest.SQLite) }, inboxkit.ReasonConstraintViolation, false},
		{"postgres syntax error", func(t *testing.T) error { return syntaxError(t, dbtest.Postgres) }, "", false},
		{"mariadb syntax error", func(t *testing.T) error { return syntaxError(t, dbtest.MySQL) }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.provoke(t)
			if err == nil {
				t.Fatal("no error provoked")
			}
			t.Logf("provoked: %v", err)
			want := inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: tt.reason}
			if got := classify.Of(err); got != want {
				t.Errorf("Of = %+v, want %+v", got, want)
			}
			if got := classify.IsTransient(err); got != tt.transient {
				t.Errorf("IsTransient = %v, want %v", got, tt.transient)
			}
			// Wrapping keeps the decision; Retry keeps the detected reason.
			if got := classify.Of(wrap(err)); got != want {
				t.Errorf("Of(wrapped) = %+v, want %+v", got, want)
			}
			if tt.transient {
				if got := classify.Of(classify.Retry(err)).Reason; got != tt.reason {
					t.Errorf("Of(Retry(err)).Reason = %q, want %q", got, tt.reason)
				}
			}
		})
	}
}

func wrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "handler: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// twoRows creates table acct(id, v) with rows 1 and 2.
func twoRows(t *testing.T, db *dbtest.DB) {
	t.Helper()
	_, err := db.Exec("CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL)")
	dbtest.Must(t, err, "create table")
	_, err = db.Exec("INSERT INTO acct (id, v) VALUES (1, 0), (2, 0)")
	dbtest.Must(t, err, "insert")
}

func begin(t *testing.T, ctx context.Context, db *sql.DB, opts *sql.TxOptions, setup ...string) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(ctx, opts)
	dbtest.Must(t, err, "begin")
	t.Cleanup(func() { _ = tx.Rollback() })
	for _, s := range setup {
		_, err := tx.ExecContext(ctx, s)
		dbtest.Must(t, err, "%s", s)
	}
	return tx
}

// deadlock locks rows 1 and 2 in opposite order from two transactions in two
// goroutines and returns the error of the victim.
func deadlock(t *testing.T, backend string) error {
	ctx := ctxT(t)
	db := dbtest.New(t, backend)
	twoRows(t, db)
	var setup []string
	if backend == dbtest.Postgres {
		setup = []string{"SET LOCAL deadlock_timeout = '50ms'"}
	}
	tx1 := begin(t, ctx, db.DB, nil, setup...)
	tx2 := begin(t, ctx, db.Open(t), nil, setup...)
	_, err := tx1.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	dbtest.Must(t, err, "tx1 lock 1")
	_, err = tx2.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 2")
	dbtest.Must(t, err, "tx2 lock 2")

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, step := range []struct {
		tx *sql.Tx
		id int
	}{{tx1, 2}, {tx2, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = step.tx.ExecContext(ctx, fmt.Sprintf("UPDATE acct SET v = v + 1 WHERE id = %d", step.id))
			if errs[i] != nil {
				_ = step.tx.Rollback() // release the locks so the other one proceeds
			}
		}()
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // tx1 waits first
		}
	}
	wg.Wait()
	return victim(t, errs)
}

func victim(t *testing.T, errs []error) error {
	t.Helper()
	var found []error
	for _, err := range errs {
		if err != nil {
			found = append(found, err)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one failed transaction, got %v", errs)
	}
	return found[0]
}

func pgSerializationFailure(t *testing.T) error {
	ctx := ctxT(t)
	db := dbtest.New(t, dbtest.Postgres)
	twoRows(t, db)
	ser := &sql.TxOptions{Isolation: sql.LevelSerializable}
	tx1 := begin(t, ctx, db.DB, ser)
	tx2 := begin(t, ctx, db.Open(t), ser)
	var v int
	dbtest.Must(t, tx2.QueryRowContext(ctx, "SELECT v FROM acct WHERE id = 1").Scan(&v), "tx2 snapshot")
	_, err := tx1.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	dbtest.Must(t, err, "tx1 update")
	dbtest.Must(t, tx1.Commit(), "tx1 commit")
	_, err = tx2.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	return err
}

// lockTimeout holds a row lock in one transaction and waits for it with a
// short lock timeout in another.
func lockTimeout(t *testing.T, backend string) error {
	ctx := ctxT(t)
	db := dbtest.New(t, backend)
	twoRows(t, db)
	tx1 := begin(t, ctx, db.DB, nil)
	_, err := tx1.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	dbtest.Must(t, err, "tx1 lock")

	var tx2 *sql.Tx
	if backend == dbtest.Postgres {
		tx2 = begin(t, ctx, db.Open(t), nil, "SET LOCAL lock_timeout = '100ms'")
	} else {
		// innodb_lock_wait_timeout is read when the transaction starts to
		// wait; set it on the session of the pinned connection.
		conn, err := db.Open(t).Conn(ctx)
		dbtest.Must(t, err, "conn")
		t.Cleanup(func() { conn.Close() })
		_, err = conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")
		dbtest.Must(t, err, "set innodb_lock_wait_timeout")
		tx2, err = conn.BeginTx(ctx, nil)
		dbtest.Must(t, err, "begin")
		t.Cleanup(func() { _ = tx2.Rollback() })
	}
	_, err = tx2.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	return err
}

// sqliteBusy holds the write lock on one connection and tries to take it on
// another with busy_timeout 0.
func sqliteBusy(t *testing.T) error {
	ctx := ctxT(t)
	db := dbtest.New(t, dbtest.SQLite)
	twoRows(t, db)
	tx1 := begin(t, ctx, db.DB, nil) // _txlock=immediate: BEGIN IMMEDIATE takes the write lock
	_, err := tx1.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
	dbtest.Must(t, err, "tx1 write")

	dsn := strings.Replace(db.DSN, "busy_timeout(60000)", "busy_timeout(0)", 1)
	if dsn == db.DSN {
		t.Fatalf("cannot set busy_timeout(0) in %s", db.DSN)
	}
	other, err := sql.Open(db.Driver, dsn)
	dbtest.Must(t, err, "open")
	t.Cleanup(func() { other.Close() })
	tx2, err := other.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx2.Rollback()
	_, err = tx2.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 2")
	return err
}

func refused(t *testing.T, driver, dsn string) error {
	db, err := sql.Open(driver, dsn)
	dbtest.Must(t, err, "open")
	defer db.Close()
	return db.PingContext(ctxT(t))
}

// killed ends a pinned connection from another session (pg_terminate_backend,
// KILL) and uses it again.
func killed(t *testing.T, backend string) error {
	ctx := ctxT(t)
	db := dbtest.New(t, backend)
	conn, err := db.Open(t).Conn(ctx)
	dbtest.Must(t, err, "conn")
	t.Cleanup(func() { conn.Close() })
	var id int64
	if backend == dbtest.Postgres {
		dbtest.Must(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id), "pid")
		_, err = db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", id)
	} else {
		dbtest.Must(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id), "id")
		_, err = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
	dbtest.Must(t, err, "kill")
	time.Sleep(50 * time.Millisecond)
	_, err = conn.ExecContext(ctx, "SELECT 1")
	return err
}

// pgDeadline runs a statement that outlives its context's deadline.
func pgDeadline(t *testing.T) error {
	db := dbtest.New(t, dbtest.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := db.ExecContext(ctx, "SELECT pg_sleep(5)")
	return err
}

func uniqueViolation(t *testing.T, backend string) error {
	db := dbtest.New(t, backend)
	twoRows(t, db)
	_, err := db.Exec("INSERT INTO acct (id, v) VALUES (1, 0)")
	return err
}

func syntaxError(t *testing.T, backend string) error {
	db := dbtest.New(t, backend)
	_, err := db.Exec("SELEKT 1")
	return err
}

// The program external benchmark instruments are: pgx/stdlib imported, no
// inboxkit driver package, inbox.New(db, inbox.Postgres,
// inbox.Config{ClassifyFunc: classify.Of}). It answers a redelivery as a
// duplicate and records a real deadlock as DEADLOCK; its dialect recognises
// the real primary-key violation, by which racing first deliveries are told
// apart (rule 1), in TestIsDuplicateRealErrors, in this same binary.
func TestPlainPgxProgram(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := dbtest.New(t, dbtest.Postgres)
	store, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
	dbtest.Must(t, err, "inbox.New")
	dbtest.Must(t, store.Migrate(ctx), "migrate")
	ok := func(context.Context, *sql.Tx) error { return nil }
	e := inbox.Entry{EventID: "ev-1", ConsumerName: "bench"}
	for i, want := range []inboxkit.Outcome{inboxkit.OutcomeProcessed, inboxkit.OutcomeDuplicate} {
		res, err := store.Process(ctx, e, ok)
		dbtest.Must(t, err, "process %d", i+1)
		if res.Outcome != want {
			t.Fatalf("delivery %d: outcome %s, want %s", i+1, res.Outcome, want)
		}
	}
	victim := deadlock(t, dbtest.Postgres)
	res, err := store.Process(ctx, inbox.Entry{EventID: "ev-2", ConsumerName: "bench"}, func(context.Context, *sql.Tx) error { return victim })
	dbtest.Must(t, err, "process ev-2")
	if res.Class != inboxkit.ClassTechnical || res.Reason != inboxkit.ReasonDeadlock {
		t.Errorf("deadlock recorded as %s %q, want %s %q", res.Class, res.Reason, inboxkit.ClassTechnical, inboxkit.ReasonDeadlock)
	}
}

// Each dialect recognises its database's real primary-key violation as a
// duplicate, and nothing else.
func TestIsDuplicateRealErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend string
		d       inbox.Dialect
	}{{dbtest.Postgres, inbox.Postgres}, {dbtest.MySQL, inbox.MySQL}, {dbtest.SQLite, inbox.SQLite}} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			if err := uniqueViolation(t, tc.backend); !tc.d.IsDuplicate(err) {
				t.Errorf("IsDuplicate(%v) = false", err)
			}
			if err := syntaxError(t, tc.backend); tc.d.IsDuplicate(err) {
				t.Errorf("IsDuplicate(%v) = true", err)
			}
		})
	}
}

// A real deadlock is retried in process and the second call succeeds.
func TestDoRetriesRealDeadlock(t *testing.T) {
	t.Parallel()
	calls := 0
	p := inboxkit.RetryPolicy{InProcessRetries: 3, InProcess: inboxkit.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}
	err := classify.Do(ctxT(t), p, nil, func(ctx context.Context) error {
		calls++
		if calls == 1 {
			return deadlock(t, dbtest.MySQL)
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls; want nil after 2", err, calls)
	}
}

// Invalid UTF-8 in a text column is refused by PostgreSQL and MariaDB: the
// message is poison (INVALID_ENCODING), never a transient failure retried
// up to the backout threshold (issue 11, item 7).
func TestOfInvalidEncoding(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			ctx := context.Background()
			create := `CREATE TABLE docs (payload TEXT)`
			if backend == dbtest.MySQL {
				create += ` CHARACTER SET utf8mb4`
			}
			if _, err := db.ExecContext(ctx, create); err != nil {
				t.Fatal(err)
			}
			q := `INSERT INTO docs (payload) VALUES ($1)`
			if backend == dbtest.MySQL {
				q = `INSERT INTO docs (payload) VALUES (?)`
			}
			_, err := db.ExecContext(ctx, q, string([]byte{'{', '"', 0xff, 0xfe, '"', '}'}))
			if err == nil {
				t.Fatal("the database stored invalid UTF-8 in a text column")
			}
			t.Logf("provoked: %v", err)
			want := inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonInvalidEncoding}
			if got := classify.Of(err); got != want {
				t.Errorf("Of = %+v, want %+v", got, want)
			}
			if classify.IsTransient(err) {
				t.Error("IsTransient = true for invalid UTF-8")
			}
		})
	}
}
