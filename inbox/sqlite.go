package inbox

import (
	"time"

	"github.com/inboxkit/inboxkit/dberr"
)

// sqliteTimeLayout is fixed-width so that text comparison is time order.
const sqliteTimeLayout = "2006-01-02 15:04:05.000000"

// SQLite extended result codes of a primary-key and a unique violation.
const (
	sqliteConstraintPrimaryKey = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteConstraintUnique     = 2067 // SQLITE_CONSTRAINT_UNIQUE
)

// SQLite is the SQLite dialect, for the pure-Go modernc.org/sqlite driver
// (database/sql driver name "sqlite"): import
// _ "github.com/inboxkit/inboxkit/driver/sqlite" or _ "modernc.org/sqlite".
// Duplicates are recognised by the extended result code, read through the
// Code() method of the driver's error (package dberr), so this package
// links no driver. Open the file with a busy timeout, WAL and
// _txlock=immediate, so concurrent writers wait instead of failing.
var SQLite = Dialect{
	name:     "sqlite",
	database: dberr.SQLite,
	support:  "github.com/inboxkit/inboxkit/driver/sqlite",
	isDuplicate: codeIs(dberr.SQLite, func(c dberr.Code) bool {
		return c.Number == sqliteConstraintPrimaryKey || c.Number == sqliteConstraintUnique
	}),
	placeholder: questionMark,
	purgeBatch:  `DELETE FROM %[1]s WHERE rowid IN (SELECT rowid FROM %[1]s WHERE STATUS IN (%[2]s) AND %[3]s LIMIT ?)`,
	purgeKeys:   `SELECT EVENT_ID, CONSUMER_NAME FROM %[1]s WHERE STATUS IN (%[2]s) AND %[3]s LIMIT ?`, // BEGIN IMMEDIATE holds the write lock
	limit:       func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:     func(t time.Time) any { return t.UTC().Format(sqliteTimeLayout) },

	// One UPDATE ... RETURNING claims: SQLite's writers are serialized.
	claim:          `UPDATE %[1]s SET %[4]s WHERE rowid IN (SELECT rowid FROM %[1]s WHERE %[2]s ORDER BY CREATED_AT, EVENT_ID LIMIT @n) RETURNING %[3]s`,
	claimUpdates:   true,
	multiRowInsert: true,
	doNothing:      ` ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO NOTHING`,

	schema: schemaSQL{
		varchar: "VARCHAR(%d)", integer: "INTEGER", count: "INTEGER DEFAULT 0 NOT NULL", time: "TIMESTAMP",
		serial:  "INTEGER", // with the primary key, an alias of the rowid
		created: "TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL", blob: "BLOB", text: "TEXT",
		ifNotExists:    " IF NOT EXISTS",
		partialIndexes: true,
		columnsQuery:   `SELECT upper(name) FROM pragma_table_info(?)`,
		indexesQuery:   `SELECT upper(name) FROM pragma_index_list(?)`,
		existsQuery:    `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND upper(name) = upper(?)`,
		// The database's write lock, held by the migration's transaction.
		lock:     `BEGIN IMMEDIATE`,
		lockIsTx: true,
	},
}
