package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// VersionTable records which migration steps ran, one row per inbox table
// and step: (TABLE_NAME, VERSION, DESCRIPTION, APPLIED_AT).
const VersionTable = "INBOXKIT_SCHEMA_VERSION"

// colKind is a column's logical type, rendered per dialect.
type colKind int

const (
	kVarchar colKind = iota // VARCHAR(size), nullable unless notNull
	kCount                  // integer DEFAULT 0 NOT NULL
	kTime                   // nullable timestamp
	kCreated                // timestamp DEFAULT now NOT NULL
	kBlob
	kText
)

type column struct {
	name    string
	kind    colKind
	size    int
	notNull bool
}

type index struct {
	suffix string // index name is table + "_" + suffix
	cols   string
	// where, if set, makes it a partial index of the rows it holds true
	// for, on the databases that have them (schemaSQL.partialIndexes);
	// elsewhere the index holds every row.
	where string
}

// ddl is the CREATE INDEX of ix named name on table, with the given
// clause after CREATE INDEX (schemaSQL.ifNotExists or "").
func (ix index) ddl(d Dialect, clause, name, table string) string {
	s := "CREATE INDEX" + clause + " " + name + " ON " + table + " (" + ix.cols + ")"
	if ix.where != "" && d.schema.partialIndexes {
		s += " WHERE " + ix.where
	}
	return s
}

// step is one numbered schema change. Every column it adds is nullable or
// has a default, so that a consumer of the previous version keeps working
// while instances are upgraded one by one.
type step struct {
	version     int
	description string
	create      []column // the table itself (step 1, the seed columns)
	add         []column
	indexes     []index
	// tables are tables beside the inbox table, shared by every inbox
	// table of the schema (keyed by TABLE_NAME), created when missing.
	tables []string
	// backfill runs when the column named by its key was added by this
	// run (so a row an older version wrote gets a meaningful value once).
	backfill map[string]string
}

// steps is the migration history. Append only: a released step never
// changes. Step 1 is exactly the seed DDL of the design document, so a table
// created from it is at version 1.
var steps = []step{
	{version: 1, description: "inbox table with the seed columns and primary key (EVENT_ID, CONSUMER_NAME)",
		create: []column{
			{"EVENT_ID", kVarchar, 120, true},
			{"CONSUMER_NAME", kVarchar, 80, true},
			{"STATUS", kVarchar, 20, true},
			{"CORRELATION_ID", kVarchar, 120, false},
			{"REASON_CODE", kVarchar, 80, false},
			{"PROCESSED_AT", kTime, 0, false},
			{"CREATED_AT", kCreated, 0, true},
		}},
	{version: 2, description: "attempt counting and error columns; ATTEMPTS and UPDATED_AT backfilled",
		add: []column{
			{"ATTEMPTS", kCount, 0, true},
			{"ERROR_CLASS", kVarchar, 20, false},
			{"LAST_ERROR", kVarchar, 1000, false},
			{"UPDATED_AT", kTime, 0, false},
			{"FIRST_FAILED_AT", kTime, 0, false},
			{"REPLAY_COUNT", kCount, 0, true},
		},
		backfill: map[string]string{
			// Every row an older version wrote had at least its one attempt.
			"ATTEMPTS":   `UPDATE {t} SET ATTEMPTS = 1 WHERE ATTEMPTS = 0`,
			"UPDATED_AT": `UPDATE {t} SET UPDATED_AT = COALESCE(PROCESSED_AT, CREATED_AT) WHERE UPDATED_AT IS NULL`,
		}},
	{version: 3, description: "payload hash; indexes for audit (CORRELATION_ID), retention (STATUS, PROCESSED_AT) and the hash check",
		add: []column{{"PAYLOAD_HASH", kVarchar, 64, false}},
		indexes: []index{
			{"CORR", "CORRELATION_ID", ""},
			{"RET", "STATUS, PROCESSED_AT", ""},
			{"HASH", "PAYLOAD_HASH", ""},
		}},
	{version: 4, description: "store-then-process columns: payload, headers, lease, next attempt",
		add: []column{
			{"PAYLOAD", kBlob, 0, false},
			{"HEADERS", kText, 0, false},
			{"LEASE_OWNER", kVarchar, 80, false},
			{"LEASE_UNTIL", kTime, 0, false},
			{"NEXT_ATTEMPT_AT", kTime, 0, false},
		}},
	{version: 5, description: "EVENT_ID_SOURCE: where a derived event id came from (header, json, xml, message-id)",
		add: []column{{"EVENT_ID_SOURCE", kVarchar, 40, false}}},
	{version: 6, description: HistoryTable + ": purge runs and status mappings, per inbox table",
		tables: []string{HistoryTable}},
	{version: 7, description: "ORDER_KEY: the key whose deliveries one consumer runs in arrival order (consumer.Config.OrderKeyFunc)",
		add: []column{{"ORDER_KEY", kVarchar, 120, false}}},
	{version: 8, description: ActionTable + ": who did what (operator actions), per inbox table",
		tables: []string{ActionTable}},
	{version: 9, description: "ARCHIVED_AT (failures archive); " + ReplayJobTable + " and " + ReplayItemTable + ": resumable replay jobs",
		add:    []column{{"ARCHIVED_AT", kTime, 0, false}},
		tables: []string{ReplayJobTable, ReplayItemTable}},
	{version: 10, description: AttemptTable + ": the failed attempts of each event; index on ORDER_KEY, CONSUMER_NAME, STATUS (search by business key)",
		// ORDER_KEY first: the console's search by business key gives it
		// alone; with CONSUMER_NAME it serves a consumer's key, and STATUS
		// keeps a key's rows of one status (a parked key's failures) in
		// the index. Partial where the database allows: a consumer
		// without order keys writes no entry of it.
		indexes: []index{{"OKEY", "ORDER_KEY, CONSUMER_NAME, STATUS", "ORDER_KEY IS NOT NULL"}},
		tables:  []string{AttemptTable}},
}

