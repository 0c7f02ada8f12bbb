package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// HistoryTable records what was done to an inbox table outside the
// consumers, one row per event: a purge run (kind purge: when, the cutoff,
// the window and the redelivery horizon in force, the rows deleted) and a
// status mapping of Migrate (kind map-status: which value became which
// status, how many rows). Columns: TABLE_NAME, KIND, RAN_AT, CUTOFF,
// WINDOW_SECONDS, HORIZON_SECONDS, ROWS_AFFECTED, DETAIL. Migration step 6
// creates it; it is shared by the inbox tables of a schema, like
// INBOXKIT_SCHEMA_VERSION.
const HistoryTable = "INBOXKIT_HISTORY"

// The KIND values of HistoryTable.
const (
	historyPurge     = "purge"
	historyMapStatus = "map-status"
)

const maxHistoryDetail = 200

// sideIndexes are the indexes of the side tables that have some; an
// index's name is the table's + "_" + its suffix.
var sideIndexes = map[string][]index{
	AttemptTable: {{"EVENT", "TABLE_NAME, EVENT_ID, CONSUMER_NAME", ""}},
}

// sideTableDDL is the CREATE TABLE of a table a step keeps beside the
// inbox table, followed by the CREATE INDEX of its indexes (declared in
// the CREATE TABLE where the dialect does so).
func sideTableDDL(d Dialect, name string) []string {
	var cols []string
	switch name {
	case HistoryTable:
		cols = []string{
			d.columnDDL(column{"TABLE_NAME", kVarchar, 30, true}),
			d.columnDDL(column{"KIND", kVarchar, 20, true}),
			d.columnDDL(column{"RAN_AT", kCreated, 0, true}),
			d.columnDDL(column{"CUTOFF", kTime, 0, false}),
			"WINDOW_SECONDS " + d.schema.integer,
			"HORIZON_SECONDS " + d.schema.integer,
			d.columnDDL(column{"ROWS_AFFECTED", kCount, 0, true}),
			d.columnDDL(column{"DETAIL", kVarchar, maxHistoryDetail, false}),
		}
	case ActionTable:
		cols = []string{
			d.columnDDL(column{"TABLE_NAME", kVarchar, 30, true}),
			d.columnDDL(column{"ACTED_AT", kCreated, 0, true}),
			d.columnDDL(column{"OPERATOR", kVarchar, maxOperator, true}),
			d.columnDDL(column{"ACTION", kVarchar, 40, true}),
			d.columnDDL(column{"EVENT_IDS", kVarchar, maxActionEvents, false}),
			d.columnDDL(column{"ROWS_AFFECTED", kCount, 0, true}),
			d.columnDDL(column{"DETAIL", kVarchar, maxHistoryDetail, false}),
		}
	case ReplayJobTable:
		cols = []string{
			"JOB_ID " + d.schema.integer + " NOT NULL",
			d.columnDDL(column{"TABLE_NAME", kVarchar, 30, true}),
			d.columnDDL(column{"QUEUE_NAME", kVarchar, 200, true}),
			d.columnDDL(column{"SELECTION", kVarchar, maxJobSelection, true}),
			d.columnDDL(column{"OPERATOR", kVarchar, maxOperator, true}),
			d.columnDDL(column{"RATE", kVarchar, 20, false}),
			d.columnDDL(column{"MAX_EVENTS", kCount, 0, true}),
			d.columnDDL(column{"STATE", kVarchar, 20, true}),
			d.columnDDL(column{"REPLAYED", kCount, 0, true}),
			d.columnDDL(column{"SKIPPED", kCount, 0, true}),
			d.columnDDL(column{"FAILED_AGAIN", kCount, 0, true}),
			d.columnDDL(column{"STOP_REASON", kVarchar, maxHistoryDetail, false}),
			d.columnDDL(column{"CREATED_AT", kCreated, 0, true}),
			d.columnDDL(column{"UPDATED_AT", kTime, 0, false}),
			"CONSTRAINT " + ReplayJobTable + "_PK PRIMARY KEY (JOB_ID)",
		}
	case ReplayItemTable:
		cols = []string{
			"JOB_ID " + d.schema.integer + " NOT NULL",
			d.columnDDL(column{"EVENT_ID", kVarchar, 120, true}),
			d.columnDDL(column{"CONSUMER_NAME", kVarchar, 80, true}),
			d.columnDDL(column{"STATE", kVarchar, 20, true}),
			d.columnDDL(column{"REOPENED_AT", kTime, 0, false}),
			d.columnDDL(column{"SENT_AT", kTime, 0, false}),
			"CONSTRAINT " + ReplayItemTable + "_PK PRIMARY KEY (JOB_ID, EVENT_ID, CONSUMER_NAME)",
		}
	case AttemptTable:
		cols = attemptColumns(d)
	default:
		panic("inbox: no DDL for side table " + name)
	}
	var out []string
	for _, ix := range sideIndexes[name] {
		ixName := name + "_" + ix.suffix
		if d.schema.inlineIndexes {
			cols = append(cols, "INDEX "+ixName+" ("+ix.cols+")")
		} else {
			out = append(out, ix.ddl(d, d.schema.ifNotExists, ixName, name))
		}
	}
	return append([]string{"CREATE TABLE" + d.schema.ifNotExists + " " + name + " (\n    " + strings.Join(cols, ",\n    ") + "\n)"}, out...)
}

func shortDetail(s string) string { return cut(s, maxHistoryDetail) }

func shortError(s string) string { return cut(s, 1000) }

