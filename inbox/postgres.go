package inbox

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Postgres is the PostgreSQL dialect, for the pgx stdlib driver
// (database/sql driver name "pgx").
var Postgres = Dialect{
	name:        "postgres",
	placeholder: dollar,
	isDuplicate: func(err error) bool {
		var pg *pgconn.PgError
		return errors.As(err, &pg) && pg.Code == "23505"
	},
	purgeBatch: `DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE STATUS IN (%[2]s) AND PROCESSED_AT < ? LIMIT ?)`,
	skipLocked: " FOR UPDATE SKIP LOCKED",
	limit:      func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:    utcTime,
}