// SchemaVersion is the schema version this build needs: the number of the
// last migration step.
var SchemaVersion = steps[len(steps)-1].version

func (d Dialect) columnDDL(c column) string {
	sq := d.schema
	var typ string
	switch c.kind {
	case kVarchar:
		typ = fmt.Sprintf(sq.varchar, c.size)
	case kCount:
		return c.name + " " + sq.count
	case kTime:
		if sq.nullTime != "" {
			return c.name + " " + sq.nullTime
		}
		typ = sq.time
	case kCreated:
		return c.name + " " + sq.created
	case kBlob:
		typ = sq.blob
	case kText:
		typ = sq.text
	}
	if c.notNull {
		return c.name + " " + typ + " NOT NULL"
	}
	return c.name + " " + typ
}

// schemaState is what introspection found in the database.
type schemaState struct {
	tableExists   bool
	columns       map[string]bool // upper-case names
	indexes       map[string]bool // upper-case names
	versionExists bool
	version       int
	tables        map[string]bool // the steps' side tables that exist
	// indexes also holds the indexes of the side tables that exist
	// (sideIndexes), by their names, which start with the side table's.
}

// PlannedStep is one pending migration step with the exact statements it
// runs on this database.
type PlannedStep struct {
	Version     int      `json:"version"`
	Description string   `json:"description"`
	Statements  []string `json:"statements"`
}

// Plan is what Migrate would do: the statements, in order, for a database
// in its current state. Its Text is what a DBA applies with Flyway or
// Liquibase instead of running Migrate.
type Plan struct {
	Dialect string `json:"dialect"`
	Table   string `json:"table"`
	// Current is the version found (0: no version recorded), Latest the
	// version this build needs.
	Current int `json:"current"`
	Latest  int `json:"latest"`
	// Prelude creates the version table when it is missing.
	Prelude []string      `json:"prelude,omitempty"`
	Steps   []PlannedStep `json:"steps"`
	// Unknown are the status values of the table the state machine does
	// not know, with their rows; empty, never nil (JSON: []). Migrate
	// changes nothing while one is not mapped (MigrateOptions.MapStatus).
	Unknown []UnknownStatus `json:"unknownStatuses"`
	// Mapping are the statements that map status values
	// (MigrateOptions.MapStatus), run after the steps; each records what
	// it maps in INBOXKIT_HISTORY first.
	Mapping []string `json:"mapping,omitempty"`
}

