package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inboxkit/internal/hold"
)

// DriverName is the database/sql driver this package registers beside
// pgx's "pgx": pgx's own driver, with six differences that save round
// trips and change no result. A transaction's BEGIN is sent in one pipeline
// with its first statement (a transaction that runs none costs nothing).
// A statement its caller marked as one that may wait (outbox.Store.Add's
// INSERT; the inbox's first delivery's INSERT for a handler declared with
// inbox.Store.ProcessInTx, which learns its count of rows when it is sent;
// a worker's PROCESSED row, which fails its transaction when the entry's
// lease is lost) is held back in the transaction and sent in one pipeline
// with the transaction's next statement or with its COMMIT, so that the
// write costs no round trip of its own. So is a statement with arguments
// of a handler the inbox runs in a batch without savepoints
// (inbox.BatchItem.EffectsInTx, hold.Pipelined); its RowsAffected, read
// before then, sends it. A statement without arguments its caller marked
// as one statement (hold.Single: the inbox's SAVEPOINT and RELEASE of a
// batch item) goes in that pipeline too, instead of after it. Its
// connections are internal/hold's Ahead: the inbox sends a delivery's
// attempt marker, committed on its own, and the BEGIN and claim of the
// business transaction after it in one pipeline.
// And a statement marked hold.RollbackFirst (the inbox's read of the
// row a first delivery's INSERT found) goes in one pipeline with the
// ROLLBACK of its transaction. Every statement is otherwise pgx's, sent
// as pgx sends it. The DSN is pgx's.
//
// What a caller of BeginTx sees: an error of the BEGIN itself (a
// connection lost while idle) comes from the first statement instead.
//
// What a caller of Add sees: the row is written in the transaction as
// before, and visible to the transaction's later statements (held ones go
// first); an error the held INSERT meets (a message id given twice) is
// returned by the next statement or by Commit, prefixed "outbox: add
// message ID to DESTINATION", instead of by Add. A rollback drops it.
//
// What a handler in a batch without savepoints sees: its ExecContext with
// arguments returns nil, and the statement's error, if it meets one, is
// returned named by a later statement of the batch, which then runs again
// with savepoints, where the handler's statements are sent at once.
const DriverName = "inboxkit-pgx"

func init() { sql.Register(DriverName, holdDriver{}) }

// holdDriver is pgx's driver with connections that hold marked statements.
type holdDriver struct{}

// HoldsStatements: the connections keep hold's contract (hold.Driver).
func (holdDriver) HoldsStatements() {}

func (holdDriver) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return wrapConn(c)
}

func (holdDriver) OpenConnector(name string) (driver.Connector, error) {
	dc, ok := stdlib.GetDefaultDriver().(driver.DriverContext)
	if !ok {
		return nil, errors.New("postgres: pgx's driver has no connector")
	}
	cn, err := dc.OpenConnector(name)
	if err != nil {
		return nil, err
	}
	return holdConnector{cn}, nil
}

type holdConnector struct{ driver.Connector }

func (c holdConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return wrapConn(dc)
}

func (holdConnector) Driver() driver.Driver { return holdDriver{} }

func wrapConn(dc driver.Conn) (driver.Conn, error) {
	c, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("postgres: pgx's driver returned a %T, not a *stdlib.Conn", dc)
	}
	return &conn{Conn: c}, nil
}

// conn is pgx's connection (every method not written here is pgx's) that
// begins its transactions with their first statement, holds marked
// statements of its open transaction, and is hold.Ahead.
//
// Invariant: begin and held are empty outside a transaction; begin (the
// transaction's BEGIN, not sent yet) goes before anything of the
// transaction, and no statement of the transaction reaches the server
// while an earlier one is held: an Exec with arguments sends begin and
// the held ones in one pipeline with itself; an Exec without (pgx's simple
// protocol, perhaps several statements), a Query, a Prepare and a
// prepared statement send them first; Commit sends them with the COMMIT;
// Rollback drops them. open: BeginAfter left a transaction open for the
// next BeginTx (inTx false, nothing else may run).
type conn struct {
	*stdlib.Conn
	inTx  bool
	open  bool
	begin string
	held  []heldStmt
	// over: a statement marked hold.RollbackFirst ended the transaction
	// database/sql still holds (inTx false): its Rollback sends nothing.
	over bool
	// unbegun: the pipeline that carried the transaction's BEGIN failed
	// before the BEGIN ran (pgx prepares a pipeline's new statements
	// first): no transaction is open on the server, so every statement of
	// this one fails with it until its Rollback, which sends nothing,
	// rather than run on its own.
	unbegun error
}

