package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit/inbox"
)

// types is how a dialect spells the outbox's columns.
type types struct {
	varchar, bigint, integer, time, blob, text string
	ifNotExists, tableOptions                  string
	inlineIndexes                              bool
}

func typesOf(d inbox.Dialect) types {
	switch d.Name() {
	case "mysql":
		return types{varchar: "VARCHAR(%d)", bigint: "BIGINT", integer: "INTEGER", time: "DATETIME(6)", blob: "LONGBLOB", text: "TEXT",
			ifNotExists: " IF NOT EXISTS", tableOptions: " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin", inlineIndexes: true}
	case "sqlite":
		return types{varchar: "VARCHAR(%d)", bigint: "INTEGER", integer: "INTEGER", time: "TIMESTAMP", blob: "BLOB", text: "TEXT", ifNotExists: " IF NOT EXISTS"}
	case "oracle":
		return types{varchar: "VARCHAR2(%d)", bigint: "NUMBER(19)", integer: "NUMBER(10)", time: "TIMESTAMP", blob: "BLOB", text: "CLOB"}
	}
	return types{varchar: "VARCHAR(%d)", bigint: "BIGINT", integer: "INTEGER", time: "TIMESTAMP", blob: "BYTEA", text: "TEXT", ifNotExists: " IF NOT EXISTS"}
}

// step is one numbered change of the outbox's schema; released steps never
// change (append only). A step's statements must be safe to run again
// after a partial run on a database without transactional DDL.
type step struct {
	version     int
	description string
	statements  func(d inbox.Dialect, table string) []string
}

var steps = []step{
	{version: 1, description: "outbox table (one row per message) and its key table (per key: sequence, progress, lease)", statements: createTables},
	{version: 2, description: "a message without a key is claimed by its own row (NEXT_AT, LEASE_OWNER), without a key row", statements: ownRowClaims},
	{version: 3, description: "PostgreSQL: a message without a key has no entry in (MSG_KEY, SEQ), CAUSE_EVENT_ID no index (fewer entries per Add)", statements: writeIndexes},
}

// SchemaVersion is the outbox schema version this build needs.
var SchemaVersion = steps[len(steps)-1].version

func createTables(d inbox.Dialect, table string) []string {
	ty := typesOf(d)
	v := func(n int) string { return fmt.Sprintf(ty.varchar, n) }
	k := keyTable(table)
	create := func(name string, cols []string, indexes [][2]string) []string {
		if ty.inlineIndexes {
			for _, ix := range indexes {
				cols = append(cols, "INDEX "+name+"_"+ix[0]+" ("+ix[1]+")")
			}
		}
		out := []string{"CREATE TABLE" + ty.ifNotExists + " " + name + " (\n    " + strings.Join(cols, ",\n    ") + "\n)" + ty.tableOptions}
		if !ty.inlineIndexes {
			for _, ix := range indexes {
				out = append(out, "CREATE INDEX"+ty.ifNotExists+" "+name+"_"+ix[0]+" ON "+name+" ("+ix[1]+")")
			}
		}
		return out
	}
	out := create(table, []string{
		"MESSAGE_ID " + v(MaxIDLength) + " NOT NULL",
		"MSG_KEY " + v(MaxKeyLength) + " NOT NULL",
		"SEQ " + ty.bigint + " NOT NULL",
		"DESTINATION " + v(MaxDestinationLength) + " NOT NULL",
		"HEADERS " + ty.text,
		"BODY " + ty.blob,
		"CAUSE_EVENT_ID " + v(MaxIDLength),
		"CORRELATION_ID " + v(MaxIDLength),
		"STATUS " + v(20) + " NOT NULL",
		"ATTEMPTS " + ty.integer + " DEFAULT 0 NOT NULL",
		"LAST_ERROR " + v(maxErrorLength),
		"CREATED_AT " + ty.time + " NOT NULL",
		"UPDATED_AT " + nullTime(d, ty),
		"SENT_AT " + nullTime(d, ty),
		"CONSTRAINT " + table + "_PK PRIMARY KEY (MESSAGE_ID)",
		"CONSTRAINT " + table + "_SEQ UNIQUE (MSG_KEY, SEQ)",
	}, [][2]string{{"STATUS", "STATUS, CREATED_AT"}, {"CAUSE", "CAUSE_EVENT_ID"}})
	return append(out, create(k, []string{
		"MSG_KEY " + v(MaxKeyLength) + " NOT NULL",
		"LAST_SEQ " + ty.bigint + " NOT NULL",
		"DONE_SEQ " + ty.bigint + " DEFAULT 0 NOT NULL",
		"NEXT_AT " + nullTime(d, ty),
		"LEASE_OWNER " + v(120),
		"CONSTRAINT " + k + "_PK PRIMARY KEY (MSG_KEY)",
	}, [][2]string{{"NEXT", "NEXT_AT"}})...)
}

