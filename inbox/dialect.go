package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/dberr"
)

// Dialect is the SQL flavour of one database. Use the values Postgres,
// MySQL, SQLite and Oracle; DialectByName finds one by name.
type Dialect struct {
	name string
	// database names the errors' reader in package dberr that isDuplicate
	// needs; "" when the error text is enough (Oracle).
	database string
	// support is the package a program imports for this database; New
	// names it when the reader of database is not linked.
	support string
	// isDuplicate reports a primary-key or unique violation.
	isDuplicate func(error) bool
	// placeholder returns the n-th (1-based) bind placeholder.
	placeholder func(n int) string
	// purgeBatch deletes at most ?3 terminal rows due (?1 and ?2 the
	// cutoff): %[1]s is the table, %[2]s the fixed IN list of terminal
	// statuses, %[3]s the due condition (purgeDue).
	purgeBatch string
	// Where AttemptTable exists, a purge batch deletes the attempt rows of
	// the rows it deletes, in its transaction: purgeTried is one statement
	// that does both (%[4]s the inbox table's name as a literal) and
	// returns the rows deleted from the inbox table; where it is "",
	// purgeKeys selects the keys of the batch (like purgeBatch's
	// placeholders), locking them, and the batch deletes by key.
	purgeTried, purgeKeys string
	// limitClause formats "at most n rows" for a SELECT.
	limit func(n string) (prefix, suffix string)
	// timeArg converts a time for binding.
	timeArg func(time.Time) any
	// abortsOnError: a failed statement aborts the whole transaction
	// until it is rolled back (to a savepoint) — PostgreSQL.
	abortsOnError bool
	// lockingTx are the options of a transaction that locks many rows by
	// key (worker claims, a batch's attempt markers); nil for the default.
	lockingTx *sql.TxOptions
	// claim is the worker's claim statement: a SELECT of the columns %[3]s
	// of at most @n rows of table %[1]s matching %[2]s, locked and skipping
	// rows locked by other workers; or, when claimUpdates is set, an UPDATE
	// setting %[4]s on them, RETURNING %[3]s.
	claim        string
	claimUpdates bool
	// markUpsert is the attempt marker in one statement on table %[1]s
	// (see pgMarkUpsert, mysqlMarkUpsert); "" where mark uses three
	// statements.
	markUpsert string
	// foundByID: markUpsert reports the row it found through the last
	// insert id (mysqlFound), not a result set.
	foundByID bool
	// multiRowInsert: INSERT ... VALUES (...), (...) inserts many rows.
	multiRowInsert bool
	// doNothing is the clause that makes an INSERT skip a row whose key
	// exists instead of failing ("" where the INSERT fails with a
	// duplicate-key error, which does not abort the transaction there).
	// Where it is set, INSERT ... doNothing RETURNING reports the rows
	// inserted (first.go).
	doNothing string
	// customPlans, run in a transaction before a statement with an IN
	// list of keys, makes the server plan it for its values: a cached
	// generic plan made while the table was small scans the whole table
	// once it has grown, until the next ANALYZE (docs/decisions.md). ""
	// where not needed.
	customPlans string
	// aggregateMemory, run in a read-only transaction before a GROUP BY
	// over many rows (FailureGroups), lets the server hash the groups in
	// memory instead of sorting the rows on disk (docs/decisions.md); ""
	// where not needed.
	aggregateMemory string
	// schema is how the dialect spells the inbox's DDL, reads a schema
	// back and takes the migration lock (migrate.go).
	schema schemaSQL
}

// schemaSQL is a dialect's DDL and migration behaviour. Column specs
// follow the column's name.
type schemaSQL struct {
	varchar string // a sized string type; %d is the size
	integer string // a plain integer type
	// serial is the type of a key the database numbers by itself on
	// INSERT, ascending (an identity, AUTO_INCREMENT, SQLite's rowid),
	// declared the primary key.
	serial   string
	count    string // a counter column: type, DEFAULT 0, NOT NULL
	time     string // a timestamp type
	nullTime string // a nullable timestamp column's whole spec, where the type alone is not enough ("" otherwise)
	created  string // a creation-time column's whole spec
	blob     string
	text     string
	// ifNotExists follows CREATE TABLE and CREATE INDEX ("" where the
	// database has no such clause).
	ifNotExists string
	// tableOptions follow CREATE TABLE's closing parenthesis.
	tableOptions string
	// inlineIndexes: the indexes are declared inside CREATE TABLE.
	inlineIndexes bool
	// partialIndexes: CREATE INDEX takes a WHERE clause (index.where).
	partialIndexes bool
	// namedPrimaryKey: the primary key is a CONSTRAINT named after the table.
	namedPrimaryKey bool
	// columnsQuery, indexesQuery and existsQuery read a table's columns,
	// its indexes, and whether a table exists; each takes the table name.
	columnsQuery, indexesQuery, existsQuery string
	// lock and unlock take and release the migration lock on one
	// connection; they take the table name, but for lockIsTx.
	lock, unlock string
	// lockIsTx: lock begins a transaction that holds the database's write
	// lock; the migration runs inside it and commits.
	lockIsTx bool
	// lockReportsGrant: lock returns 1 when granted, anything else when it
	// timed out.
	lockReportsGrant bool
	// transactionalDDL: a migration step commits as a whole.
	transactionalDDL bool
	// exactStatus is STATUS as an expression that compares and groups
	// byte for byte, where the column of a table the database created by
	// default compares without case (MySQL's _ci collations: a legacy
	// 'processed' equals 'PROCESSED' there); "" means STATUS.
	exactStatus string
}