// Statements returns every statement of the plan in order.
func (p Plan) Statements() []string {
	out := append([]string(nil), p.Prelude...)
	for _, s := range p.Steps {
		out = append(out, s.Statements...)
	}
	return append(out, p.Mapping...)
}

// Text renders the plan as an SQL script: statements end with ";" (with a
// line holding "/" for Oracle), each step under a comment naming it.
func (p Plan) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- inboxkit schema of %s (%s): version %d -> %d\n", p.Table, p.Dialect, p.Current, p.Latest)
	write := func(st string) {
		if p.Dialect == "oracle" {
			b.WriteString(st + "\n/\n")
		} else {
			b.WriteString(st + ";\n")
		}
	}
	for _, st := range p.Prelude {
		write(st)
	}
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "\n-- step %d: %s\n", s.Version, s.Description)
		for _, st := range s.Statements {
			write(st)
		}
	}
	if len(p.Mapping) > 0 {
		b.WriteString("\n-- status mapping (--map-status): the values the state machine does not know\n")
		for _, st := range p.Mapping {
			write(st)
		}
	}
	if len(p.Steps) == 0 && len(p.Mapping) == 0 {
		b.WriteString("-- nothing to do: the schema is up to date\n")
	}
	return b.String()
}

func allColumns() []column {
	var out []column
	for _, s := range steps {
		out = append(out, s.create...)
		out = append(out, s.add...)
	}
	return out
}

func versionTableDDL(d Dialect) string {
	cols := []string{
		d.columnDDL(column{"TABLE_NAME", kVarchar, 30, true}),
		"VERSION " + d.schema.integer + " NOT NULL",
		d.columnDDL(column{"DESCRIPTION", kVarchar, 200, true}),
		d.columnDDL(column{"APPLIED_AT", kCreated, 0, true}),
		"CONSTRAINT " + VersionTable + "_PK PRIMARY KEY (TABLE_NAME, VERSION)",
	}
	return "CREATE TABLE" + d.schema.ifNotExists + " " + VersionTable + " (\n    " + strings.Join(cols, ",\n    ") + "\n)"
}

// plan computes the statements that bring a database in state st to the
// latest version. It is a pure function, so every dialect (Oracle too) is
// tested offline.
func plan(d Dialect, table string, st schemaState) Plan {
	p := Plan{Dialect: d.name, Table: table, Current: st.version, Latest: SchemaVersion}
	t := func(q string) string { return strings.ReplaceAll(q, "{t}", table) }
	if !st.versionExists {
		p.Prelude = append(p.Prelude, versionTableDDL(d))
	}
	record := func(s step) string {
		return fmt.Sprintf("INSERT INTO %s (TABLE_NAME, VERSION, DESCRIPTION) VALUES ('%s', %d, '%s')",
			VersionTable, table, s.version, strings.ReplaceAll(s.description, "'", "''"))
	}
	created := false
	for _, s := range steps {
		if s.version <= st.version && st.tableExists {
			continue
		}
		ps := PlannedStep{Version: s.version, Description: s.description}
		if !st.tableExists && !created {
			// A new installation gets the latest table in one statement.
			created = true
			ps.Statements = append(ps.Statements, createTable(d, table)...)
		}
		if st.tableExists {
			for _, c := range s.add {
				if st.columns[c.name] {
					continue
				}
				ps.Statements = append(ps.Statements, t("ALTER TABLE {t} ADD "+d.columnDDL(c)))
				if q, ok := s.backfill[c.name]; ok {
					ps.Statements = append(ps.Statements, t(q))
				}
			}
			for _, ix := range s.indexes {
				name := table + "_" + ix.suffix
				if st.indexes[strings.ToUpper(name)] {
					continue
				}
				ps.Statements = append(ps.Statements, t(ix.ddl(d, "", name, "{t}")))
			}
		}
		for _, name := range s.tables {
			if !st.tables[name] {
				ps.Statements = append(ps.Statements, sideTableDDL(d, name)...)
				continue
			}
			// A step cut short (DDL that commits statement by statement)
			// may have left the table without its index: the next run adds it.
			for _, ix := range sideIndexes[name] {
				if ixName := name + "_" + ix.suffix; !st.indexes[ixName] {
					ps.Statements = append(ps.Statements, ix.ddl(d, "", ixName, name))
				}
			}
		}
		if s.version > st.version {
			ps.Statements = append(ps.Statements, record(s))
		}
		if len(ps.Statements) > 0 {
			p.Steps = append(p.Steps, ps)
		}
	}
	return p
}