// ownRowClaims gives the outbox table the claim columns of the key table,
// for the messages without a key that Add writes with SEQ 0 and no key row
// (see queries), and the index of their due rows: partial where the
// dialect has partial indexes (Oracle leaves NULLs out of it anyway).
func ownRowClaims(d inbox.Dialect, table string) []string {
	ty := typesOf(d)
	cols := []string{"NEXT_AT " + nullTime(d, ty), "LEASE_OWNER " + fmt.Sprintf(ty.varchar, 120)}
	ix := table + "_NEXT ON " + table + " (NEXT_AT)"
	switch d.Name() {
	case "oracle":
		return []string{"ALTER TABLE " + table + " ADD (" + strings.Join(cols, ", ") + ")", "CREATE INDEX " + ix}
	case "sqlite": // transactional DDL: the step runs whole or not at all
		return []string{"ALTER TABLE " + table + " ADD COLUMN " + cols[0], "ALTER TABLE " + table + " ADD COLUMN " + cols[1],
			"CREATE INDEX IF NOT EXISTS " + ix + " WHERE NEXT_AT IS NOT NULL"}
	case "mysql":
		return []string{"ALTER TABLE " + table + " ADD COLUMN IF NOT EXISTS " + cols[0] + ", ADD COLUMN IF NOT EXISTS " + cols[1],
			"CREATE INDEX IF NOT EXISTS " + ix}
	}
	return []string{"ALTER TABLE " + table + " ADD COLUMN IF NOT EXISTS " + cols[0] + ", ADD COLUMN IF NOT EXISTS " + cols[1],
		"CREATE INDEX IF NOT EXISTS " + ix + " WHERE NEXT_AT IS NOT NULL"}
}

// writeIndexes takes from Add, on PostgreSQL, the index entries no
// guarantee needs: a message without a key (SEQ 0) leaves the unique index
// of the key numbers, which becomes partial (SEQ > 0; the statements that
// read a key's messages by number say so), and CAUSE_EVENT_ID loses its
// index, a random key read only by operators' lookups, which PostgreSQL
// answers with one hashed scan. The other dialects keep both: SQLite's
// inline constraint cannot be dropped, MariaDB and Oracle have no partial
// index, and MariaDB and SQLite would read the whole table once per
// business row for inboxctl check's business-row-without-outbox. The step
// records its version there and changes nothing. See docs/decisions.md.
func writeIndexes(d inbox.Dialect, table string) []string {
	if d.Name() != "postgres" {
		return nil
	}
	seq := table + "_SEQ"
	return []string{"ALTER TABLE " + table + " DROP CONSTRAINT IF EXISTS " + seq,
		"CREATE UNIQUE INDEX IF NOT EXISTS " + seq + " ON " + table + " (MSG_KEY, SEQ) WHERE SEQ > 0",
		"DROP INDEX IF EXISTS " + table + "_CAUSE"}
}

func nullTime(d inbox.Dialect, ty types) string {
	if d.Name() == "mysql" {
		return ty.time + " NULL DEFAULT NULL"
	}
	return ty.time
}

// plan returns the statements that bring the outbox from version current
// (0: none recorded) to SchemaVersion; versionTable says whether
// INBOXKIT_SCHEMA_VERSION exists.
func plan(d inbox.Dialect, table string, current int, versionTable bool) inbox.Plan {
	p := inbox.Plan{Dialect: d.Name(), Table: table, Current: current, Latest: SchemaVersion, Steps: []inbox.PlannedStep{}}
	if !versionTable {
		p.Prelude = []string{d.VersionTableDDL()}
	}
	for _, s := range steps {
		if s.version <= current {
			continue
		}
		ps := inbox.PlannedStep{Version: s.version, Description: s.description, Statements: s.statements(d, table)}
		ps.Statements = append(ps.Statements, fmt.Sprintf("INSERT INTO %s (TABLE_NAME, VERSION, DESCRIPTION) VALUES ('%s', %d, '%s')",
			inbox.VersionTable, table, s.version, strings.ReplaceAll(s.description, "'", "''")))
		p.Steps = append(p.Steps, ps)
	}
	return p
}