type heldStmt struct {
	what, query string
	args        []any
	n           *hold.Count // Counted's: what the statement met goes here
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.Conn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	begin, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	if c.open {
		if begin != "begin" {
			return nil, fmt.Errorf("postgres: the transaction BeginAfter left open has the default options, not %q", begin)
		}
		begin = "" // sent
	}
	c.inTx, c.open, c.over, c.unbegun, c.begin, c.held = true, false, false, nil, begin, c.held[:0]
	return &tx{c: c, ctx: ctx}, nil
}

// errOpen is the error of a statement on a connection whose transaction
// BeginAfter left open: the contract says BeginTx comes next.
var errOpen = errors.New("postgres: BeginAfter left a transaction open on this connection: its BeginTx must come next")

// BeginAfter is hold.Ahead's: BEGIN, first, COMMIT, BEGIN and then in one
// pgx pipeline. The marker's COMMIT ends first's transaction before the
// second BEGIN, so first is committed before then runs (a pipeline of
// statements without BEGIN would be one implicit transaction).
func (c *conn) BeginAfter(ctx context.Context, first hold.Stmt, dest []any, then hold.Stmt) (found bool, affected int64, err error) {
	if c.inTx || c.open {
		return false, 0, errors.New("postgres: BeginAfter inside a transaction")
	}
	pg := c.Conn.Conn()
	if pg.IsClosed() {
		return false, 0, driver.ErrBadConn
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(first.Query, first.Args...)
	b.Queue("commit")
	b.Queue("begin")
	b.Queue(then.Query, then.Args...)
	br := pg.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		found = true
		if err = br.QueryRow().Scan(dest...); errors.Is(err, pgx.ErrNoRows) {
			found, err = false, nil
		}
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
		if err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	committed := err == nil
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		c.open = true
		return found, tag.RowsAffected(), nil
	}
	if pg.PgConn().TxStatus() != 'I' {
		if _, rerr := pg.Exec(ctx, "rollback"); rerr != nil {
			_ = pg.Close(ctx) // in an undefined state
		}
	}
	if committed {
		return found, 0, &hold.ThenError{Err: err}
	}
	return false, 0, err
}

