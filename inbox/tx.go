package inbox

import (
	"context"
	"database/sql"
	"fmt"
)

// txn is a transaction that ends exactly once, by commit or by rollback:
// every caller defers rollback (a no-op after either) and may end it early.
type txn struct {
	*sql.Tx
	ended bool
	// customPlans: the dialect's customPlans ran in it.
	customPlans bool
}

// begin starts a transaction; what names the step in the error
// ("inbox: <what>: begin: ...").
func (s *Store) begin(ctx context.Context, what string, opts *sql.TxOptions) (*txn, error) {
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: begin: %w", what, err)
	}
	return &txn{Tx: tx}, nil
}

// inTx runs fn in a transaction of its own and commits it when fn
// returns nil; what names the step in a begin's or commit's error.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx *txn) error) error {
	tx, err := s.begin(ctx, what, nil)
	if err != nil {
		return err
	}
	defer tx.rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("inbox: %s: commit: %w", what, err)
	}
	return nil
}

// commit commits; the transaction has ended whatever it returns.
func (t *txn) commit() error {
	t.ended = true
	return t.Tx.Commit()
}

// rollback rolls back unless the transaction has ended.
func (t *txn) rollback() {
	if !t.ended {
		t.ended = true
		_ = t.Tx.Rollback()
	}
}

// execer is what a statement runs on: the pool (each statement its own
// transaction) or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}
