package inbox

import (
	"database/sql"

	"github.com/inboxkit/inboxkit/dberr"
)

// erDupEntry is MySQL/MariaDB's ER_DUP_ENTRY.
const erDupEntry = 1062

// MySQL is the MariaDB (10.6+) and MySQL (8+) dialect, for
// github.com/go-sql-driver/mysql (database/sql driver name "mysql"). Import
// _ "github.com/inboxkit/inboxkit/driver/mysql": it links that driver and
// the reader of its errors, by which duplicates (error 1062) are
// recognised; [New] refuses this dialect without it. Open the pool with
// parseTime=true, loc=UTC and time_zone='+00:00'; interpolateParams=true
// saves the driver's prepare and close round trips of every statement.
var MySQL = Dialect{
	name:     "mysql",
	database: dberr.MySQL,
	support:  "github.com/inboxkit/inboxkit/driver/mysql",
	isDuplicate: codeIs(dberr.MySQL, func(c dberr.Code) bool {
		return c.Number == erDupEntry
	}),
	placeholder: questionMark,
	purgeBatch:  `DELETE FROM %[1]s WHERE STATUS IN (%[2]s) AND %[3]s ORDER BY PROCESSED_AT LIMIT ?`,
	purgeKeys:   `SELECT EVENT_ID, CONSUMER_NAME FROM %[1]s WHERE STATUS IN (%[2]s) AND %[3]s ORDER BY PROCESSED_AT LIMIT ? FOR UPDATE`,
	limit:       func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:     utcTime,

	// READ COMMITTED: no gap locks, and rows read but not matching are
	// unlocked at once, so claims and receives do not block each other.
	lockingTx: &sql.TxOptions{Isolation: sql.LevelReadCommitted},

	// No ORDER BY: InnoDB would lock every eligible row to sort them, and
	// the other workers would find nothing to claim.
	claim:          `SELECT %[3]s FROM %[1]s WHERE %[2]s LIMIT @n FOR UPDATE SKIP LOCKED`,
	multiRowInsert: true,

	schema: schemaSQL{
		varchar: "VARCHAR(%d)", integer: "INTEGER", count: "INTEGER DEFAULT 0 NOT NULL", time: "TIMESTAMP",
		serial:   "BIGINT NOT NULL AUTO_INCREMENT",
		nullTime: "TIMESTAMP(6) NULL DEFAULT NULL", created: "TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6) NOT NULL",
		blob: "LONGBLOB", text: "TEXT",
		ifNotExists:   " IF NOT EXISTS",
		tableOptions:  " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
		inlineIndexes: true,
		columnsQuery:  `SELECT UPPER(COLUMN_NAME) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
		indexesQuery:  `SELECT DISTINCT UPPER(INDEX_NAME) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
		existsQuery:   `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
		// GET_LOCK, waiting up to 600 s.
		lock:             `SELECT GET_LOCK(` + mysqlMigrateLockKey + `, 600)`,
		unlock:           `SELECT RELEASE_LOCK(` + mysqlMigrateLockKey + `)`,
		lockReportsGrant: true,
		exactStatus:      "CAST(STATUS AS BINARY)",
	},
}

const mysqlMigrateLockKey = `CONCAT('inboxkit.', LEFT(SHA1(CONCAT(DATABASE(), '.', UPPER(?))), 40))`
