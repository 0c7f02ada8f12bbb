package mysql_test

import (
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inboxkit/dberr"
	_ "github.com/inboxkit/inboxkit/driver/mysql"
	"github.com/inboxkit/inboxkit/inbox"
)

func TestMySQLErrorIsRead(t *testing.T) {
	dup := fmt.Errorf("inbox: insert: %w", &gomysql.MySQLError{Number: 1062, SQLState: [5]byte{'2', '3', '0', '0', '0'}, Message: "Duplicate entry 'ev-1' for key 'PRIMARY'"})
	if c, ok := dberr.Of(dup); !ok || c != (dberr.Code{Database: dberr.MySQL, Number: 1062, Message: "Duplicate entry 'ev-1' for key 'PRIMARY'"}) {
		t.Errorf("dberr.Of = %+v, %v", c, ok)
	}
	if !inbox.MySQL.IsDuplicate(dup) {
		t.Error("1062 is not a duplicate")
	}
	if inbox.MySQL.IsDuplicate(&gomysql.MySQLError{Number: 1213}) {
		t.Error("a deadlock (1213) taken for a duplicate")
	}
	if c, ok := dberr.Of(fmt.Errorf("exec: %w", gomysql.ErrInvalidConn)); !ok || c.Number != 2013 {
		t.Errorf("dberr.Of(ErrInvalidConn) = %+v, %v; want 2013 CR_SERVER_LOST", c, ok)
	}
}