// createTable is the DDL of a new table at the latest version.
func createTable(d Dialect, table string) []string {
	sq := d.schema
	var cols []string
	for _, c := range allColumns() {
		cols = append(cols, d.columnDDL(c))
	}
	var ixs []index
	for _, s := range steps {
		ixs = append(ixs, s.indexes...)
	}
	pk := "PRIMARY KEY (EVENT_ID, CONSUMER_NAME)"
	if sq.namedPrimaryKey {
		pk = "CONSTRAINT " + table + "_PK " + pk
	}
	cols = append(cols, pk)
	if sq.inlineIndexes {
		for _, ix := range ixs {
			cols = append(cols, "INDEX "+table+"_"+ix.suffix+" ("+ix.cols+")")
		}
		ixs = nil
	}
	out := []string{"CREATE TABLE" + sq.ifNotExists + " " + table + " (\n    " + strings.Join(cols, ",\n    ") + "\n)" + sq.tableOptions}
	for _, ix := range ixs {
		out = append(out, ix.ddl(d, sq.ifNotExists, table+"_"+ix.suffix, table))
	}
	return out
}

// CreateScript returns the SQL script that creates the inbox table at the
// latest version on an empty database (the files in package schema are this
// script for the default table name).
func CreateScript(d Dialect, table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return "", err
	}
	return plan(d, table, schemaState{}).Text(), nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func introspect(ctx context.Context, q querier, d Dialect, table string) (schemaState, error) {
	st := schemaState{columns: map[string]bool{}, indexes: map[string]bool{}, tables: map[string]bool{}}
	colQ, ixQ, existsQ := d.schema.columnsQuery, d.schema.indexesQuery, d.schema.existsQuery
	set := func(query, table string, into map[string]bool) error {
		rows, err := q.QueryContext(ctx, query, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			into[strings.ToUpper(s)] = true
		}
		return rows.Err()
	}
	if err := set(colQ, table, st.columns); err != nil {
		return st, fmt.Errorf("inbox: read the columns of %s: %w", table, err)
	}
	st.tableExists = len(st.columns) > 0
	if err := set(ixQ, table, st.indexes); err != nil {
		return st, fmt.Errorf("inbox: read the indexes of %s: %w", table, err)
	}
	exists := func(name string) (bool, error) {
		var n int
		if err := q.QueryRowContext(ctx, existsQ, name).Scan(&n); err != nil {
			return false, fmt.Errorf("inbox: look for %s: %w", name, err)
		}
		return n > 0, nil
	}
	var err error
	if st.versionExists, err = exists(VersionTable); err != nil {
		return st, err
	}
	for _, s := range steps {
		for _, name := range s.tables {
			if st.tables[name], err = exists(name); err != nil {
				return st, err
			}
			if st.tables[name] && len(sideIndexes[name]) > 0 {
				if err := set(ixQ, name, st.indexes); err != nil {
					return st, fmt.Errorf("inbox: read the indexes of %s: %w", name, err)
				}
			}
		}
	}
	if st.versionExists {
		vq := d.Rebind(`SELECT COALESCE(MAX(VERSION), 0) FROM ` + VersionTable + ` WHERE TABLE_NAME = ?`)
		if err := q.QueryRowContext(ctx, vq, table).Scan(&st.version); err != nil {
			return st, fmt.Errorf("inbox: read the schema version: %w", err)
		}
	}
	return st, nil
}

