package inbox

import "strings"

// Oracle is the Oracle (12c+) dialect, for the pure-Go driver
// github.com/sijms/go-ora/v2 (database/sql driver name "oracle"; import
// _ "github.com/inboxkit/inboxkit/driver/oracle") or github.com/godror/godror
// (cgo and Oracle's client libraries; inboxctl links it only when built with
// -tags godror). This package imports neither. There is no Oracle server in
// the project's CI: the statements, the migration plan and the error mapping
// are tested offline only.
//
// Duplicates are recognised by ORA-00001 in the error text, which is how
// every Oracle driver reports a unique constraint violation; no driver
// package is needed for it.
var Oracle = Dialect{
	name: "oracle",
	isDuplicate: func(err error) bool {
		return strings.Contains(err.Error(), "ORA-00001")
	},
	placeholder: colon,
	purgeBatch:  `DELETE FROM %[1]s WHERE STATUS IN (%[2]s) AND %[3]s AND ROWNUM <= ?`,
	limit:       func(n string) (string, string) { return "", " FETCH FIRST " + n + " ROWS ONLY" },
	timeArg:     utcTime,

	// Oracle refuses FETCH FIRST with FOR UPDATE; ROWNUM limits before the
	// skip, so a claim may return fewer rows than asked. Untested: there is
	// no Oracle server in CI.
	claim: `SELECT %[3]s FROM %[1]s WHERE %[2]s AND ROWNUM <= @n FOR UPDATE SKIP LOCKED`,

	schema: schemaSQL{
		varchar: "VARCHAR2(%d)", integer: "NUMBER(10)", count: "NUMBER(10) DEFAULT 0 NOT NULL", time: "TIMESTAMP",
		created: "TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL", blob: "BLOB", text: "CLOB",
		namedPrimaryKey: true,
		columnsQuery:    `SELECT COLUMN_NAME FROM USER_TAB_COLUMNS WHERE TABLE_NAME = UPPER(:1)`,
		indexesQuery:    `SELECT INDEX_NAME FROM USER_INDEXES WHERE TABLE_NAME = UPPER(:1)`,
		existsQuery:     `SELECT COUNT(*) FROM USER_TABLES WHERE TABLE_NAME = UPPER(:1)`,
		// DBMS_LOCK (needs EXECUTE on DBMS_LOCK).
		lock:   oracleMigrateLockAlloc + `r := DBMS_LOCK.REQUEST(h, DBMS_LOCK.X_MODE, 600, FALSE); IF r NOT IN (0, 4) THEN RAISE_APPLICATION_ERROR(-20001, 'inboxkit: migration lock not granted: ' || r); END IF; END;`,
		unlock: oracleMigrateLockAlloc + `r := DBMS_LOCK.RELEASE(h); END;`,
	},
}

const oracleMigrateLockAlloc = `DECLARE h VARCHAR2(128); r INTEGER; BEGIN DBMS_LOCK.ALLOCATE_UNIQUE('INBOXKIT_MIGRATE_' || UPPER(:1), h); `
