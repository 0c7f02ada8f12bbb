// Package dberr reads the code a database put into an error without linking
// any database driver. Package inbox recognises a duplicate event by it
// (rule 1 of ARCHITECTURE.md) and package classify a deadlock, a lost
// connection or a refused encoding, while a program links only the drivers
// of the databases it uses.
//
// # Which errors are read
//
// PostgreSQL: any error with a SQLState() string method, such as pgx's
// *pgconn.PgError. Importing the driver (_ "github.com/jackc/pgx/v5/stdlib")
// is enough.
//
// SQLite: the *Error of modernc.org/sqlite, through its Code() int method
// (the extended result code). Importing the driver (_ "modernc.org/sqlite")
// is enough.
//
// MySQL and MariaDB: the *MySQLError of github.com/go-sql-driver/mysql has
// only fields, no method to read them by, so its errors are read only when
// the program imports _ "github.com/inboxkit/inboxkit/driver/mysql", which
// registers a [ReadFunc]. Without it, [Registered](MySQL) is false and
// inbox.New refuses the MySQL dialect with an error naming that import.
//
// Oracle: nothing is read here. Every Oracle driver puts ORA-nnnnn into the
// error text, and inbox and classify read that text.
package dberr

import (
	"fmt"
	"reflect"
	"sync"
)

// Database names, as the inbox dialects name them.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
	SQLite   = "sqlite"
)

// Code is what a database reported in an error.
type Code struct {
	// Database is Postgres, MySQL or SQLite.
	Database string
	// SQLState is the five-character SQLSTATE ("40P01"); PostgreSQL only.
	SQLState string
	// Number is the MySQL/MariaDB error number (1213) or the SQLite
	// extended result code (2067).
	Number int
	// Message is the database's message text, where the reader has it
	// apart from the rest of the error (MySQL); otherwise "".
	Message string
}

// A ReadFunc reads the Code of one driver's errors. It looks at err itself,
// not at its chain ([Of] walks the chain), and reports false for an error
// that is not one of its driver's.
type ReadFunc func(err error) (Code, bool)

type reader struct {
	database string
	read     ReadFunc
}

var (
	mu      sync.RWMutex
	readers []reader
)

func init() {
	Register(Postgres, readSQLState)
	Register(SQLite, readSQLite)
}

// Register makes [Of] read errors of database with read. Driver packages
// call it from init, like database/sql's Register. It panics when read is
// nil or database already has a reader.
func Register(database string, read ReadFunc) {
	if read == nil {
		panic("dberr: Register " + database + ": read is nil")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range readers {
		if r.database == database {
			panic(fmt.Sprintf("dberr: Register called twice for %q", database))
		}
	}
	readers = append(readers, reader{database, read})
}

// Registered reports whether errors of database can be read: always for
// Postgres and SQLite, for MySQL once driver/mysql is linked.
func Registered(database string) bool {
	mu.RLock()
	defer mu.RUnlock()
	for _, r := range readers {
		if r.database == database {
			return true
		}
	}
	return false
}

// Of returns the Code of the first error in err's chain (as errors.As walks
// it) that a registered reader recognises, and false when there is none.
func Of(err error) (Code, bool) {
	mu.RLock()
	rs := readers
	mu.RUnlock()
	var found Code
	ok := walk(err, func(e error) bool {
		for _, r := range rs {
			if c, ok := r.read(e); ok {
				c.Database = r.database
				found = c
				return true
			}
		}
		return false
	})
	return found, ok
}

// walk calls f for err and the errors it wraps, depth first, until f
// returns true.
func walk(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// readSQLState reads PostgreSQL errors: pgx's *pgconn.PgError (and lib/pq's
// *pq.Error) have SQLState() string.
func readSQLState(err error) (Code, bool) {
	e, ok := err.(interface{ SQLState() string })
	if !ok {
		return Code{}, false
	}
	return Code{SQLState: e.SQLState()}, true
}

// sqlitePkg is the package of modernc's *sqlite.Error. Code() int is a
// common method name, so the type's package is checked too: another
// package's error with a Code method is not a SQLite error.
const sqlitePkg = "modernc.org/sqlite"

func readSQLite(err error) (Code, bool) {
	e, ok := err.(interface{ Code() int })
	if !ok {
		return Code{}, false
	}
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != sqlitePkg {
		return Code{}, false
	}
	return Code{Number: e.Code()}, true
}
