package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/inboxkit/inboxkit"
)

// What an adopted legacy table brings: rows in statuses the state machine
// does not know (FAILED, a lower-case processed) and RECEIVED or
// IN_PROGRESS rows that no store-then-process receiver wrote (a legacy
// bean's "started, never finished"). Neither is ever a duplicate: at run
// time such a delivery is dead-lettered with UNKNOWN_STATUS and the row is
// left as it is; Migrate refuses to run until each such value is mapped
// (MigrateOptions.MapStatus).

// orphanCond is true for a RECEIVED or IN_PROGRESS row no
// store-then-process receiver wrote: Receive always stores a payload hash,
// and a worker's claim always sets a lease.
const orphanCond = `PAYLOAD_HASH IS NULL AND LEASE_UNTIL IS NULL`

// isOpen reports whether st is a status of the store-then-process entries
// (RECEIVED, IN_PROGRESS), which are orphans unless a receiver wrote them.
func isOpen(st inboxkit.Status) bool {
	return st == inboxkit.StatusReceived || st == inboxkit.StatusInProgress
}

// orphan reports whether e's row (RECEIVED or IN_PROGRESS) is an orphan
// (see orphanCond).
func (s *Store) orphan(ctx context.Context, q execer, e Entry) (bool, error) {
	var n int
	if err := s.q.selectOrphan.queryRow(ctx, q, e.key()).Scan(&n); err != nil {
		return false, fmt.Errorf("inbox: read the row of event %q: %w", e.EventID, err)
	}
	return n == 1, nil
}

// UnknownStatusError is the Result.Err of a delivery dead-lettered with
// reason UNKNOWN_STATUS (see inboxkit.ReasonUnknownStatus): the event's
// row is in a status the state machine does not know, or is a legacy
// RECEIVED or IN_PROGRESS row. The row was left as it is.
type UnknownStatusError struct {
	EventID, ConsumerName string
	// Status is the row's STATUS as found.
	Status string
	// Orphan is true for a RECEIVED or IN_PROGRESS row that no
	// store-then-process receiver wrote.
	Orphan bool
}

func (e *UnknownStatusError) Error() string {
	what := fmt.Sprintf("status %q, which the inbox's state machine does not know", e.Status)
	if e.Orphan {
		what = fmt.Sprintf("status %s without payload or lease (a legacy row no worker will process)", e.Status)
	}
	return fmt.Sprintf("inbox: the row of event %q (consumer %s) has %s: dead-lettered, the row left as it is; "+
		"map the status with inboxctl migrate --map-status '%s=TECHNICAL_FAILURE' (or PROCESSED, REJECTED, DEAD_LETTERED), then replay the dead letter",
		e.EventID, e.ConsumerName, what, e.Status)
}

// InboxDecision is technical with reason UNKNOWN_STATUS: not the message's
// fault, and not retried.
func (e *UnknownStatusError) InboxDecision() inboxkit.Decision {
	return inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonUnknownStatus}
}

// UnknownStatus is one status value of the inbox table that the state
// machine does not know, with its rows.
type UnknownStatus struct {
	Status string `json:"status"`
	// Orphan is true for RECEIVED or IN_PROGRESS rows that no
	// store-then-process receiver wrote (no payload hash, no lease; every
	// such row of a table without those columns): legacy rows no worker
	// will ever process. Status then names the status they have.
	Orphan bool  `json:"orphan,omitempty"`
	Rows   int64 `json:"rows"`
}