// PurgeRun is one recorded run of Purge that deleted rows.
type PurgeRun struct {
	// At is when the run started (the store's clock).
	At time.Time `json:"at"`
	// Cutoff is the run's horizon: terminal rows finished before it were
	// deleted.
	Cutoff time.Time `json:"cutoff"`
	// Window is PurgeOptions.OlderThan, Horizon the
	// Config.RedeliveryHorizon the run was allowed under.
	Window  time.Duration `json:"window"`
	Horizon time.Duration `json:"horizon"`
	// Rows is how many rows it deleted.
	Rows int64 `json:"rows"`
}

// String is "purge of 2026-03-01 09:00:00 (window 1s, horizon 1s: rows
// finished before 2026-03-01 08:59:59 deleted, 12 rows)".
func (r PurgeRun) String() string {
	const layout = "2006-01-02 15:04:05"
	return fmt.Sprintf("purge of %s (window %s, horizon %s: rows finished before %s deleted, %s)",
		r.At.UTC().Format(layout), r.Window, r.Horizon, r.Cutoff.UTC().Format(layout), plural(r.Rows, "row"))
}

// recordPurge records a purge run that deleted rows in HistoryTable.
func (s *Store) recordPurge(ctx context.Context, r PurgeRun) error {
	q := s.d.Rebind(`INSERT INTO ` + HistoryTable + ` (TABLE_NAME, KIND, RAN_AT, CUTOFF, WINDOW_SECONDS, HORIZON_SECONDS, ROWS_AFFECTED) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	_, err := s.db.ExecContext(ctx, q, s.cfg.Table, historyPurge, s.t(r.At), s.t(r.Cutoff), int64(r.Window/time.Second), int64(r.Horizon/time.Second), r.Rows)
	if err != nil {
		return fmt.Errorf("inbox: record the purge run in %s: %w", HistoryTable, err)
	}
	return nil
}

// PurgeRuns returns the recorded purge runs of the inbox table, oldest
// first.
func (s *Store) PurgeRuns(ctx context.Context) ([]PurgeRun, error) {
	q := s.d.Rebind(`SELECT RAN_AT, CUTOFF, WINDOW_SECONDS, HORIZON_SECONDS, ROWS_AFFECTED FROM ` + HistoryTable +
		` WHERE TABLE_NAME = ? AND KIND = ? ORDER BY RAN_AT`)
	rows, err := s.db.QueryContext(ctx, q, s.cfg.Table, historyPurge)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the purge runs: %w", err)
	}
	defer rows.Close()
	var out []PurgeRun
	for rows.Next() {
		var at, cutoff dbTime
		var window, horizon sql.NullInt64
		var r PurgeRun
		if err := rows.Scan(&at, &cutoff, &window, &horizon, &r.Rows); err != nil {
			return nil, fmt.Errorf("inbox: read the purge runs: %w", err)
		}
		r.At, r.Cutoff = at.Time, cutoff.Time
		r.Window, r.Horizon = time.Duration(window.Int64)*time.Second, time.Duration(horizon.Int64)*time.Second
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the purge runs: %w", err)
	}
	return out, nil
}

// Mapping is one recorded status mapping of Migrate.
type Mapping struct {
	At time.Time `json:"at"`
	// Detail is "FROM -> TO".
	Detail string `json:"detail"`
	Rows   int64  `json:"rows"`
}

// StatusMappings returns the status mappings Migrate applied to the inbox
// table, oldest first.
func (s *Store) StatusMappings(ctx context.Context) ([]Mapping, error) {
	q := s.d.Rebind(`SELECT RAN_AT, DETAIL, ROWS_AFFECTED FROM ` + HistoryTable + ` WHERE TABLE_NAME = ? AND KIND = ? ORDER BY RAN_AT, DETAIL`)
	rows, err := s.db.QueryContext(ctx, q, s.cfg.Table, historyMapStatus)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the status mappings: %w", err)
	}
	defer rows.Close()
	var out []Mapping
	for rows.Next() {
		var at dbTime
		var detail sql.NullString
		var m Mapping
		if err := rows.Scan(&at, &detail, &m.Rows); err != nil {
			return nil, fmt.Errorf("inbox: read the status mappings: %w", err)
		}
		m.At, m.Detail = at.Time, detail.String
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the status mappings: %w", err)
	}
	return out, nil
}

// ErrNoBaseline is returned by Baseline for a table no migration was
// recorded for.
var ErrNoBaseline = errors.New("inbox: no migration recorded for the table")

// Baseline is when Migrate first ran on the inbox table: the APPLIED_AT
// of its first step in INBOXKIT_SCHEMA_VERSION, in the database's clock.
// For a table Migrate created it is the table's creation; for a legacy
// table it is its adoption, and the rows finished before it were written
// by the legacy consumer (whose business rows inboxkit's checks cannot
// know, and whose event ids have no recorded source). ErrNoBaseline when
// nothing is recorded (a table not migrated yet: every row is legacy).
func (s *Store) Baseline(ctx context.Context) (time.Time, error) {
	var at dbTime
	q := s.d.Rebind(`SELECT MIN(APPLIED_AT) FROM ` + VersionTable + ` WHERE TABLE_NAME = ?`)
	if err := s.db.QueryRowContext(ctx, q, s.cfg.Table).Scan(&at); err != nil {
		var n int
		if s.db.QueryRowContext(ctx, s.d.schema.existsQuery, VersionTable).Scan(&n) == nil && n == 0 {
			return time.Time{}, ErrNoBaseline
		}
		return time.Time{}, fmt.Errorf("inbox: read the baseline from %s: %w", VersionTable, err)
	}
	if !at.Valid {
		return time.Time{}, ErrNoBaseline
	}
	return at.Time, nil
}
