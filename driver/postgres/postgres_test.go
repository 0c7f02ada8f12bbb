package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit/dberr"
	"github.com/inboxkit/inboxkit/inbox"
)

// inbox and classify read pgx's errors through this method without linking
// pgx; a pgx upgrade that dropped it fails to compile here.
var _ interface{ SQLState() string } = (*pgconn.PgError)(nil)

func TestPgErrorIsRead(t *testing.T) {
	err := fmt.Errorf("inbox: insert: %w", &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key value"})
	if c, ok := dberr.Of(err); !ok || c != (dberr.Code{Database: dberr.Postgres, SQLState: "23505"}) {
		t.Errorf("dberr.Of = %+v, %v", c, ok)
	}
	if !inbox.Postgres.IsDuplicate(err) {
		t.Error("23505 is not a duplicate")
	}
	if inbox.Postgres.IsDuplicate(&pgconn.PgError{Code: "23503"}) {
		t.Error("a foreign-key violation (23503) taken for a duplicate")
	}
}
