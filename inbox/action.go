package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ActionTable records who did what to a table outside the consumers, one
// row per operator action: TABLE_NAME (the inbox or outbox table acted
// on), ACTED_AT, OPERATOR, ACTION (dlq-replay, dlq-replay-abandon,
// dlq-drop, failures-archive, failures-restore, outbox-retry, outbox-drop,
// map-status, purge), EVENT_IDS (the events, space
// separated, cut to 1000 characters: ROWS_AFFECTED is the count), and
// DETAIL (the selection: queue, flags). Migration step 8 creates it; it
// is shared by the tables of a schema, like HistoryTable.
const ActionTable = "INBOXKIT_OPERATOR_ACTION"

const (
	maxOperator     = 80
	maxActionEvents = 1000
)

// Action is one recorded operator action.
type Action struct {
	// Table is the table acted on (an inbox or an outbox table).
	Table    string    `json:"table"`
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	// Action names what was done: dlq-replay, dlq-replay-abandon,
	// dlq-drop, failures-archive, failures-restore, outbox-retry,
	// outbox-drop, map-status, purge.
	Action string `json:"action"`
	// EventIDs are the events acted on (as many as fit in 1000
	// characters; Rows counts them all).
	EventIDs []string `json:"eventIds"`
	Rows     int64    `json:"rows"`
	Detail   string   `json:"detail,omitempty"`
}

// RecordAction writes a into ActionTable (its At, when zero, is the
// store's clock; its Table, when empty, the inbox table). An action is
// recorded after it took effect, so a failure to record it is reported to
// the operator but undoes nothing.
func (s *Store) RecordAction(ctx context.Context, a Action) error {
	if a.Table == "" {
		a.Table = s.cfg.Table
	}
	if a.At.IsZero() {
		a.At = s.now()
	}
	return RecordAction(ctx, s.db, s.d, a)
}

// RecordAction writes a into ActionTable of db, for a command that acts on
// a table other than an inbox table (the outbox); a.At zero is now.
func RecordAction(ctx context.Context, db *sql.DB, d Dialect, a Action) error {
	if a.At.IsZero() {
		a.At = time.Now()
	}
	if strings.TrimSpace(a.Operator) == "" {
		return fmt.Errorf("inbox: record the %s action: the operator is empty (give --operator NAME or set $USER)", a.Action)
	}
	ids := ""
	for _, id := range a.EventIDs {
		if len(ids)+len(id)+1 > maxActionEvents {
			break
		}
		if ids != "" {
			ids += " "
		}
		ids += id
	}
	q := d.Rebind(`INSERT INTO ` + ActionTable + ` (TABLE_NAME, ACTED_AT, OPERATOR, ACTION, EVENT_IDS, ROWS_AFFECTED, DETAIL) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if _, err := db.ExecContext(ctx, q, a.Table, d.timeArg(a.At.UTC()), cut(a.Operator, maxOperator), a.Action, nullString(ids), a.Rows, nullString(shortDetail(a.Detail))); err != nil {
		return fmt.Errorf("inbox: record the %s action in %s (run inboxctl migrate): %w", a.Action, ActionTable, err)
	}
	return nil
}

// ActionFilter selects recorded actions; the zero filter selects all.
type ActionFilter struct {
	Operator string
	// EventID keeps the actions that name the event.
	EventID string
}

// Actions returns the recorded operator actions on every table of the
// schema, oldest first.
func (s *Store) Actions(ctx context.Context, f ActionFilter) ([]Action, error) {
	q := `SELECT TABLE_NAME, ACTED_AT, OPERATOR, ACTION, EVENT_IDS, ROWS_AFFECTED, DETAIL FROM ` + ActionTable + ` WHERE 1 = 1`
	var args []any
	if f.Operator != "" {
		q += " AND OPERATOR = ?"
		args = append(args, f.Operator)
	}
	if f.EventID != "" {
		q += " AND EVENT_IDS LIKE ?"
		args = append(args, "%"+f.EventID+"%") // narrowed to the exact id below
	}
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q+" ORDER BY ACTED_AT, ACTION"), args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the operator actions from %s (run inboxctl migrate): %w", ActionTable, err)
	}
	defer rows.Close()
	out := []Action{}
	for rows.Next() {
		var a Action
		var at dbTime
		var ids, detail sql.NullString
		if err := rows.Scan(&a.Table, &at, &a.Operator, &a.Action, &ids, &a.Rows, &detail); err != nil {
			return nil, fmt.Errorf("inbox: read the operator actions: %w", err)
		}
		a.At, a.Detail, a.EventIDs = at.Time, detail.String, strings.Fields(ids.String)
		if a.EventIDs == nil {
			a.EventIDs = []string{}
		}
		if f.EventID != "" && !slices.Contains(a.EventIDs, f.EventID) {
			continue
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the operator actions: %w", err)
	}
	return out, nil
}
