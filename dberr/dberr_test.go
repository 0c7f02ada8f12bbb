package dberr_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	// The plain MySQL driver, not inboxkit's driver/mysql: this test binary
	// is the program that forgot the driver package.
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit/dberr"
	"github.com/inboxkit/inboxkit/inbox"
)

// codeErr has a Code() int method like modernc's *sqlite.Error, but is not
// a SQLite error.
type codeErr struct{}

func (codeErr) Error() string { return "http 5" }
func (codeErr) Code() int     { return 5 }

func TestOf(t *testing.T) {
	pg := &pgconn.PgError{Code: "40P01"}
	for _, tc := range []struct {
		name string
		err  error
		want dberr.Code
		ok   bool
	}{
		{"postgres", pg, dberr.Code{Database: dberr.Postgres, SQLState: "40P01"}, true},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", pg)), dberr.Code{Database: dberr.Postgres, SQLState: "40P01"}, true},
		{"joined", errors.Join(errors.New("rollback failed"), fmt.Errorf("exec: %w", pg)), dberr.Code{Database: dberr.Postgres, SQLState: "40P01"}, true},
		{"another package's Code() int", codeErr{}, dberr.Code{}, false},
		{"plain", errors.New("boom"), dberr.Code{}, false},
		{"nil", nil, dberr.Code{}, false},
		{"mysql without driver/mysql", &gomysql.MySQLError{Number: 1062}, dberr.Code{}, false},
	} {
		if got, ok := dberr.Of(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("%s: Of = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRegistered(t *testing.T) {
	for db, want := range map[string]bool{dberr.Postgres: true, dberr.SQLite: true, dberr.MySQL: false, "oracle": false} {
		if got := dberr.Registered(db); got != want {
			t.Errorf("Registered(%q) = %v, want %v", db, got, want)
		}
	}
}

// A program that imports the plain MySQL driver but not driver/mysql cannot
// recognise a duplicate event: inbox.New refuses the dialect and names the
// import, instead of letting duplicates through (rule 1). The other
// dialects need no driver package.
func TestNewRefusesMySQLWithoutDriverPackage(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/inboxkit") // does not connect
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = inbox.New(db, inbox.MySQL, inbox.Config{})
	if !errors.Is(err, inbox.ErrDriverNotLinked) || !strings.Contains(err.Error(), `import _ "github.com/inboxkit/inboxkit/driver/mysql"`) {
		t.Fatalf("New(MySQL) = %v; want ErrDriverNotLinked naming driver/mysql", err)
	}
	t.Log(err)
	for _, d := range []inbox.Dialect{inbox.Postgres, inbox.SQLite, inbox.Oracle} {
		if _, err := inbox.New(db, d, inbox.Config{}); err != nil {
			t.Errorf("New(%s) = %v", d, err)
		}
	}
}