// ErrSchemaOutdated is wrapped by *SchemaError: the inbox table is missing,
// behind this build's version, or lacks columns it needs.
var ErrSchemaOutdated = errors.New("inbox: schema is not at the version this build needs")

// SchemaError says how the database's schema differs from what this build
// needs. The fix is always to migrate (inboxctl migrate, or Store.Migrate,
// or the statements of Store.PlanMigration applied by a DBA).
type SchemaError struct {
	Table string
	// Current is the recorded version (0: none), Latest this build's.
	Current, Latest int
	// TableMissing is true when the inbox table does not exist.
	TableMissing bool
	// MissingColumns are columns this build needs that the table lacks
	// (a version recorded but the table changed by hand, or never migrated).
	MissingColumns []string
	// Pending are the steps still to run.
	Pending []string
}

func (e *SchemaError) Error() string {
	var what string
	switch {
	case e.TableMissing:
		what = fmt.Sprintf("the inbox table %s does not exist", e.Table)
	case e.Current < e.Latest:
		what = fmt.Sprintf("the schema of %s is at version %d, this build needs %d (pending: %s)", e.Table, e.Current, e.Latest, strings.Join(e.Pending, "; "))
	default:
		what = fmt.Sprintf("the inbox table %s lacks column(s) %s although version %d is recorded", e.Table, strings.Join(e.MissingColumns, ", "), e.Current)
	}
	return "inbox: " + what + ": run inboxctl migrate (or apply `inboxctl migrate --dry-run`)"
}

// Unwrap returns ErrSchemaOutdated.
func (e *SchemaError) Unwrap() error { return ErrSchemaOutdated }

// CheckSchema reports, as a *SchemaError wrapping ErrSchemaOutdated,
// whether the inbox table is missing, behind this build's version, or lacks
// a column this build uses. A consumer calls it at start so that it fails
// fast instead of failing every message. A schema newer than this build is
// accepted (new columns are nullable or have defaults: rolling upgrades).
func (s *Store) CheckSchema(ctx context.Context) error {
	st, err := introspect(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return err
	}
	e := &SchemaError{Table: s.cfg.Table, Current: st.version, Latest: SchemaVersion, TableMissing: !st.tableExists}
	for _, p := range plan(s.d, s.cfg.Table, st).Steps {
		e.Pending = append(e.Pending, fmt.Sprintf("%d %s", p.Version, p.Description))
	}
	if st.tableExists {
		for _, c := range allColumns() {
			if !st.columns[c.name] {
				e.MissingColumns = append(e.MissingColumns, c.name)
			}
		}
	}
	if e.TableMissing || e.Current < e.Latest || len(e.MissingColumns) > 0 {
		return e
	}
	return nil
}

// SchemaStatus is the recorded version, the applied and the pending steps.
type SchemaStatus struct {
	Dialect string        `json:"dialect"`
	Table   string        `json:"table"`
	Current int           `json:"current"`
	Latest  int           `json:"latest"`
	Applied []AppliedStep `json:"applied"`
	Pending []PlannedStep `json:"pending"`
	// Drift lists columns missing although their version is recorded;
	// empty, never nil, when there are none (JSON: "drift": []).
	Drift []string `json:"drift"`
	// Unknown are the status values the state machine does not know, with
	// their rows (see Plan.Unknown); empty, never nil.
	Unknown []UnknownStatus `json:"unknownStatuses"`
}

// AppliedStep is one row of the version table.
type AppliedStep struct {
	Version     int       `json:"version"`
	Description string    `json:"description"`
	AppliedAt   time.Time `json:"appliedAt"`
}