// String is "FAILED (3 rows)", or "IN_PROGRESS without payload or lease
// (1 row)" for orphans.
func (u UnknownStatus) String() string {
	what := u.Status
	if u.Orphan {
		what += " without payload or lease"
	}
	return fmt.Sprintf("%s (%s)", what, plural(u.Rows, "row"))
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// MappableStatuses are the statuses MigrateOptions.MapStatus maps to:
// TECHNICAL_FAILURE (processed when its message comes again) and the
// terminal ones (a redelivery is a duplicate). RECEIVED and IN_PROGRESS
// are not among them: a mapped row has no stored message for a worker.
var MappableStatuses = []inboxkit.Status{inboxkit.StatusTechnicalFailure, inboxkit.StatusProcessed, inboxkit.StatusRejected, inboxkit.StatusDeadLettered}

// ErrBadMapping is wrapped by the errors of ValidateStatusMapping.
var ErrBadMapping = errors.New("inbox: invalid status mapping")

// ValidateStatusMapping checks a MigrateOptions.MapStatus: every target
// is one of MappableStatuses (spelled exactly), and no source is a status
// of the state machine other than RECEIVED or IN_PROGRESS (which map their
// orphans). Its errors wrap ErrBadMapping and name the valid targets.
func ValidateStatusMapping(m map[string]inboxkit.Status) error {
	for _, from := range slices.Sorted(maps.Keys(m)) {
		to := m[from]
		switch {
		case !slices.Contains(MappableStatuses, to):
			return fmt.Errorf("%w: %s=%s: %q is not a status to map to; use one of %s (TECHNICAL_FAILURE: processed when its message comes again; the others: a redelivery is a duplicate)",
				ErrBadMapping, from, to, to, MappableList())
		case from == "" || len(from) > 80:
			return fmt.Errorf("%w: %q=%s: the status to map must be 1 to 80 characters", ErrBadMapping, from, to)
		case inboxkit.Status(from).Known() && !isOpen(inboxkit.Status(from)):
			return fmt.Errorf("%w: %s=%s: %s is a status of the state machine; --map-status maps the values it does not know (and the RECEIVED or IN_PROGRESS rows of a legacy consumer)",
				ErrBadMapping, from, to, from)
		}
	}
	return nil
}

// MappableList is MappableStatuses as text: "TECHNICAL_FAILURE, PROCESSED,
// REJECTED, DEAD_LETTERED".
func MappableList() string {
	names := make([]string, len(MappableStatuses))
	for i, s := range MappableStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// ErrUnknownStatuses is wrapped by *UnknownStatusesError.
var ErrUnknownStatuses = errors.New("inbox: the inbox table holds status values the state machine does not know")

// UnknownStatusesError is returned by MigrateDB, MigrateDBWith and
// PlanMigration when the table holds status values the state machine does
// not know that the options do not map. Nothing was changed.
type UnknownStatusesError struct {
	Table string
	// Unknown are all such values found, Unmapped those the options do
	// not map.
	Unknown, Unmapped []UnknownStatus
}

func (e *UnknownStatusesError) Error() string {
	var vals, example []string
	for _, u := range e.Unmapped {
		vals = append(vals, u.String())
		example = append(example, u.Status+"="+string(u.Suggested()))
	}
	return fmt.Sprintf("inbox: %s holds status values the state machine does not know: %s; nothing was changed. "+
		"Map each to one of %s: inboxctl migrate --map-status '%s'",
		e.Table, strings.Join(vals, ", "), MappableList(), strings.Join(example, ","))
}

// Unwrap returns ErrUnknownStatuses.
func (e *UnknownStatusesError) Unwrap() error { return ErrUnknownStatuses }

// Suggested is the mapping an example shows for u: TECHNICAL_FAILURE
// for a legacy consumer's unfinished row or a value that says it failed,
// the status u differs from only in case, else "?" for the team to decide.
func (u UnknownStatus) Suggested() inboxkit.Status {
	up := strings.ToUpper(u.Status)
	if u.Orphan || strings.Contains(up, "FAIL") || strings.Contains(up, "ERROR") {
		return inboxkit.StatusTechnicalFailure
	}
	for _, s := range MappableStatuses {
		if up == string(s) {
			return s
		}
	}
	return "?"
}

// unmapped returns the values of found that m does not map.
func unmapped(found []UnknownStatus, m map[string]inboxkit.Status) []UnknownStatus {
	var out []UnknownStatus
	for _, u := range found {
		if _, ok := m[u.Status]; !ok {
			out = append(out, u)
		}
	}
	return out
}

// exactStatus is the dialect's byte-for-byte STATUS expression.
func (d Dialect) exactStatus() string {
	if d.schema.exactStatus != "" {
		return d.schema.exactStatus
	}
	return "STATUS"
}

// unknownCond is true for a row whose status the state machine does not
// know, or an orphan RECEIVED or IN_PROGRESS row, on a table with every
// column.
func (d Dialect) unknownCond() string {
	var known []string
	for _, s := range []inboxkit.Status{inboxkit.StatusReceived, inboxkit.StatusInProgress, inboxkit.StatusProcessed,
		inboxkit.StatusRejected, inboxkit.StatusTechnicalFailure, inboxkit.StatusDeadLettered} {
		known = append(known, "'"+string(s)+"'")
	}
	x := d.exactStatus()
	return "(" + x + " NOT IN (" + strings.Join(known, ", ") + ") OR (" + x + " IN ('RECEIVED', 'IN_PROGRESS') AND " + orphanCond + "))"
}

// census counts the rows of every status value the state machine does not
// know, and the orphan RECEIVED and IN_PROGRESS rows; nil when the table
// does not exist.
func census(ctx context.Context, q querier, d Dialect, table string, st schemaState) ([]UnknownStatus, error) {
	out := []UnknownStatus{}
	if !st.tableExists {
		return out, nil
	}
	x := d.exactStatus()
	counts := map[string]int64{}
	rows, err := q.QueryContext(ctx, `SELECT `+x+`, COUNT(*) FROM `+table+` GROUP BY `+x)
	if err != nil {
		return nil, fmt.Errorf("inbox: count the statuses of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("inbox: count the statuses of %s: %w", table, err)
		}
		counts[s] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: count the statuses of %s: %w", table, err)
	}
	for _, s := range []inboxkit.Status{inboxkit.StatusReceived, inboxkit.StatusInProgress} {
		n := counts[string(s)]
		if n > 0 && st.columns["PAYLOAD_HASH"] && st.columns["LEASE_UNTIL"] {
			err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+` WHERE `+x+` = '`+string(s)+`' AND `+orphanCond).Scan(&n)
			if err != nil {
				return nil, fmt.Errorf("inbox: count the orphan %s rows of %s: %w", s, table, err)
			}
		}
		if n > 0 {
			out = append(out, UnknownStatus{Status: string(s), Orphan: true, Rows: n})
		}
	}
	for s, n := range counts {
		if !inboxkit.Status(s).Known() {
			out = append(out, UnknownStatus{Status: s, Rows: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Status < out[j].Status })
	return out, nil
}

// sqlString is s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// mappingStatements are the statements of a status mapping, in the order
// of the source values: per pair, the record of what it maps (its rows
// counted before), then the UPDATE. A source of RECEIVED or IN_PROGRESS
// maps the orphans of that status only.
func mappingStatements(d Dialect, table string, m map[string]inboxkit.Status) []string {
	var out []string
	for _, from := range slices.Sorted(maps.Keys(m)) {
		to := m[from]
		where := d.exactStatus() + " = " + sqlString(from)
		if isOpen(inboxkit.Status(from)) {
			where += " AND " + orphanCond
		}
		detail := fmt.Sprintf("%s -> %s", from, to)
		out = append(out, fmt.Sprintf("INSERT INTO %s (TABLE_NAME, KIND, ROWS_AFFECTED, DETAIL) SELECT %s, %s, COUNT(*), %s FROM %s WHERE %s HAVING COUNT(*) > 0",
			HistoryTable, sqlString(table), sqlString(historyMapStatus), sqlString(shortDetail(detail)), table, where))
		set := "STATUS = " + sqlString(string(to))
		if to == inboxkit.StatusTechnicalFailure && !isOpen(inboxkit.Status(from)) {
			// A failure that was recorded: the next attempt marker must not
			// take it for one that died without an outcome (ERROR_CLASS NULL).
			set += ", ERROR_CLASS = 'TECHNICAL', LAST_ERROR = COALESCE(LAST_ERROR, " +
				sqlString(shortError("legacy status "+from+", mapped to TECHNICAL_FAILURE by inboxctl migrate")) + ")"
		}
		out = append(out, "UPDATE "+table+" SET "+set+" WHERE "+where)
	}
	return out
}

// ForReading returns a Store for the read-only queries (Get,
// ByCorrelation, ByEventID, Stats, CountByStatus, Baseline) that also works
// on a table an older version left, the legacy seed table before Migrate
// included: the columns it lacks read as NULL (0 for ATTEMPTS and
// REPLAY_COUNT). It returns s itself when the table has every column, and
// a *SchemaError (TableMissing) when there is no table. Writing through the
// returned Store fails on the missing columns: migrate first.
func (s *Store) ForReading(ctx context.Context) (*Store, error) {
	st, err := introspect(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return nil, err
	}
	if !st.tableExists {
		return nil, &SchemaError{Table: s.cfg.Table, Latest: SchemaVersion, TableMissing: true}
	}
	missing := map[string]bool{}
	for _, c := range allColumns() {
		if !st.columns[c.name] {
			missing[c.name] = true
		}
	}
	if len(missing) == 0 {
		return s, nil
	}
	r := &Store{db: s.db, d: s.d, cfg: s.cfg, q: s.q, qq: s.qq, attempts: s.attempts, missing: missing}
	const key = ` WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer`
	r.q.selectOne = compile(s.d, `SELECT `+r.recordColumns()+` FROM `+s.cfg.Table+key)
	r.q.selectByCorr = s.d.Rebind(`SELECT ` + r.recordColumns() + ` FROM ` + s.cfg.Table + ` WHERE CORRELATION_ID = ? ORDER BY CREATED_AT, EVENT_ID, CONSUMER_NAME`)
	return r, nil
}

// recordColumns are the columns of a Record, those the table lacks (see
// ForReading) as NULL or 0.
func (s *Store) recordColumns() string {
	if len(s.missing) == 0 {
		return recordColumns
	}
	cols := strings.Split(recordColumns, ", ")
	for i, c := range cols {
		cols[i] = s.col(c)
	}
	return strings.Join(cols, ", ")
}

// col is column c, or a stand-in named c where the table lacks it (see
// ForReading): 0 for a counter, else NULL.
func (s *Store) col(c string) string {
	if !s.missing[c] {
		return c
	}
	if c == "ATTEMPTS" || c == "REPLAY_COUNT" {
		return "0 AS " + c
	}
	return "NULL AS " + c
}

// UnknownStatuses counts the rows of each status value the state machine
// does not know, and the orphan RECEIVED and IN_PROGRESS rows (see
// UnknownStatus), ordered by status; empty, never nil, when there are
// none. It is a GROUP BY over the whole table.
func (s *Store) UnknownStatuses(ctx context.Context) ([]UnknownStatus, error) {
	st, err := introspect(ctx, s.db, s.d, s.cfg.Table)
	if err != nil {
		return nil, err
	}
	return census(ctx, s.db, s.d, s.cfg.Table, st)
}

// UnknownStatusRows returns at most limit rows (oldest first) whose status
// the state machine does not know, or that are orphan RECEIVED or
// IN_PROGRESS rows. A limit of 0 or less means 100.
func (s *Store) UnknownStatusRows(ctx context.Context, limit int) ([]Record, error) {
	if limit <= 0 {
		limit = 100
	}
	_, lim := s.d.limit("?")
	out, err := s.query(ctx, s.d.Rebind(`SELECT `+s.recordColumns()+` FROM `+s.cfg.Table+` WHERE `+s.d.unknownCond()+` ORDER BY CREATED_AT, EVENT_ID`+lim), limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: rows in unknown statuses: %w", err)
	}
	return out, nil
}
