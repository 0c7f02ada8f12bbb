// Package driver is the directory of the per-database packages. A program
// imports one for each database it uses; they link the database/sql driver
// and teach the inbox and the classifier that driver's errors. The inbox and
// classify packages link no driver, so a program that only classifies errors
// stays small.
//
//	database          import in your main package                        sql.Open driver name
//	PostgreSQL        _ "github.com/inboxkit/inboxkit/driver/postgres"    "inboxkit-pgx" (postgres.DriverName) or "pgx"
//	MySQL, MariaDB    _ "github.com/inboxkit/inboxkit/driver/mysql"       "mysql"
//	SQLite            _ "github.com/inboxkit/inboxkit/driver/sqlite"      "sqlite"
//	Oracle            _ "github.com/inboxkit/inboxkit/driver/oracle"      "oracle" (go-ora, pure Go)
//
// PostgreSQL, SQLite and Oracle errors are read through what the drivers'
// errors already expose (a SQLState() method, a Code() method, the ORA-nnnnn
// text; see package dberr), so importing the driver itself works as well:
// _ "github.com/jackc/pgx/v5/stdlib", _ "modernc.org/sqlite",
// _ "github.com/sijms/go-ora/v2" or, with cgo and Oracle's client libraries,
// _ "github.com/godror/godror". MySQL's errors have no such method:
// driver/mysql is required, and inbox.New refuses inbox.MySQL without it,
// naming the import, rather than miss duplicates.
package driver
