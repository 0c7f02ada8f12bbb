package dberr_test

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit/dberr"
)

// A wrapped pgx error is read without this package linking pgx: through the
// SQLState() method of *pgconn.PgError.
func ExampleOf() {
	err := fmt.Errorf("inbox: insert: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	c, ok := dberr.Of(err)
	fmt.Println(ok, c.Database, c.SQLState)
	// Output: true postgres 40P01
}
