package inbox

import (
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteTimeLayout is fixed-width so that text comparison is time order.
const sqliteTimeLayout = "2006-01-02 15:04:05.000000"

// SQLite is the SQLite dialect, for the pure-Go modernc.org/sqlite driver
// (database/sql driver name "sqlite"). Open the file with a busy timeout,
// WAL and _txlock=immediate (inbox.SQLiteDSN does), so concurrent writers
// wait instead of failing.
var SQLite = Dialect{
	name:        "sqlite",
	placeholder: questionMark,
	isDuplicate: func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	},
	purgeBatch: `DELETE FROM %[1]s WHERE rowid IN (SELECT rowid FROM %[1]s WHERE STATUS IN (%[2]s) AND PROCESSED_AT < ? LIMIT ?)`,
	skipLocked: "",
	limit:      func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:    func(t time.Time) any { return t.UTC().Format(sqliteTimeLayout) },
}