// SchemaStatus reads the version table and plans the pending steps.
func (s *Store) SchemaStatus(ctx context.Context) (SchemaStatus, error) {
	st, err := introspect(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return SchemaStatus{}, err
	}
	p := plan(s.d, s.cfg.Table, st)
	out := SchemaStatus{Dialect: s.d.name, Table: s.cfg.Table, Current: st.version, Latest: SchemaVersion, Pending: p.Steps,
		Applied: []AppliedStep{}, Drift: []string{}}
	if out.Pending == nil {
		out.Pending = []PlannedStep{}
	}
	if out.Unknown, err = census(ctx, s.db, s.d, s.cfg.Table, st); err != nil {
		return out, err
	}
	if st.tableExists {
		for _, c := range allColumns() {
			if !st.columns[c.name] && st.version >= SchemaVersion {
				out.Drift = append(out.Drift, "missing column "+c.name)
			}
		}
	}
	if !st.versionExists {
		return out, nil
	}
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(`SELECT VERSION, DESCRIPTION, APPLIED_AT FROM `+VersionTable+` WHERE TABLE_NAME = ? ORDER BY VERSION`), s.cfg.Table)
	if err != nil {
		return out, fmt.Errorf("inbox: read %s: %w", VersionTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var a AppliedStep
		var at dbTime
		if err := rows.Scan(&a.Version, &a.Description, &at); err != nil {
			return out, fmt.Errorf("inbox: read %s: %w", VersionTable, err)
		}
		a.AppliedAt = at.Time
		out.Applied = append(out.Applied, a)
	}
	return out, rows.Err()
}

// PlanMigration returns what Migrate would run now, without running it
// (`inboxctl migrate --dry-run`). Like Migrate, it returns the plan with
// an *UnknownStatusesError when the table holds status values the state
// machine does not know.
func (s *Store) PlanMigration(ctx context.Context) (Plan, error) {
	return s.PlanMigrationWith(ctx, MigrateOptions{})
}

// PlanMigrationWith is PlanMigration with the options MigrateDBWith
// would run with: the plan shows the status mapping too.
func (s *Store) PlanMigrationWith(ctx context.Context, opt MigrateOptions) (Plan, error) {
	if err := ValidateStatusMapping(opt.MapStatus); err != nil {
		return Plan{}, err
	}
	st, err := introspect(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return Plan{}, err
	}
	return planWith(ctx, s.db, s.d, s.cfg.Table, st, opt)
}

// Migrate brings the inbox table to the latest version (see MigrateDB).
func (s *Store) Migrate(ctx context.Context) error {
	_, err := MigrateDB(ctx, s.db, s.d, s.cfg.Table)
	return err
}

// MigrateOptions are a migration's choices beyond the steps.
type MigrateOptions struct {
	// MapStatus maps status values the state machine does not know
	// (FAILED, a lower-case processed) to one of MappableStatuses; the key
	// RECEIVED or IN_PROGRESS maps the orphans of that status (rows no
	// store-then-process receiver wrote: no payload hash, no lease). The
	// mapping runs after the steps, in the same locked migration, and each
	// pair is recorded in INBOXKIT_HISTORY (kind map-status) with its rows.
	MapStatus map[string]inboxkit.Status
}

// planWith is plan with the status census of the table and the mapping
// of opt; it returns the plan with an *UnknownStatusesError when a value
// the state machine does not know is not mapped.
func planWith(ctx context.Context, q querier, d Dialect, table string, st schemaState, opt MigrateOptions) (Plan, error) {
	p := plan(d, table, st)
	var err error
	if p.Unknown, err = census(ctx, q, d, table, st); err != nil {
		return p, err
	}
	if missing := unmapped(p.Unknown, opt.MapStatus); len(missing) > 0 {
		return p, &UnknownStatusesError{Table: table, Unknown: p.Unknown, Unmapped: missing}
	}
	p.Mapping = mappingStatements(d, table, opt.MapStatus)
	return p, nil
}

