package inbox

import (
	"database/sql"
	"strconv"
	"strings"

	"github.com/inboxkit/inboxkit"
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

	markUpsert: mysqlMarkUpsert,
	foundByID:  true,

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

// MySQL has no upsert that returns a row, and its affected-rows count
// cannot tell an insert from a row found and left unchanged when the
// driver sets CLIENT_FOUND_ROWS (both count 1). Its marker (INSERT ... ON
// DUPLICATE KEY UPDATE) reports instead what it found in the OK packet's
// last insert id, through LAST_INSERT_ID(expr) in the UPDATE part, which
// runs only when the key exists: sql.Result.LastInsertId returns
// mysqlFoundTag plus the row's ATTEMPTS and STATUS and whether the marker
// counted an attempt (mysqlFound, decoded by foundOf). Without the tag the
// row was inserted (0, or the value of an AUTO_INCREMENT column a legacy
// table may have). A row whose key the statement's own does not match (a
// unique index of a legacy table other than the primary key) and a
// status foundStatuses does not list are reported as such, and read by
// the key.

// mysqlFoundTag is set in every last insert id that reports a found row.
const mysqlFoundTag = 1 << 62

// foundStatuses are the statuses mysqlFound reports by number: the
// status at index i is code i+2; code 1 is "read the row".
var foundStatuses = [...]inboxkit.Status{
	inboxkit.StatusTechnicalFailure, inboxkit.StatusProcessed, inboxkit.StatusRejected,
	inboxkit.StatusDeadLettered, inboxkit.StatusReceived, inboxkit.StatusInProgress,
}

// mysqlFound is the last insert id of a found row: the tag, ATTEMPTS
// (offset by 2^31, so that any INTEGER is positive) times 16, the status
// code times 2, plus 1 when counted (the SQL condition under which the
// marker counts an attempt) holds.
func mysqlFound(counted string) string {
	var b strings.Builder
	b.WriteString("LAST_INSERT_ID(4611686018427387904 + CASE WHEN EVENT_ID = @event AND CONSUMER_NAME = @consumer AND ATTEMPTS IS NOT NULL THEN (ATTEMPTS + 2147483648) * 16 + 2 * CASE CAST(STATUS AS BINARY)")
	for i, st := range foundStatuses {
		b.WriteString(" WHEN '" + string(st) + "' THEN " + strconv.Itoa(i+2))
	}
	b.WriteString(" ELSE 1 END + IF(" + counted + ", 1, 0) ELSE 2 END)")
	return b.String()
}

// found is a row an upsert reported (foundOf).
type found struct {
	// row: the statement found a row (else it inserted one); known: its
	// status and attempts are in st and attempts (else read the row).
	row, known bool
	st         inboxkit.Status
	attempts   int
	// counted: the marker counted an attempt; attempts is the attempt
	// that may run.
	counted bool
}

// foundOf decodes a last insert id mysqlFound made.
func foundOf(id int64) found {
	if id&mysqlFoundTag == 0 {
		return found{}
	}
	id &^= mysqlFoundTag
	f := found{row: true, counted: id&1 == 1}
	code := int(id>>1) & 7
	if code < 2 || code-2 >= len(foundStatuses) {
		return f
	}
	f.known, f.st, f.attempts = true, foundStatuses[code-2], int(id>>4-2147483648)
	if f.counted {
		f.attempts++
	}
	return f
}

// mysqlCounts is the marker's condition on the row it found (startAttempt's
// WHERE), checked on its values before the update.
const mysqlCounts = `(EVENT_ID = @event AND CONSUMER_NAME = @consumer AND STATUS = 'TECHNICAL_FAILURE' AND ATTEMPTS < @max)`

// mysqlMarkUpsert is MySQL's attempt marker in one statement, as
// pgMarkUpsert on PostgreSQL (rule 5): it inserts the row as
// TECHNICAL_FAILURE with ATTEMPTS 1, or raises the ATTEMPTS of a
// TECHNICAL_FAILURE row below the backout threshold as startAttempt does,
// and reports the row it found (mysqlFound). The first assignment reads
// the row before any other assigns to it; MySQL assigns left to right,
// so every condition reads the values the row had.
var mysqlMarkUpsert = strings.ReplaceAll(insertStartedRows, "{t}", "%[1]s") + startedRow + ` ON DUPLICATE KEY UPDATE ` +
	`STATUS = IF(` + mysqlFound(mysqlCounts) + ` > 0, STATUS, STATUS), ` +
	`LAST_ERROR = IF(` + mysqlCounts + `, CASE WHEN ERROR_CLASS IS NULL AND ATTEMPTS > 0 THEN @marker ELSE LAST_ERROR END, LAST_ERROR), ` +
	`FIRST_FAILED_AT = IF(` + mysqlCounts + `, CASE WHEN ERROR_CLASS IS NULL AND ATTEMPTS > 0 THEN COALESCE(FIRST_FAILED_AT, UPDATED_AT) ELSE FIRST_FAILED_AT END, FIRST_FAILED_AT), ` +
	`ERROR_CLASS = IF(` + mysqlCounts + `, NULL, ERROR_CLASS), ` +
	`UPDATED_AT = IF(` + mysqlCounts + `, @now, UPDATED_AT), ` +
	`ATTEMPTS = IF(` + mysqlCounts + `, ATTEMPTS + 1, ATTEMPTS)`
