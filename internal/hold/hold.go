// Package hold marks a statement that its caller lets the driver hold back
// and send with the transaction's next statement or with its COMMIT, in
// one round trip with it.
//
// The contract between the two sides:
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
// once, as it runs every other.
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
