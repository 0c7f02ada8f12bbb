package inbox

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL is the MariaDB (10.6+) and MySQL (8+) dialect, for
// github.com/go-sql-driver/mysql. Open the pool with parseTime=true,
// loc=UTC and time_zone='+00:00' (inbox.MySQLDSN does).
var MySQL = Dialect{
	name:        "mysql",
	placeholder: questionMark,
	isDuplicate: func(err error) bool {
		var my *mysql.MySQLError
		return errors.As(err, &my) && my.Number == 1062
	},
	purgeBatch: `DELETE FROM %[1]s WHERE STATUS IN (%[2]s) AND PROCESSED_AT < ? ORDER BY PROCESSED_AT LIMIT ?`,
	skipLocked: " FOR UPDATE SKIP LOCKED",
	limit:      func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:    utcTime,
}
