package inbox

import (
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit"
)

// queries are the store's statements, built once per table and dialect.
type queries struct {
	insertFailure stmt
	insertAttempt stmt // the history of a failure verdict (attempt.go)
	insertDead    stmt
	updateFailure stmt
	insertStarted stmt
	startAttempt  stmt
	markUpsert    stmt // empty text: the dialect marks in three statements
	// insertFirst, insertRejected: the rows a first delivery writes
	// without a marker (first.go); insertFirstRows is insertFirst's
	// multi-row prefix, "" where the dialect has no multi-row INSERT.
	insertFirst    stmt
	insertRejected stmt
	// heldProbe sends a held insertFirst (heldRow): any statement with an
	// argument goes in one round trip with it.
	heldProbe       stmt
	unprocess       stmt
	insertFirstRows string
	forgetAttempt   stmt
	takeBackAttempt stmt
	processFromFail stmt
	deadFromFailure stmt
	resetForReplay  stmt
	reopenRejected  stmt
	selectStatus    stmt
	selectAttempts  stmt
	selectMarker    stmt
	selectOrphan    stmt
	presentPrefix   string // ProcessBatch: the IN list is appended per call
	// insertStartedRows is insertStarted for many rows: the VALUES lists
	// are appended per call (ProcessBatch).
	insertStartedRows string
	selectOne         stmt
	selectByCorr      string
	purgeBatch        string
	purgeTried        string // see Dialect.purgeTried
	purgeKeys         string
	countPurgeable    string
	stuckFailures     string
	hashCollisions    string
	countByStatus     string
	savepoint         string
	rollbackSavepont  string
	// The batch's per-item savepoint (ProcessBatch); releaseItem, which
	// tells an aborted transaction, is "" where a failed statement does not
	// abort the transaction.
	rejectFromFail stmt
	savepointItem  string
	rollbackItem   string
	releaseItem    string
	// checkTx fails in a transaction a failed statement aborted, and
	// carries what the driver holds (it has an argument); no text where
	// a failed statement aborts nothing (a batch without savepoints,
	// runPlain).
	checkTx stmt
}

const recordColumns = `EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, PROCESSED_AT, CREATED_AT, ATTEMPTS, ERROR_CLASS, LAST_ERROR, UPDATED_AT, FIRST_FAILED_AT, PAYLOAD_HASH, REPLAY_COUNT, LEASE_OWNER, LEASE_UNTIL, NEXT_ATTEMPT_AT, EVENT_ID_SOURCE, ORDER_KEY`

func terminalList() string {
	return "'" + string(inboxkit.StatusProcessed) + "', '" + string(inboxkit.StatusRejected) + "', '" + string(inboxkit.StatusDeadLettered) + "'"
}

// insertStartedRows + startedRow is the attempt marker of an event without
// a row; ProcessBatch appends one startedRow per event (compileListed).
const (
	insertStartedRows = `INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) VALUES `
	startedRow        = `(@event, @consumer, 'TECHNICAL_FAILURE', @corr, @now, @now, 1, @hash, @source, @okey)`
)

// insertFirstRows + firstRow is the row of a first delivery that runs
// without a marker (first.go): PROCESSED at attempt 1, the columns the
// marker and the claim would have written.
const (
	insertFirstRows = `INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) VALUES `
	firstRow        = `(@event, @consumer, 'PROCESSED', @corr, @now, @now, @now, 1, @hash, @source, @okey)`
)

