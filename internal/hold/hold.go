// Package hold is the contract between inboxkit's stores and a driver that
// saves them round trips: a statement held back and sent with the
// transaction's next statement or its COMMIT (Until; Pipelined, for
// statements whose result may still be read), and a statement
// committed on its own and sent in one round trip with the BEGIN and the
// first statement of the transaction after it (Ahead), and one sent in
// one round trip with the ROLLBACK of the transaction before it
// (RollbackFirst).
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
// Counted is Until for a caller that needs the statement's count of rows
// (inbox's first delivery, whose INSERT tells a new event from a
// duplicate): the driver that holds it stores what it met in the Count
// when it sends it, and the statement's Result says ErrHeld until then.
//
// A driver that does not hold ignores the mark and runs the statement at
// once, as it runs every other (its Result then counts the rows, and the
// Count stays unsent). Ahead is asked for (sql.Conn.Raw and a
// type assertion); a caller whose driver connection does not implement it
// runs its statements one by one.
package hold

import (
	"context"
	"errors"
)

type key struct{}

// mark is a context's mark: the statement's name, and where its count
// goes (nil for Until).
type mark struct {
	what string
	n    *Count
}

// Until returns ctx marked: the statement run with it may be held until
// the transaction's next statement or its commit. what names it in the
// error it meets ("outbox: add message 42 to letters").
func Until(ctx context.Context, what string) context.Context {
	return context.WithValue(ctx, key{}, mark{what: what})
}

// Count is what a held statement marked by Counted met when the driver
// sent it: with the transaction's next statement or with its COMMIT.
// Unsent after a rollback, and with a driver that does not hold.
type Count struct {
	// Sent: the statement reached the server; Rows and Err are its.
	Sent bool
	// Rows is its count of rows, when Err is nil.
	Rows int64
	// Err is its error, unnamed (the statement that carried it returned
	// it named).
	Err error
}

// Counted returns ctx marked as Until marks it, and the held statement's
// count of rows and error are stored in n when it is sent.
func Counted(ctx context.Context, what string, n *Count) context.Context {
	return context.WithValue(ctx, key{}, mark{what: what, n: n})
}

// Marked reports whether ctx is marked by Until or Counted, its name, and
// where its count goes (nil for Until).
func Marked(ctx context.Context) (what string, n *Count, ok bool) {
	m, ok := ctx.Value(key{}).(mark)
	return m.what, m.n, ok
}

type pipelinedKey struct{}

// Pipelined returns ctx marked for the statements of a caller that does
// not need each answered before it sends the next (the inbox marks a
// handler's context so in a batch run without savepoints, whose failure
// of any kind is run again with them). A driver that holds statements
// may hold an ExecContext with arguments run with it in a transaction,
// as Until holds one, and:
//   - its Result's RowsAffected sends it (with the BEGIN and the held
//     statements before it) when it was not sent yet, and returns its
//     count or its error;
//   - its error is returned, prefixed with what, by the statement that
//     sends it: the transaction's next statement that is not held, a
//     RowsAffected, or Commit; a rollback drops it;
//   - its arguments are taken when it is sent: a slice of bytes is copied
//     when it is held, a value the caller changes after ExecContext
//     returns (an element of another slice it passed) is sent changed.
//
// A statement whose context is marked by Until or Counted as well is held
// as that mark says.
func Pipelined(ctx context.Context, what string) context.Context {
	return context.WithValue(ctx, pipelinedKey{}, what)
}

// PipelineMarked reports whether ctx is marked by Pipelined, and its
// name.
func PipelineMarked(ctx context.Context) (what string, ok bool) {
	what, ok = ctx.Value(pipelinedKey{}).(string)
	return what, ok
}

type singleKey struct{}

// Single returns ctx marked for the ExecContext, without arguments, of one
// statement (the inbox's SAVEPOINT and RELEASE SAVEPOINT of a batch item):
// a driver that holds statements may send it in one pipeline after the
// BEGIN and the statements it holds, as it sends a statement with
// arguments, instead of sending those first in a round trip of their own
// (a statement without arguments may be several, which a pipeline cannot
// carry). It is not held: it runs when ExecContext is called, and an error
// of a statement sent before it is its error, named as Until says.
func Single(ctx context.Context) context.Context {
	return context.WithValue(ctx, singleKey{}, true)
}

// SingleMarked reports whether ctx is marked by Single.
func SingleMarked(ctx context.Context) bool {
	ok, _ := ctx.Value(singleKey{}).(bool)
	return ok
}

// ErrHeld is wrapped by the error of a held statement's RowsAffected and
// LastInsertId: it has not run yet.
var ErrHeld = errors.New("held for the transaction's next statement or its commit")

// Rolled is what a driver did with a statement marked by RollbackFirst.
type Rolled struct {
	// Done: the driver rolled the transaction back and ran the statement
	// after it, on its own, in the same round trip. False: it does not
	// (the mark was ignored): the statement ran in the transaction as any
	// other, and Dest and Found are untouched.
	Done bool
	// Dest receives the statement's row, if it returned one (Found).
	Dest  []any
	Found bool
}

type rollbackKey struct{}

// RollbackFirst returns ctx marked for the ExecContext of a statement
// through a *sql.Tx that returns at most one row: a driver that does
// (driver/postgres's "inboxkit-pgx") sends the transaction's ROLLBACK and
// the statement in one round trip, the statement outside the
// transaction, committed on its own, and scans its row into r.Dest. The
// transaction is then over on the server: the caller's next call on the
// *sql.Tx is its Rollback, which sends nothing.
func RollbackFirst(ctx context.Context, r *Rolled) context.Context {
	return context.WithValue(ctx, rollbackKey{}, r)
}

// RollbackMarked returns the Rolled of a ctx marked by RollbackFirst.
func RollbackMarked(ctx context.Context) (*Rolled, bool) {
	r, ok := ctx.Value(rollbackKey{}).(*Rolled)
	return r, ok
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

// Driver is implemented by a database/sql driver (sql.DB.Driver) whose
// connections keep this package's contract: they hold statements marked
// by Until, Counted and Pipelined, honour RollbackFirst and Single, are
// Ahead, and send a transaction's BEGIN with its first statement. A store
// chooses its statements for such a driver where the round trips differ.
type Driver interface{ HoldsStatements() }
