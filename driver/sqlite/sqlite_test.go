package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"

	"github.com/inboxkit/inboxkit/dberr"
	_ "github.com/inboxkit/inboxkit/driver/sqlite"
	"github.com/inboxkit/inboxkit/inbox"
)

// inbox and classify read modernc's errors through this method without
// linking the driver; an upgrade that dropped it fails to compile here.
var _ interface{ Code() int } = (*sqlite.Error)(nil)

// The driver has no constructor for its errors: they are provoked in a real
// database file.
func TestConstraintErrorsAreRead(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		`CREATE TABLE t (k INTEGER PRIMARY KEY, u TEXT UNIQUE, n TEXT NOT NULL)`,
		`INSERT INTO t (k, u, n) VALUES (1, 'a', 'x')`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for _, tc := range []struct {
		stmt string
		code int
		dup  bool
	}{
		{`INSERT INTO t (k, u, n) VALUES (1, 'b', 'x')`, 1555, true},   // SQLITE_CONSTRAINT_PRIMARYKEY
		{`INSERT INTO t (k, u, n) VALUES (2, 'a', 'x')`, 2067, true},   // SQLITE_CONSTRAINT_UNIQUE
		{`INSERT INTO t (k, u, n) VALUES (3, 'c', NULL)`, 1299, false}, // SQLITE_CONSTRAINT_NOTNULL
	} {
		_, err := db.Exec(tc.stmt)
		if c, ok := dberr.Of(err); !ok || c != (dberr.Code{Database: dberr.SQLite, Number: tc.code}) {
			t.Errorf("%s: dberr.Of(%v) = %+v, %v; want code %d", tc.stmt, err, c, ok, tc.code)
		}
		if got := inbox.SQLite.IsDuplicate(err); got != tc.dup {
			t.Errorf("%s: IsDuplicate = %v, want %v", tc.stmt, got, tc.dup)
		}
	}
}
