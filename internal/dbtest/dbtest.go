// Package dbtest gives each test its own, empty database on the real servers
// the project tests against: a fresh schema on PostgreSQL, a fresh database
// on MariaDB, a fresh file for SQLite. A server that does not answer fails
// the test with the command that starts it; nothing is skipped.
//
// Connection settings come from the environment, with the development
// machine's defaults:
//
//	INBOXKIT_TEST_POSTGRES  postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	INBOXKIT_TEST_MYSQL     root@tcp(127.0.0.1:3306)/
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	// SQLite through the plain driver, on purpose: every test then checks
	// that a program importing only the driver detects duplicates and
	// classifies errors (driver/driver_test.go does the same for pgx's
	// plain "pgx"). PostgreSQL through inboxkit's driver (BEGIN with the
	// first statement, an outbox write with the commit, a first delivery's
	// INSERT with its handler's first statement, an attempt marker with
	// the claim after it, a resend's read with the rollback before it),
	// so that every test runs on what inboxctl runs. MySQL needs
	// inboxkit's driver package (its errors have no method to read them
	// by).
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	_ "github.com/inboxkit/inboxkit/driver/mysql" // database/sql driver "mysql" and its errors
	"github.com/inboxkit/inboxkit/driver/postgres"
)

// MaxOpenConns bounds each PostgreSQL and MariaDB test pool (and each pool
// from DB.Open), so that parallel tests stay under the servers' connection
// limits.
const MaxOpenConns = 10

// Backend names, as used by the inbox dialects.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
	SQLite   = "sqlite"
)

// All lists the backends every conformance test runs on.
var All = []string{Postgres, MySQL, SQLite}

const (
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultMySQL    = "root@tcp(127.0.0.1:3306)/"

	startPostgres = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
	startMySQL    = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
)

// DB is one isolated test database.
type DB struct {
	*sql.DB
	// Backend is Postgres, MySQL or SQLite.
	Backend string
	// DSN opens another pool on the same database (a second "instance").
	DSN string
	// Driver is the database/sql driver name for DSN.
	Driver string
}