// CreateScript returns the SQL script that creates the outbox tables at
// the latest version on an empty database (the files outbox_<dialect>.sql
// of package schema are this script for DefaultTable). It works for every
// dialect, Oracle's included.
func CreateScript(d inbox.Dialect, table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return "", err
	}
	return plan(d, table, 0, false).Text(), nil
}

// state reads the recorded version and whether the outbox table exists.
func state(ctx context.Context, q inbox.Querier, d inbox.Dialect, table string) (version int, versionTable, exists bool, err error) {
	if versionTable, err = d.VersionTableExists(ctx, q); err != nil {
		return 0, false, false, err
	}
	if versionTable {
		vq := d.Rebind(`SELECT COALESCE(MAX(VERSION), 0) FROM ` + inbox.VersionTable + ` WHERE TABLE_NAME = ?`)
		if err := q.QueryRowContext(ctx, vq, table).Scan(&version); err != nil {
			return 0, true, false, fmt.Errorf("outbox: read the schema version: %w", err)
		}
	}
	exists, err = d.TableExists(ctx, q, table)
	return version, versionTable, exists, err
}

// PlanMigration returns what Migrate would run now, without running it
// (`inboxctl migrate --dry-run`).
func (s *Store) PlanMigration(ctx context.Context) (inbox.Plan, error) {
	v, vt, _, err := state(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return inbox.Plan{}, err
	}
	return plan(s.d, s.cfg.Table, v, vt), nil
}

// Migrate creates the outbox tables or upgrades them to this build's
// version, and returns what it ran (see MigrateDB).
func (s *Store) Migrate(ctx context.Context) (inbox.Plan, error) {
	return MigrateDB(ctx, s.db, s.d, s.cfg.Table)
}

// MigrateDB creates the outbox table and its key table on db, or upgrades
// them to this build's version, recording each step in
// INBOXKIT_SCHEMA_VERSION under the outbox table's name. It runs under the
// same database lock as the inbox's migration (taken for the outbox
// table), so instances starting at once are safe; running it again changes
// nothing. Table "" means DefaultTable.
func MigrateDB(ctx context.Context, db *sql.DB, d inbox.Dialect, table string) (inbox.Plan, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return inbox.Plan{}, err
	}
	var p inbox.Plan
	err := d.WithMigrationLock(ctx, db, table, func(ctx context.Context, conn *sql.Conn) error {
		v, vt, _, err := state(ctx, conn, d, table)
		if err != nil {
			return err
		}
		p = plan(d, table, v, vt)
		exec := func(q string) error {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("outbox: migrate %s: %w\n\tstatement: %.160s", d.Name(), err, q)
			}
			return nil
		}
		for _, q := range p.Prelude {
			if err := exec(q); err != nil {
				return err
			}
		}
		for _, st := range p.Steps {
			tx := d.TransactionalDDL()
			if tx {
				if err := exec("BEGIN"); err != nil {
					return err
				}
			}
			for _, q := range st.Statements {
				if err := exec(q); err != nil {
					if tx {
						_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
					}
					return fmt.Errorf("step %d: %w", st.Version, err)
				}
			}
			if tx {
				if err := exec("COMMIT"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return p, err
}

// SchemaError says that the outbox tables are missing or behind this
// build's version. It wraps inbox.ErrSchemaOutdated: the fix is the same,
// inboxctl migrate (or Store.Migrate, or the statements of
// Store.PlanMigration applied by a DBA).
type SchemaError struct {
	Table           string
	Current, Latest int
	Missing         bool
}

func (e *SchemaError) Error() string {
	what := fmt.Sprintf("the outbox table %s does not exist", e.Table)
	if !e.Missing {
		what = fmt.Sprintf("the outbox schema of %s is at version %d, this build needs %d", e.Table, e.Current, e.Latest)
	}
	return "outbox: " + what + ": run inboxctl migrate (or apply `inboxctl migrate --dry-run`)"
}

// Unwrap returns inbox.ErrSchemaOutdated.
func (e *SchemaError) Unwrap() error { return inbox.ErrSchemaOutdated }

// CheckSchema reports, as a *SchemaError, whether the outbox tables are
// missing or behind this build's version. A relay calls it at start so that
// it fails fast.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, _, exists, err := state(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return err
	}
	if !exists || v < SchemaVersion {
		return &SchemaError{Table: s.cfg.Table, Current: v, Latest: SchemaVersion, Missing: !exists}
	}
	return nil
}

// Exists reports whether the outbox table exists (commands that operate an
// inbox use the outbox only where it was migrated).
func (s *Store) Exists(ctx context.Context) (bool, error) {
	return s.d.TableExists(ctx, s.db, s.cfg.Table)
}
