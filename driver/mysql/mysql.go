// Package mysql links MySQL and MariaDB support: the database/sql driver
// github.com/go-sql-driver/mysql, registered as "mysql", and the reader of
// its errors. Use it with inbox.MySQL; open the pool with parseTime=true,
// loc=UTC and time_zone='+00:00', and interpolateParams=true (a statement
// with arguments is then one round trip instead of a prepare, an execute
// and a close: docs/decisions.md, 2026-12-03):
//
//	import _ "github.com/inboxkit/inboxkit/driver/mysql"
//
//	db, err := sql.Open("mysql", "user:pass@tcp(host:3306)/db?parseTime=true&loc=UTC&time_zone=%27%2B00%3A00%27&interpolateParams=true")
//	store, err := inbox.New(db, inbox.MySQL, inbox.Config{ClassifyFunc: classify.Of})
//
// The driver's *MySQLError has only fields (Number, Message), no method
// that code without the driver could read them by, so this package is
// required: without it inbox.New refuses inbox.MySQL with an error naming
// this import, instead of missing duplicate events (error 1062), and
// classify cannot tell a deadlock (1213) from an unknown error.
//
// The driver's ErrInvalidConn ("invalid connection": the connection broke
// during a statement) reads as error 2013, CR_SERVER_LOST, the code the
// MySQL client library gives the same condition.
package mysql

import (
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inboxkit/dberr"
)

// crServerLost is CR_SERVER_LOST, "Lost connection to MySQL server during query".
const crServerLost = 2013

func init() { dberr.Register(dberr.MySQL, read) }

func read(err error) (dberr.Code, bool) {
	if e, ok := err.(*gomysql.MySQLError); ok {
		return dberr.Code{Number: int(e.Number), Message: e.Message}, true
	}
	if err == gomysql.ErrInvalidConn { // a sentinel, compared like errors.Is does

		return dberr.Code{Number: crServerLost, Message: err.Error()}, true
	}
	return dberr.Code{}, false
}
