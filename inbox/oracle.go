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
	purgeBatch:  `DELETE FROM %[1]s WHERE STATUS IN (%[2]s) AND PROCESSED_AT < ? AND ROWNUM <= ?`,
	limit:       func(n string) (string, string) { return "", " FETCH FIRST " + n + " ROWS ONLY" },
	timeArg:     utcTime,

	// Oracle refuses FETCH FIRST with FOR UPDATE; ROWNUM limits before the
	// skip, so a claim may return fewer rows than asked. Untested: there is
	// no Oracle server in CI.
	claim: `SELECT %[3]s FROM %[1]s WHERE %[2]s AND ROWNUM <= @n FOR UPDATE SKIP LOCKED`,
}