// rollbackFirst is hold.RollbackFirst's: the transaction's ROLLBACK (none
// when its BEGIN was never sent; held statements are dropped) and the
// statement in one pgx pipeline; a failed transaction's ROLLBACK alone
// first. After the ROLLBACK the statement runs in the pipeline's implicit
// transaction, committed at its end.
func (c *conn) rollbackFirst(ctx context.Context, r *hold.Rolled, query string, args []any) (driver.Result, error) {
	begun := c.begin == ""
	c.inTx, c.over, c.begin, c.held = false, true, "", c.held[:0]
	r.Done, r.Found = true, false
	pg := c.Conn.Conn()
	if begun && pg.PgConn().TxStatus() == 'E' {
		// A failed transaction refuses the Parse pgx sends, in a round
		// trip of its own before the pipeline, for a statement it has not
		// prepared on this connection yet: roll back first.
		if _, err := pg.Exec(ctx, "rollback"); err != nil {
			_ = pg.Close(ctx) // in an undefined state
			return nil, err
		}
		begun = false
	}
	b := &pgx.Batch{}
	if begun {
		b.Queue("rollback")
	}
	b.Queue(query, args...)
	br := pg.SendBatch(ctx, b)
	var err error
	if begun {
		_, err = br.Exec()
	}
	if err == nil {
		r.Found = true
		if err = br.QueryRow().Scan(r.Dest...); errors.Is(err, pgx.ErrNoRows) {
			r.Found, err = false, nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && pg.PgConn().TxStatus() != 'I' {
		if _, rerr := pg.Exec(ctx, "rollback"); rerr != nil {
			_ = pg.Close(ctx) // in an undefined state
		}
	}
	return driver.RowsAffected(0), err
}

// errOver is the error of Commit after hold.RollbackFirst.
var errOver = errors.New("postgres: a statement marked hold.RollbackFirst rolled this transaction back")

// beginSQL is the BEGIN statement for opts, as pgx's driver writes it.
func beginSQL(opts driver.TxOptions) (string, error) {
	begin := "begin"
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		begin += " isolation level read uncommitted"
	case sql.LevelReadCommitted:
		begin += " isolation level read committed"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		begin += " isolation level repeatable read"
	case sql.LevelSerializable:
		begin += " isolation level serializable"
	default:
		return "", fmt.Errorf("postgres: unsupported isolation level %v", sql.IsolationLevel(opts.Isolation))
	}
	if opts.ReadOnly {
		begin += " read only"
	}
	return begin, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.open {
		return nil, errOpen
	}
	if c.inTx {
		if c.unbegun != nil {
			return nil, c.unbegun
		}
		if r, ok := hold.RollbackMarked(ctx); ok {
			return c.rollbackFirst(ctx, r, query, values(args))
		}
		if what, n, ok := hold.Marked(ctx); ok {
			c.held = append(c.held, heldStmt{what: what, query: query, args: heldValues(args), n: n})
			return heldResult(what), nil
		}
		if what, ok := hold.PipelineMarked(ctx); ok && len(args) > 0 {
			r := &pipelinedResult{c: c, ctx: ctx, what: what}
			c.held = append(c.held, heldStmt{what: what, query: query, args: heldValues(args), n: &r.n})
			return r, nil
		}
		if (c.begin != "" || len(c.held) > 0) && (len(args) > 0 || hold.SingleMarked(ctx)) {
			// With arguments a statement is one statement, which a
			// pipeline can carry; without, pgx sends it as a simple
			// query, which may hold several (sent after the held ones,
			// below), unless its caller says it is one (hold.Single).
			tag, err := c.sendHeld(ctx, query, values(args))
			if err != nil {
				return nil, err
			}
			return driver.RowsAffected(tag.RowsAffected()), nil
		}
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
	}
	return c.Conn.ExecContext(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.open {
		return nil, errOpen
	}
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.QueryContext(ctx, query, args)
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.open {
		return nil, errOpen
	}
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	s, err := c.Conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	ps, ok := s.(*stdlib.Stmt)
	if !ok {
		return s, nil
	}
	return &stmt{Stmt: ps, c: c}, nil
}

// flush sends the BEGIN and the held statements not sent yet, if any, in
// one pipeline.
func (c *conn) flush(ctx context.Context) error {
	if c.unbegun != nil {
		return c.unbegun
	}
	if c.begin == "" && len(c.held) == 0 {
		return nil
	}
	_, err := c.sendHeld(ctx, "", nil)
	return err
}

// sendHeld sends the BEGIN not sent yet, the held statements and then last
// (none when "") in one pipeline, and returns last's command tag. An error
// of a held statement is returned prefixed with its name; the server then
// runs nothing after it, and the transaction is failed, as after any
// failed statement. When the pipeline failed before its BEGIN ran, the
// transaction is unbegun.
func (c *conn) sendHeld(ctx context.Context, last string, args []any) (pgconn.CommandTag, error) {
	begin := c.begin
	tag, err := c.sendPipeline(ctx, last, args)
	if err != nil && begin != "" && c.Conn.Conn().PgConn().TxStatus() == 'I' {
		c.unbegun = fmt.Errorf("postgres: the transaction did not begin: %w", err)
	}
	return tag, err
}

// sendPipeline is sendHeld's pipeline.
func (c *conn) sendPipeline(ctx context.Context, last string, args []any) (pgconn.CommandTag, error) {
	begin, held := c.begin, c.held
	c.begin, c.held = "", c.held[:0]
	b := &pgx.Batch{}
	if begin != "" {
		b.Queue(begin)
	}
	for _, h := range held {
		b.Queue(h.query, h.args...)
	}
	if last != "" {
		b.Queue(last, args...)
	}
	br := c.Conn.Conn().SendBatch(ctx, b)
	if begin != "" {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return pgconn.CommandTag{}, err
		}
	}
	for _, h := range held {
		tag, err := br.Exec()
		if h.n != nil {
			*h.n = hold.Count{Sent: true, Rows: tag.RowsAffected(), Err: err}
		}
		if err != nil {
			_ = br.Close()
			return pgconn.CommandTag{}, fmt.Errorf("%s: %w", h.what, err)
		}
	}
	var tag pgconn.CommandTag
	var err error
	if last != "" {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func values(args []driver.NamedValue) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a.Value
	}
	return out
}

// heldValues is values for a statement that is held: a slice of bytes
// ([]byte, json.RawMessage, ...) is copied, since its caller may reuse it
// once ExecContext returned.
func heldValues(args []driver.NamedValue) []any {
	out := values(args)
	for i, v := range out {
		if b, ok := v.([]byte); ok {
			if b != nil {
				out[i] = append([]byte(nil), b...)
			}
			continue
		}
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 && !rv.IsNil() {
			c := reflect.MakeSlice(rv.Type(), rv.Len(), rv.Len())
			reflect.Copy(c, rv)
			out[i] = c.Interface()
		}
	}
	return out
}

// pipelinedResult is the result of a statement held for hold.Pipelined:
// RowsAffected sends it when it is still held, and n is what it met.
type pipelinedResult struct {
	c    *conn
	ctx  context.Context
	what string
	n    hold.Count
}

func (r *pipelinedResult) LastInsertId() (int64, error) {
	return 0, fmt.Errorf("postgres: %s: LastInsertId is not supported by PostgreSQL", r.what)
}

// RowsAffected is called with the connection locked by database/sql, so
// that it may send the held statements: the transaction's, up to and with
// this one, when it is still held.
func (r *pipelinedResult) RowsAffected() (int64, error) {
	if !r.n.Sent && r.c.holds(&r.n) {
		if err := r.c.flush(r.ctx); err != nil && !r.n.Sent {
			return 0, err // the BEGIN or a statement before it failed
		}
	}
	switch {
	case !r.n.Sent:
		return 0, fmt.Errorf("postgres: %s: not run: its transaction ended, or a statement held before it failed", r.what)
	case r.n.Err != nil:
		return 0, fmt.Errorf("%s: %w", r.what, r.n.Err)
	}
	return r.n.Rows, nil
}

// holds reports whether the statement counting into n is held.
func (c *conn) holds(n *hold.Count) bool {
	for _, h := range c.held {
		if h.n == n {
			return true
		}
	}
	return false
}

// heldResult is the result of a held statement: it has not run yet.
type heldResult string

func (r heldResult) LastInsertId() (int64, error) {
	return 0, fmt.Errorf("postgres: %s: %w", string(r), hold.ErrHeld)
}

func (r heldResult) RowsAffected() (int64, error) {
	return 0, fmt.Errorf("postgres: %s: %w", string(r), hold.ErrHeld)
}

// tx ends the transaction: the held statements go with its COMMIT; a
// transaction whose BEGIN was never sent ends without a round trip. The
// rest is pgx's own Commit and Rollback, with the context of BeginTx.
type tx struct {
	c   *conn
	ctx context.Context
}

func (t *tx) Commit() error {
	c := t.c
	if c.over {
		c.over = false
		return errOver
	}
	c.inTx = false
	if err := c.unbegun; err != nil {
		c.unbegun = nil
		return err
	}
	if c.begin != "" && len(c.held) == 0 {
		c.begin = ""
		return nil // nothing was sent: nothing to commit
	}
	pg := c.Conn.Conn()
	var tag pgconn.CommandTag
	var err error
	if c.begin != "" || len(c.held) > 0 {
		tag, err = c.sendHeld(t.ctx, "commit", nil)
		if err != nil && pg.PgConn().TxStatus() == 'E' {
			// A held statement failed: end the failed transaction,
			// and the connection goes back idle.
			if _, rerr := pg.Exec(t.ctx, "rollback"); rerr == nil {
				return err
			}
		}
	} else {
		tag, err = pg.Exec(t.ctx, "commit")
	}
	if err != nil {
		if pg.PgConn().TxStatus() != 'I' {
			_ = pg.Close(t.ctx) // in no state to be used again
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *tx) Rollback() error {
	c := t.c
	if c.over {
		c.over = false
		return nil // rolled back by rollbackFirst
	}
	begun := c.begin == "" && c.unbegun == nil
	c.inTx, c.unbegun, c.begin, c.held = false, nil, "", c.held[:0]
	if !begun {
		return nil // nothing was sent, or nothing began: nothing to roll back
	}
	pg := c.Conn.Conn()
	if _, err := pg.Exec(t.ctx, "rollback"); err != nil {
		_ = pg.Close(t.ctx) // in an undefined state
		return err
	}
	return nil
}

// stmt is a prepared statement of conn: it sends the held statements
// before it runs.
type stmt struct {
	*stdlib.Stmt
	c *conn
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.QueryContext(ctx, args)
}