func buildQueries(d Dialect, table string) queries {
	r := func(format string, args ...any) string {
		return d.Rebind(fmt.Sprintf(strings.ReplaceAll(format, "{t}", table), args...))
	}
	n := func(text string) stmt { return compile(d, strings.ReplaceAll(text, "{t}", table)) }
	const key = ` WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer`
	_, lim := d.limit("?")
	var markUpsert stmt
	if d.markUpsert != "" {
		markUpsert = compile(d, fmt.Sprintf(d.markUpsert, table))
	}
	// purge renders a purge statement of the dialect ("" where it has none).
	purge := func(format string, more ...any) string {
		if format == "" {
			return ""
		}
		return d.Rebind(fmt.Sprintf(format, append([]any{table, terminalList(), purgeDue}, more...)...))
	}
	firstRows := ""
	if d.multiRowInsert {
		firstRows = strings.ReplaceAll(insertFirstRows, "{t}", table)
	}
	return queries{
		markUpsert:      markUpsert,
		insertAttempt:   n(fmt.Sprintf(insertAttempt, sqlString(table))),
		insertFirst:     n(insertFirstRows + firstRow + d.doNothing),
		heldProbe:       n(`SELECT CAST(@event AS CHAR(120))`),
		insertFirstRows: firstRows,
		// A first delivery's PROCESSED row (ProcessBatch) made the marker
		// it skipped, after its handler did not succeed.
		unprocess:      n(`UPDATE {t} SET STATUS = 'TECHNICAL_FAILURE', PROCESSED_AT = NULL` + key + ` AND STATUS = 'PROCESSED'`),
		insertRejected: failing(n(`INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, ERROR_CLASS, LAST_ERROR, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) VALUES (@event, @consumer, 'REJECTED', @corr, @reason, 'BUSINESS', @error, @now, @now, @now, 1, @hash, @source, @okey)`)),
		insertFailure:  failing(n(`INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, ERROR_CLASS, LAST_ERROR, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) VALUES (@event, @consumer, 'TECHNICAL_FAILURE', @corr, @reason, @class, @error, @now, @now, @now, @attempts, @hash, @source, @okey)`)),
		insertDead:     failing(n(`INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, ERROR_CLASS, LAST_ERROR, PROCESSED_AT, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) VALUES (@event, @consumer, 'DEAD_LETTERED', @corr, @reason, @class, @error, @now, @now, @now, @now, @attempts, @hash, @source, @okey)`)),
		updateFailure:  failing(n(`UPDATE {t} SET ATTEMPTS = ATTEMPTS + @delta, REASON_CODE = @reason, ERROR_CLASS = @class, LAST_ERROR = @error, UPDATED_AT = @now, FIRST_FAILED_AT = COALESCE(FIRST_FAILED_AT, @now)` + key + ` AND STATUS = 'TECHNICAL_FAILURE'`)),
		// The attempt marker (see Store.Process). An ERROR_CLASS of NULL on a
		// TECHNICAL_FAILURE row with attempts means "the handler of the last
		// attempt started and recorded no outcome"; the next marker then writes
		// that into LAST_ERROR. The SET list reads ERROR_CLASS, ATTEMPTS and
		// UPDATED_AT before it assigns them (MySQL assigns left to right).
		insertStarted: n(insertStartedRows + startedRow),
		startAttempt: n(`UPDATE {t} SET LAST_ERROR = CASE WHEN ERROR_CLASS IS NULL AND ATTEMPTS > 0 THEN @marker ELSE LAST_ERROR END, ` +
			`FIRST_FAILED_AT = CASE WHEN ERROR_CLASS IS NULL AND ATTEMPTS > 0 THEN COALESCE(FIRST_FAILED_AT, UPDATED_AT) ELSE FIRST_FAILED_AT END, ` +
			`ERROR_CLASS = NULL, UPDATED_AT = @now, ATTEMPTS = ATTEMPTS + 1` + key + ` AND STATUS = 'TECHNICAL_FAILURE' AND ATTEMPTS < @max`),
		forgetAttempt: n(`UPDATE {t} SET ERROR_CLASS = CASE WHEN ATTEMPTS > 1 THEN 'TECHNICAL' ELSE NULL END, ATTEMPTS = ATTEMPTS - 1` + key + ` AND STATUS = 'TECHNICAL_FAILURE' AND ATTEMPTS = @attempts`),
		// A marker of a delivery that lost the race to another process:
		// taken back, with the "no outcome" text it may have written about
		// the other (live) attempt.
		takeBackAttempt: n(`UPDATE {t} SET LAST_ERROR = CASE WHEN LAST_ERROR = @marker THEN NULL ELSE LAST_ERROR END, ATTEMPTS = ATTEMPTS - 1` + key + ` AND ATTEMPTS > 0`),
		// A row the marker did not insert (an earlier attempt's, or an
		// adopted legacy row) gets the columns it may lack.
		processFromFail: n(`UPDATE {t} SET STATUS = 'PROCESSED', REASON_CODE = NULL, ERROR_CLASS = NULL, PROCESSED_AT = @now, UPDATED_AT = @now, CORRELATION_ID = COALESCE(CORRELATION_ID, @corr), PAYLOAD_HASH = COALESCE(PAYLOAD_HASH, @hash), EVENT_ID_SOURCE = COALESCE(EVENT_ID_SOURCE, @source), ORDER_KEY = COALESCE(ORDER_KEY, @okey)` + key + ` AND STATUS = 'TECHNICAL_FAILURE'`),
		// A business rejection of a marked row whose business transaction
		// rolled back (Process), or was rolled back to the item's savepoint
		// (ProcessBatch): claim and reject in one statement.
		rejectFromFail:  failing(n(`UPDATE {t} SET STATUS = 'REJECTED', REASON_CODE = @reason, ERROR_CLASS = 'BUSINESS', LAST_ERROR = @error, PROCESSED_AT = @now, UPDATED_AT = @now, CORRELATION_ID = COALESCE(CORRELATION_ID, @corr), PAYLOAD_HASH = COALESCE(PAYLOAD_HASH, @hash), EVENT_ID_SOURCE = COALESCE(EVENT_ID_SOURCE, @source), ORDER_KEY = COALESCE(ORDER_KEY, @okey)` + key + ` AND STATUS = 'TECHNICAL_FAILURE'`)),
		deadFromFailure: failing(n(`UPDATE {t} SET STATUS = 'DEAD_LETTERED', REASON_CODE = @reason, ERROR_CLASS = @class, LAST_ERROR = COALESCE(@error, LAST_ERROR), PROCESSED_AT = @now, UPDATED_AT = @now` + key + ` AND STATUS = 'TECHNICAL_FAILURE'`)),
		resetForReplay:  n(`UPDATE {t} SET STATUS = 'TECHNICAL_FAILURE', ATTEMPTS = 0, REPLAY_COUNT = REPLAY_COUNT + 1, PROCESSED_AT = NULL, ARCHIVED_AT = NULL, UPDATED_AT = @now` + key + ` AND STATUS = 'DEAD_LETTERED'`),
		// A rejection replayed after clarification keeps its story: the
		// rejection's reason and error move to LAST_ERROR. A stored entry
		// (store-then-process: PAYLOAD set) is due for the workers at once.
		reopenRejected: n(`UPDATE {t} SET STATUS = 'TECHNICAL_FAILURE', ATTEMPTS = 0, REPLAY_COUNT = REPLAY_COUNT + 1, PROCESSED_AT = NULL, ARCHIVED_AT = NULL, UPDATED_AT = @now, ` +
			`LAST_ERROR = @error, ERROR_CLASS = 'BUSINESS', NEXT_ATTEMPT_AT = CASE WHEN PAYLOAD IS NULL THEN NULL ELSE UPDATED_AT END` + key + ` AND STATUS = 'REJECTED'`),
		selectStatus:      n(`SELECT STATUS, ATTEMPTS FROM {t}` + key),
		selectAttempts:    n(`SELECT ATTEMPTS FROM {t}` + key),
		selectMarker:      n(`SELECT ERROR_CLASS, ATTEMPTS FROM {t}` + key),
		selectOrphan:      n(`SELECT CASE WHEN ` + orphanCond + ` THEN 1 ELSE 0 END FROM {t}` + key),
		presentPrefix:     strings.ReplaceAll(`SELECT EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS FROM {t} WHERE EVENT_ID IN (`, "{t}", table),
		insertStartedRows: strings.ReplaceAll(insertStartedRows, "{t}", table),
		selectOne:         n(`SELECT ` + recordColumns + ` FROM {t}` + key),
		selectByCorr:      r(`SELECT ` + recordColumns + ` FROM {t} WHERE CORRELATION_ID = ? ORDER BY CREATED_AT, EVENT_ID, CONSUMER_NAME`),
		purgeBatch:        d.Rebind(fmt.Sprintf(d.purgeBatch, table, terminalList(), purgeDue)),
		purgeTried:        purge(d.purgeTried, sqlString(table)),
		purgeKeys:         purge(d.purgeKeys),
		countPurgeable:    r(`SELECT COUNT(*) FROM {t} WHERE STATUS IN (` + terminalList() + `) AND ` + purgeDue),
		stuckFailures:     r(`SELECT ` + recordColumns + ` FROM {t} WHERE STATUS = 'TECHNICAL_FAILURE' AND ATTEMPTS >= ? ORDER BY CREATED_AT, EVENT_ID` + lim),
		hashCollisions:    r(`SELECT PAYLOAD_HASH, CONSUMER_NAME, COUNT(*) FROM {t} WHERE PAYLOAD_HASH IS NOT NULL GROUP BY PAYLOAD_HASH, CONSUMER_NAME HAVING COUNT(*) > 1 ORDER BY PAYLOAD_HASH, CONSUMER_NAME`),
		countByStatus:     r(`SELECT ` + d.exactStatus() + `, COUNT(*) FROM {t} GROUP BY ` + d.exactStatus() + ` ORDER BY 1`),
		savepoint:         `SAVEPOINT inbox_handler`,
		rollbackSavepont:  `ROLLBACK TO SAVEPOINT inbox_handler`,
		savepointItem:     `SAVEPOINT inbox_item`,
		rollbackItem:      `ROLLBACK TO SAVEPOINT inbox_item`,
		releaseItem:       map[bool]string{true: `RELEASE SAVEPOINT inbox_item`}[d.abortsOnError],
		checkTx:           map[bool]stmt{true: n(`SELECT CAST(@event AS CHAR(120))`)}[d.abortsOnError],
	}
}