// Open opens another *sql.DB on the same database, closed at test end.
func (d *DB) Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Driver, d.DSN)
	if err != nil {
		t.Fatalf("dbtest: open second pool: %v", err)
	}
	if d.Backend != SQLite {
		db.SetMaxOpenConns(MaxOpenConns)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Addr returns the host:port of the database server (empty for SQLite).
func (d *DB) Addr() string {
	switch d.Backend {
	case Postgres:
		if u, err := url.Parse(d.DSN); err == nil {
			return u.Host
		}
	case MySQL:
		if i := strings.Index(d.DSN, "tcp("); i >= 0 {
			if j := strings.Index(d.DSN[i:], ")"); j > 0 {
				return d.DSN[i+4 : i+j]
			}
		}
	}
	return ""
}

// OpenVia opens another *sql.DB on the same database whose connections go
// to addr (a tcpproxy in front of Addr) instead of the server. It is closed
// at test end. SQLite has no server: the test fails.
func (d *DB) OpenVia(t testing.TB, addr string) *sql.DB {
	t.Helper()
	dsn := ""
	switch d.Backend {
	case Postgres:
		u, err := url.Parse(d.DSN)
		if err != nil {
			t.Fatalf("dbtest: parse DSN: %v", err)
		}
		u.Host = addr
		dsn = u.String()
	case MySQL:
		dsn = strings.Replace(d.DSN, "tcp("+d.Addr()+")", "tcp("+addr+")", 1)
	default:
		t.Fatalf("dbtest: OpenVia: %s has no server address", d.Backend)
	}
	db, err := sql.Open(d.Driver, dsn)
	if err != nil {
		t.Fatalf("dbtest: open via %s: %v", addr, err)
	}
	db.SetMaxOpenConns(MaxOpenConns)
	t.Cleanup(func() { db.Close() })
	return db
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// New returns a fresh, empty database of the given backend, dropped at test end.
func New(t testing.TB, backend string) *DB {
	t.Helper()
	switch backend {
	case Postgres:
		return newPostgres(t)
	case MySQL:
		return newMySQL(t)
	case SQLite:
		return newSQLite(t)
	}
	t.Fatalf("dbtest: unknown backend %q", backend)
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func ping(t testing.TB, db *sql.DB, what, start string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("dbtest: %s does not answer: %v\n\tstart it with: %s\n\t(or run ./scripts/test, which starts it)", what, err, start)
	}
}

// PostgresDSN is the server DSN used for PostgreSQL tests.
func PostgresDSN() string { return env("INBOXKIT_TEST_POSTGRES", defaultPostgres) }

// MySQLDSN is the server DSN used for MariaDB/MySQL tests (no database selected).
func MySQLDSN() string { return env("INBOXKIT_TEST_MYSQL", defaultMySQL) }

func newPostgres(t testing.TB) *DB {
	base := PostgresDSN()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer admin.Close()
	ping(t, admin, "PostgreSQL at "+redact(base), startPostgres)
	schema := "t_" + suffix()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("dbtest: create schema: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("dbtest: parse %s: %v", redact(base), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := sql.Open(postgres.DriverName, dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	// The server allows 100 connections and packages run tests in parallel:
	// a test that needs more raises it.
	db.SetMaxOpenConns(MaxOpenConns)
	t.Cleanup(func() {
		db.Close()
		if a, err := sql.Open("pgx", base); err == nil {
			_, _ = a.Exec("DROP SCHEMA " + schema + " CASCADE")
			a.Close()
		}
	})
	return &DB{DB: db, Backend: Postgres, DSN: dsn, Driver: postgres.DriverName}
}

func newMySQL(t testing.TB) *DB {
	base := MySQLDSN()
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer admin.Close()
	ping(t, admin, "MariaDB at "+redact(base), startMySQL)
	name := "t_" + suffix()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	dsn := MySQLDSNFor(base, name)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	db.SetMaxOpenConns(MaxOpenConns)
	t.Cleanup(func() {
		db.Close()
		if a, err := sql.Open("mysql", base); err == nil {
			_, _ = a.Exec("DROP DATABASE " + name)
			a.Close()
		}
	})
	return &DB{DB: db, Backend: MySQL, DSN: dsn, Driver: "mysql"}
}

// MySQLDSNFor returns the go-sql-driver DSN for database name on the server
// of base, with the settings inbox needs: parseTime, UTC; and
// interpolateParams unless base sets it, as inboxctl opens MariaDB.
func MySQLDSNFor(base, name string) string {
	dsn := strings.TrimSuffix(base, "/") + "/" + name
	if i := strings.Index(base, "?"); i >= 0 {
		dsn = base[:i]
		dsn = strings.TrimSuffix(dsn, "/") + "/" + name + base[i:] + "&"
	} else {
		dsn += "?"
	}
	dsn += "parseTime=true&loc=UTC&time_zone=%27%2B00%3A00%27"
	if !strings.Contains(base, "interpolateParams=") {
		dsn += "&interpolateParams=true"
	}
	return dsn
}

func newSQLite(t testing.TB) *DB {
	path := filepath.Join(t.TempDir(), "inbox.db")
	dsn := SQLiteDSN(path)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	ping(t, db, "SQLite", "(embedded; nothing to start)")
	t.Cleanup(func() { db.Close() })
	return &DB{DB: db, Backend: SQLite, DSN: dsn, Driver: "sqlite"}
}

// SQLiteDSN returns the modernc.org/sqlite DSN for a file with the settings
// concurrent writers need: WAL, a busy timeout, and BEGIN IMMEDIATE so that
// two writers never deadlock on a lock upgrade. The busy timeout is a
// minute: SQLite queues no waiting writer, and on a loaded machine one of
// four can lose the lock to the others for more than 10 s (a hand-back the
// tests that count deliveries would see as a duplicate).
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(60000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return dsn
}

// Run runs fn as a subtest on every backend in All, in parallel.
func Run(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	for _, b := range All {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			fn(t, New(t, b))
		})
	}
}

// Must fails the test on err.
func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// SeedOracleDDL is the INBOX_EVENT_PROCESSING table exactly as the design
// document's seed creates it on Oracle: seven columns and a primary key
// named PK_INBOX_EVENT.
const SeedOracleDDL = `CREATE TABLE INBOX_EVENT_PROCESSING (EVENT_ID VARCHAR2(120) NOT NULL, CONSUMER_NAME VARCHAR2(80) NOT NULL, STATUS VARCHAR2(20) NOT NULL, CORRELATION_ID VARCHAR2(120), REASON_CODE VARCHAR2(80), PROCESSED_AT TIMESTAMP, CREATED_AT TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL, CONSTRAINT PK_INBOX_EVENT PRIMARY KEY (EVENT_ID, CONSUMER_NAME))`

// SeedDDL is SeedOracleDDL translated for backend the way a team would:
// VARCHAR2 becomes VARCHAR and SYSTIMESTAMP becomes CURRENT_TIMESTAMP,
// nothing else.
func SeedDDL(backend string) string {
	if backend == "oracle" {
		return SeedOracleDDL
	}
	return strings.NewReplacer("VARCHAR2", "VARCHAR", "SYSTIMESTAMP", "CURRENT_TIMESTAMP").Replace(SeedOracleDDL)
}

// LegacyRow is a row a legacy consumer left in the seed table: its
// PROCESSED_AT is "" for NULL, else a literal such as "2026-01-05 10:00:00".
type LegacyRow struct {
	EventID, Status, ProcessedAt string
}

// SeedLegacy creates the seed table (SeedDDL) on db with rows of consumer
// invoice-consumer, each created at createdAt and with the correlation id
// "order-" + its event id.
func SeedLegacy(t testing.TB, db *DB, createdAt string, rows ...LegacyRow) {
	t.Helper()
	_, err := db.Exec(SeedDDL(db.Backend))
	Must(t, err, "seed DDL")
	for _, r := range rows {
		processed := "NULL"
		if r.ProcessedAt != "" {
			processed = "'" + r.ProcessedAt + "'"
		}
		_, err := db.Exec(fmt.Sprintf(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT)
			VALUES ('%s', 'invoice-consumer', '%s', 'order-%s', %s, '%s')`, r.EventID, r.Status, r.EventID, processed, createdAt))
		Must(t, err, "legacy row %s", r.EventID)
	}
}

// Dump is the columns and rows of table (ordered by its first column),
// and which of the tables named in also exist: what a test compares to
// show that nothing changed.
func Dump(t testing.TB, db *DB, table string, also ...string) string {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM ` + table + ` ORDER BY 1`)
	Must(t, err, "read %s", table)
	defer rows.Close()
	cols, err := rows.Columns()
	Must(t, err, "columns of %s", table)
	var b strings.Builder
	fmt.Fprintln(&b, strings.ToUpper(strings.Join(cols, ",")))
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		Must(t, rows.Scan(ptrs...), "scan %s", table)
		fmt.Fprintln(&b, vals)
	}
	Must(t, rows.Err(), "rows of %s", table)
	for _, other := range also {
		_, err := db.Exec(`SELECT COUNT(*) FROM ` + other)
		fmt.Fprintf(&b, "%s exists: %v\n", other, err == nil)
	}
	return b.String()
}
