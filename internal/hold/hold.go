// Package hold is the contract between inboxkit's stores and a driver that
// saves them round trips: a statement held back and sent with the
// transaction's next statement or its COMMIT (Until), and a statement
// committed on its own and sent in one round trip with the BEGIN and the
// first statement of the transaction after it (Ahead).
//
// Until's contract:
//   - the caller (outbox.Store.Add) marks the context of one ExecContext
//     inside a *sql.Tx with Until, naming what the statement does; it
//     needs nothing from the statement's result and accepts that an error
//     the statement meets is returned by the transaction's next statement
//     or by its Commit, prefixed with that name;
//   - a driver that holds statements (driver/postgres's "inboxkit-pgx")
//     sends held statements in order, before any other statement of the
//     same transaction reaches the server, so no statement of the
//     transaction can tell that one was held; a rollback drops them.
//
// A driver that does not hold ignores the mark and runs the statement at
// once, as it runs every other. Ahead is asked for (sql.Conn.Raw and a
// type assertion); a caller whose driver connection does not implement it
// runs its statements one by one.
package hold

import "context"

type key struct{}

// Until returns ctx marked: the statement run with it may be held until
// the transaction's next statement or its commit. what names it in the
// error it meets ("outbox: add message 42 to letters").
func Until(ctx context.Context, what string) context.Context {
	return context.WithValue(ctx, key{}, what)
}

// Marked reports whether ctx is marked by Until, and its name.
func Marked(ctx context.Context) (what string, ok bool) {
	what, ok = ctx.Value(key{}).(string)
	return what, ok
}

// Stmt is one statement with its arguments, in the driver's placeholders.
type Stmt struct {
	Query string
	Args  []any
}

// Ahead is implemented by a driver connection (reached through
// sql.Conn.Raw) that runs two statements in one round trip: first in a
// transaction of its own, committed before then begins; then as the first
// statement of a transaction with the default options, left open on the
// connection for the caller.
//
// The contract of BeginAfter:
//   - first returns at most one row, scanned into dest; found reports
//     whether it returned one. affected is then's count of rows.
//   - first failed: nothing of it is committed, no transaction is open,
//     and the error is returned. (A connection lost with first's COMMIT
//     in flight leaves first committed or not, as with any commit.)
//   - first succeeded and then failed: first is committed, then's
//     transaction was rolled back and is not open, dest holds first's row,
//     and the error is a *ThenError.
//   - both succeeded: first is committed, then's transaction is open, and
//     the caller's next call on the connection is its BeginTx (database/sql's
//     Conn.BeginTx, default options), which returns that transaction
//     instead of beginning another; its Commit or Rollback ends it. A
//     connection given back to the pool with it still open is closed.
type Ahead interface {
	BeginAfter(ctx context.Context, first Stmt, dest []any, then Stmt) (found bool, affected int64, err error)
}

// ThenError is BeginAfter's error when first was committed and then
// failed.
type ThenError struct{ Err error }

func (e *ThenError) Error() string { return e.Err.Error() }

func (e *ThenError) Unwrap() error { return e.Err }
