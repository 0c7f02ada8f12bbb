package inbox

import "strings"

// Oracle is the Oracle (12c+) dialect. Its driver, github.com/godror/godror,
// needs the Oracle client libraries at run time and is therefore not
// imported here: register it in your own main package (or build inboxctl
// with the "oracle" tag). There is no Oracle server in the project's CI: the
// statements are unit-tested as text only.
//
// Duplicates are recognised by ORA-00001 in the error text, which is how
// every Oracle driver reports a unique constraint violation.
var Oracle = Dialect{
	name:        "oracle",
	placeholder: colon,
	isDuplicate: func(err error) bool {
		return strings.Contains(err.Error(), "ORA-00001")
	},
	purgeBatch: `DELETE FROM %[1]s WHERE STATUS IN (%[2]s) AND PROCESSED_AT < ? AND ROWNUM <= ?`,
	skipLocked: " FOR UPDATE SKIP LOCKED",
	limit:      func(n string) (string, string) { return "", " FETCH FIRST " + n + " ROWS ONLY" },
	timeArg:    utcTime,
}
