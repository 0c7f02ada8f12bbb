package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// What a package beside inbox (outbox) reuses of a Dialect: its time
// binding, its locking transactions, its migration lock and version table.
// inbox never imports such a package.

// NullTime scans a timestamp column whatever the driver returns for it
// (time.Time, or text in SQLite), in UTC; Valid is false for NULL.
type NullTime = dbTime

// Ptr returns the time, or nil when it is NULL.
func (t dbTime) Ptr() *time.Time { return t.ptr() }

// BindTime converts t for binding as a timestamp of this dialect (UTC; in
// SQLite the fixed-width text that sorts in time order).
func (d Dialect) BindTime(t time.Time) any { return d.timeArg(t) }

// LockingTx returns the options of a transaction that locks rows by key
// (claims): READ COMMITTED on MySQL, nil (the default) elsewhere.
func (d Dialect) LockingTx() *sql.TxOptions { return d.lockingTx }

// TransactionalDDL reports whether a schema change and its version row
// commit as a whole (PostgreSQL).
func (d Dialect) TransactionalDDL() bool { return d.schema.transactionalDDL }

// VersionTableDDL is the CREATE TABLE of INBOXKIT_SCHEMA_VERSION, which
// records the migration steps of every versioned table of inboxkit.
func (d Dialect) VersionTableDDL() string { return versionTableDDL(d) }

// VersionTableExists reports whether INBOXKIT_SCHEMA_VERSION exists.
func (d Dialect) VersionTableExists(ctx context.Context, q Querier) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, d.schema.existsQuery, VersionTable).Scan(&n); err != nil {
		return false, fmt.Errorf("inbox: look for %s: %w", VersionTable, err)
	}
	return n > 0, nil
}

// TableExists reports whether table exists in the current schema.
func (d Dialect) TableExists(ctx context.Context, q Querier, table string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, d.schema.existsQuery, table).Scan(&n); err != nil {
		return false, fmt.Errorf("inbox: look for table %s: %w", table, err)
	}
	return n > 0, nil
}

// Querier is what reads a schema: a *sql.DB, *sql.Conn or *sql.Tx.
type Querier = querier

// WithMigrationLock runs fn on one connection of db while holding the
// migration lock named key (a table name): a PostgreSQL advisory lock, MySQL
// GET_LOCK, SQLite's write lock (fn then runs inside a transaction that
// commits after it), Oracle DBMS_LOCK. Instances migrating at once wait for
// each other, so the first migrates and the others find nothing to do.
func (d Dialect) WithMigrationLock(ctx context.Context, db *sql.DB, key string, fn func(context.Context, *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	defer conn.Close()
	lock, unlock := d.schema.lock, d.schema.unlock
	if d.schema.lockIsTx {
		if _, err := conn.ExecContext(ctx, lock); err != nil {
			return fmt.Errorf("inbox: migrate: take the write lock: %w", err)
		}
		if err := fn(ctx, conn); err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			return err
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("inbox: migrate: commit: %w", err)
		}
		return nil
	}
	if d.schema.lockReportsGrant {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, lock, key).Scan(&got); err != nil {
			return fmt.Errorf("inbox: migrate: take the migration lock: %w", err)
		}
		if got.Int64 != 1 {
			return errors.New("inbox: migrate: the migration lock was not granted within 600 s: another instance is migrating")
		}
	} else if _, err := conn.ExecContext(ctx, lock, key); err != nil {
		return fmt.Errorf("inbox: migrate: take the migration lock: %w", err)
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), unlock, key) }()
	return fn(ctx, conn)
}