// Name is the dialect's name: "postgres", "mysql", "sqlite" or "oracle".
func (d Dialect) Name() string { return d.name }

// TimeArg binds t the way the inbox stores timestamps: UTC, as text of
// fixed width on SQLite (so that text comparison is time order), as a
// time.Time elsewhere. Business tables beside the inbox table use it too.
func (d Dialect) TimeArg(t time.Time) any { return d.timeArg(t) }

// String returns Name.
func (d Dialect) String() string { return d.name }

// IsDuplicate reports whether err is the database's primary-key (or unique)
// violation: PostgreSQL SQLSTATE 23505, MySQL/MariaDB 1062, SQLite
// SQLITE_CONSTRAINT_PRIMARYKEY/UNIQUE, Oracle ORA-00001. For MySQL it needs
// driver/mysql linked (see [ErrDriverNotLinked]); without it, it reports
// false.
func (d Dialect) IsDuplicate(err error) bool {
	if err == nil || d.isDuplicate == nil {
		return false
	}
	return d.isDuplicate(err)
}

// codeIs returns an isDuplicate that reads the code of database's errors
// (package dberr) and matches it.
func codeIs(database string, match func(dberr.Code) bool) func(error) bool {
	return func(err error) bool {
		c, ok := dberr.Of(err)
		return ok && c.Database == database && match(c)
	}
}

// ErrDriverNotLinked is returned by [New] for a dialect whose driver errors
// this program cannot read, so that it could not recognise a duplicate
// event (rule 1 of ARCHITECTURE.md): MySQL without
// github.com/inboxkit/inboxkit/driver/mysql imported.
var ErrDriverNotLinked = errors.New("inbox: driver package not linked")

// linked returns ErrDriverNotLinked, with the import to add, when the reader
// of d's driver errors is not registered.
func (d Dialect) linked() error {
	if d.database == "" || dberr.Registered(d.database) {
		return nil
	}
	return fmt.Errorf("%w: add import _ %q to the main package; without it the %s dialect cannot recognise a duplicate event", ErrDriverNotLinked, d.support, d.name)
}

// Rebind rewrites a statement written with '?' placeholders into the
// dialect's placeholder style ($1 for PostgreSQL, :1 for Oracle). The
// statements of this package contain no '?' inside string literals.
func (d Dialect) Rebind(query string) string {
	if d.placeholder == nil {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString(d.placeholder(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ErrUnknownDialect is returned by DialectByName.
var ErrUnknownDialect = errors.New("inbox: unknown dialect")

// DialectByName returns the dialect called name ("postgres", "mysql",
// "sqlite", "oracle"; "mariadb", "pgx" and "sqlite3" are accepted too).
func DialectByName(name string) (Dialect, error) {
	switch strings.ToLower(name) {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	case "oracle", "godror":
		return Oracle, nil
	}
	return Dialect{}, fmt.Errorf("%w %q: use postgres, mysql, sqlite or oracle", ErrUnknownDialect, name)
}

func questionMark(int) string { return "?" }

func dollar(n int) string { return "$" + strconv.Itoa(n) }

func colon(n int) string { return ":" + strconv.Itoa(n) }

func utcTime(t time.Time) any { return t.UTC() }

// DefaultTable is the table name of the seed schema.
const DefaultTable = "INBOX_EVENT_PROCESSING"

// The table name ends up in DDL and in index names (table + "_CORR"), so it
// is a plain identifier short enough for Oracle's 30-character limit.
var identRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,24}$`)

// ErrBadTableName is returned for a table name that is not a plain identifier.
var ErrBadTableName = errors.New("inbox: invalid table name")

// ValidateTable checks that name is a plain SQL identifier: a letter, then
// letters, digits or underscores, 25 characters at most. Configuration can
// therefore never inject SQL through the table name.
func ValidateTable(name string) error {
	if !identRe.MatchString(name) {
		return fmt.Errorf("%w %q: use a letter followed by letters, digits or '_' (at most 25 characters), e.g. %s", ErrBadTableName, name, DefaultTable)
	}
	return nil
}

// dbTime scans a timestamp column whatever the driver returns for it
// (time.Time, or text in SQLite).
type dbTime struct {
	Time  time.Time
	Valid bool
}

var timeLayouts = []string{
	sqliteTimeLayout,
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05",
}

func (t *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.Time, t.Valid = time.Time{}, false
		return nil
	case time.Time:
		t.Time, t.Valid = x.UTC(), true
		return nil
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	}
	return fmt.Errorf("inbox: cannot scan %T into a timestamp", v)
}

func (t *dbTime) parse(s string) error {
	for _, layout := range timeLayouts {
		if p, err := time.Parse(layout, s); err == nil {
			t.Time, t.Valid = p.UTC(), true
			return nil
		}
	}
	return fmt.Errorf("inbox: cannot parse timestamp %q", s)
}

func (t dbTime) ptr() *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}