// Migrate brings the inbox table of db to the latest version; table ""
// means the default. See MigrateDB.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	_, err := MigrateDB(ctx, db, d, table)
	return err
}

// MigrateDB creates the inbox table, or upgrades any earlier state of it in
// place — a table created from the seed DDL included — and returns what it
// ran. It adds missing columns (nullable or with defaults) and indexes,
// backfills ATTEMPTS and UPDATED_AT of rows written before those columns
// existed, keeps every row and the existing primary key, and records each
// step in INBOXKIT_SCHEMA_VERSION. It runs under a database lock
// (PostgreSQL advisory lock, MySQL GET_LOCK, SQLite's write lock, Oracle
// DBMS_LOCK) and plans after taking it, so instances starting at once are
// safe: the first migrates, the others find nothing to do. Running it again
// changes nothing.
//
// A table holding status values the state machine does not know (see
// MigrateOptions.MapStatus) is not migrated: MigrateDB returns the plan
// with an *UnknownStatusesError and changes nothing; MigrateDBWith maps
// them.
func MigrateDB(ctx context.Context, db *sql.DB, d Dialect, table string) (Plan, error) {
	return MigrateDBWith(ctx, db, d, table, MigrateOptions{})
}

// MigrateDBWith is MigrateDB with options: the status mapping runs after
// the steps, under the same lock. A mapping to a status that is not one of
// MappableStatuses is refused with ErrBadMapping before anything runs.
func MigrateDBWith(ctx context.Context, db *sql.DB, d Dialect, table string, opt MigrateOptions) (Plan, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return Plan{}, err
	}
	if err := ValidateStatusMapping(opt.MapStatus); err != nil {
		return Plan{}, err
	}
	var p Plan
	err := d.WithMigrationLock(ctx, db, table, func(ctx context.Context, conn *sql.Conn) error {
		var err error
		p, err = migrateLocked(ctx, conn, d, table, opt)
		return err
	})
	return p, err
}

func migrateLocked(ctx context.Context, conn *sql.Conn, d Dialect, table string, opt MigrateOptions) (Plan, error) {
	st, err := introspect(ctx, conn, d, table)
	if err != nil {
		return Plan{}, err
	}
	p, err := planWith(ctx, conn, d, table, st, opt)
	if err != nil {
		return p, err // nothing ran
	}
	exec := func(q string) error {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("inbox: migrate %s: %w\n\tstatement: %.160s", d.name, err, q)
		}
		return nil
	}
	for _, q := range p.Prelude {
		if err := exec(q); err != nil {
			return p, err
		}
	}
	// PostgreSQL has transactional DDL: a step (columns, backfill, version
	// row), and the status mapping, commit as a whole. MySQL and Oracle
	// commit each DDL statement; a step cut short is completed by the next
	// run, which finds the columns already there.
	group := func(what string, stmts []string) error {
		tx := d.schema.transactionalDDL && len(stmts) > 0
		if tx {
			if err := exec("BEGIN"); err != nil {
				return err
			}
		}
		for _, q := range stmts {
			if err := exec(q); err != nil {
				if tx {
					_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
				}
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		if tx {
			return exec("COMMIT")
		}
		return nil
	}
	for _, s := range p.Steps {
		if err := group(fmt.Sprintf("step %d", s.Version), s.Statements); err != nil {
			return p, err
		}
	}
	return p, group("status mapping", p.Mapping)
}

// MaxEventIDSourceLength is the width of EVENT_ID_SOURCE.
const MaxEventIDSourceLength = 40

// MaxOrderKeyLength is the width of ORDER_KEY; a longer key is stored
// hashed (see consumer.FitEventID).
const MaxOrderKeyLength = 120

// sourceArg binds an EVENT_ID_SOURCE value: NULL when empty, cut to the
// column (it is a label for the audit, not a key).
func sourceArg(s string) sql.NullString {
	if len(s) > MaxEventIDSourceLength {
		s = s[:MaxEventIDSourceLength]
	}
	return nullString(s)
}
