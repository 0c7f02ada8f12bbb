package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// FailureGroup is the failed rows of one consumer that share status,
// reason, class and the Fingerprint of their last error.
type FailureGroup struct {
	// ID is GroupID of the group's key.
	ID           string          `json:"id"`
	ConsumerName string          `json:"consumer"`
	Status       inboxkit.Status `json:"status"`
	ReasonCode   string          `json:"reason"`
	ErrorClass   string          `json:"class"`
	Fingerprint  string          `json:"fingerprint"`
	// Example is one last error of the group, as recorded.
	Example string `json:"example"`
	Rows    int64  `json:"rows"`
	// FirstFailed is the earliest FIRST_FAILED_AT (CREATED_AT where none),
	// LastFailed the latest UPDATED_AT (PROCESSED_AT, CREATED_AT where none).
	FirstFailed time.Time `json:"firstFailed"`
	LastFailed  time.Time `json:"lastFailed"`
	// Replays is the sum of the rows' REPLAY_COUNT, Replayed the rows
	// replayed at least once.
	Replays  int64 `json:"replays"`
	Replayed int64 `json:"replayed"`
}

// FailureFilter narrows FailureGroups.
type FailureFilter struct {
	// Consumer keeps one consumer's rows ("" for all).
	Consumer string
	// Since keeps the rows that last changed at or after it, Until those
	// that last changed before it (zero: no bound). A failure's last time
	// is its row's UPDATED_AT (PROCESSED_AT, CREATED_AT where none).
	Since, Until time.Time
	// Archived selects the archived rows (ArchiveGroup) instead of the
	// others: a failure group, a replay's selection and FailureGroups see
	// only the rows not archived unless Archived is set.
	Archived bool
}

// filterWhere is the WHERE condition of the failed rows f selects, with
// its arguments; a group's rows add their own conditions after it.
func (s *Store) filterWhere(f FailureFilter) (string, []any) {
	where, args := s.failedRows(), []any{s.cfg.Retry.MaxAttempts}
	if f.Archived {
		where += " AND " + s.expr("ARCHIVED_AT") + " IS NOT NULL"
	} else {
		where += " AND " + s.expr("ARCHIVED_AT") + " IS NULL"
	}
	if f.Consumer != "" {
		where += " AND CONSUMER_NAME = ?"
		args = append(args, f.Consumer)
	}
	if !f.Since.IsZero() {
		where += " AND " + s.lastChanged() + " >= ?"
		args = append(args, s.t(f.Since))
	}
	if !f.Until.IsZero() {
		where += " AND " + s.lastChanged() + " < ?"
		args = append(args, s.t(f.Until))
	}
	return where, args
}

// failedRows is the WHERE condition of the failed rows: DEAD_LETTERED,
// REJECTED, and TECHNICAL_FAILURE at the backout threshold (the one ?).
// Statuses byte for byte, as in Stats.
func (s *Store) failedRows() string {
	return strings.NewReplacer("{status}", s.d.exactStatus(), "{attempts}", s.expr("ATTEMPTS")).Replace(
		`({status} IN ('DEAD_LETTERED', 'REJECTED') OR ({status} = 'TECHNICAL_FAILURE' AND {attempts} >= ?))`)
}

// expr is column c in an expression, or its stand-in where the table lacks
// it (ForReading): 0 for a counter, else NULL.
func (s *Store) expr(c string) string {
	if !s.missing[c] {
		return c
	}
	if c == "ATTEMPTS" || c == "REPLAY_COUNT" {
		return "0"
	}
	return "NULL"
}

// lastChanged is when a row last changed: UPDATED_AT, else PROCESSED_AT,
// else CREATED_AT.
func (s *Store) lastChanged() string {
	return "COALESCE(" + s.expr("UPDATED_AT") + ", PROCESSED_AT, CREATED_AT)"
}

// FailureGroups groups the failed rows (DEAD_LETTERED, REJECTED, and
// TECHNICAL_FAILURE with ATTEMPTS at Config.Retry.MaxAttempts or above) by
// consumer, status, reason, class and the Fingerprint of LAST_ERROR, the
// largest group first. The database groups by the last error as recorded
// and this function folds the texts that share a fingerprint, so the
// query's cost is one pass over the failed rows (through the
// (STATUS, PROCESSED_AT) index where the statuses are few) plus one result
// row per distinct error text. docs/decisions.md has its time at a
// million failed rows. On PostgreSQL it runs in a read-only transaction
// with work_mem raised to 64 MB (SET LOCAL), so that the groups are hashed
// in memory rather than the rows sorted on disk.
func (s *Store) FailureGroups(ctx context.Context, f FailureFilter) ([]FailureGroup, error) {
	where, args := s.filterWhere(f)
	q := s.d.Rebind(strings.NewReplacer("{t}", s.cfg.Table, "{status}", s.d.exactStatus(), "{class}", s.expr("ERROR_CLASS"),
		"{error}", s.expr("LAST_ERROR"), "{first}", "COALESCE("+s.expr("FIRST_FAILED_AT")+", CREATED_AT)",
		"{last}", s.lastChanged(), "{replays}", s.expr("REPLAY_COUNT"), "{where}", where).Replace(
		`SELECT CONSUMER_NAME, {status}, REASON_CODE, {class}, {error}, COUNT(*), MIN({first}), MAX({last}),
	SUM({replays}), SUM(CASE WHEN {replays} > 0 THEN 1 ELSE 0 END)
	FROM {t} WHERE {where} GROUP BY CONSUMER_NAME, {status}, REASON_CODE, {class}, {error}`))
	var qr querier = s.db
	if s.d.aggregateMemory != "" {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, fmt.Errorf("inbox: failure groups: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // read only: nothing to keep
		if _, err := tx.ExecContext(ctx, s.d.aggregateMemory); err != nil {
			return nil, fmt.Errorf("inbox: failure groups: %w", err)
		}
		qr = tx
	}
	rows, err := qr.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: failure groups: %w", err)
	}
	defer rows.Close()
	byID := map[string]*FailureGroup{}
	for rows.Next() {
		var consumer, status string
		var reason, class, lastErr sql.NullString
		var n, replays, replayed int64
		var first, last dbTime
		if err := rows.Scan(&consumer, &status, &reason, &class, &lastErr, &n, &first, &last, &replays, &replayed); err != nil {
			return nil, fmt.Errorf("inbox: failure groups: %w", err)
		}
		id, fp := groupOf(consumer, status, reason, class, lastErr)
		g := byID[id]
		if g == nil {
			g = &FailureGroup{ID: id, ConsumerName: consumer, Status: inboxkit.Status(status), ReasonCode: reason.String,
				ErrorClass: class.String, Fingerprint: fp, Example: lastErr.String, FirstFailed: first.Time, LastFailed: last.Time}
			byID[id] = g
		}
		g.Rows += n
		g.Replays += replays
		g.Replayed += replayed
		if first.Time.Before(g.FirstFailed) {
			g.FirstFailed = first.Time
		}
		if last.Time.After(g.LastFailed) {
			g.LastFailed, g.Example = last.Time, lastErr.String // the latest text is the example
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: failure groups: %w", err)
	}
	out := make([]FailureGroup, 0, len(byID))
	for _, g := range byID {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rows != out[j].Rows {
			return out[i].Rows > out[j].Rows
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// ErrNoSuchGroup is returned by GroupEvents for an id no failure group
// has.
var ErrNoSuchGroup = errors.New("inbox: no such failure group")

// GroupEvents returns the failure group with the id (FailureGroup.ID,
// among the groups f selects) and the event ids of its rows, oldest
// change first. A replay selects its dead letters by these ids.
func (s *Store) GroupEvents(ctx context.Context, id string, f FailureFilter) (FailureGroup, []string, error) {
	groups, err := s.FailureGroups(ctx, f)
	if err != nil {
		return FailureGroup{}, nil, err
	}
	var g FailureGroup
	for _, x := range groups {
		if x.ID == id {
			g = x
		}
	}
	if g.ID == "" {
		return g, nil, fmt.Errorf("%w %q among %d group(s): list them with inboxctl failures groups", ErrNoSuchGroup, id, len(groups))
	}
	where, args := s.filterWhere(f)
	where += " AND CONSUMER_NAME = ? AND " + s.d.exactStatus() + " = ?"
	args = append(args, g.ConsumerName, string(g.Status))
	for _, c := range []struct{ col, v string }{{"REASON_CODE", g.ReasonCode}, {s.expr("ERROR_CLASS"), g.ErrorClass}} {
		if c.v == "" {
			where += " AND " + c.col + " IS NULL"
		} else {
			where += " AND " + c.col + " = ?"
			args = append(args, c.v)
		}
	}
	q := s.d.Rebind(`SELECT EVENT_ID, ` + s.expr("LAST_ERROR") + ` FROM ` + s.cfg.Table + ` WHERE ` + where + ` ORDER BY ` + s.lastChanged() + `, EVENT_ID`)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return g, nil, fmt.Errorf("inbox: events of failure group %s: %w", id, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var ev string
		var lastErr sql.NullString
		if err := rows.Scan(&ev, &lastErr); err != nil {
			return g, nil, fmt.Errorf("inbox: events of failure group %s: %w", id, err)
		}
		if Fingerprint(lastErr.String) == g.Fingerprint {
			ids = append(ids, ev)
		}
	}
	if err := rows.Err(); err != nil {
		return g, nil, fmt.Errorf("inbox: events of failure group %s: %w", id, err)
	}
	return g, ids, nil
}

// groupOf is the failure group id (FailureGroup.ID) and fingerprint of a
// failed row with these columns: FailureGroups and GroupsOf group by it.
func groupOf(consumer, status string, reason, class, lastErr sql.NullString) (id, fingerprint string) {
	fp := Fingerprint(lastErr.String)
	return GroupID(consumer, status, reason.String, class.String, fp), fp
}

// GroupedEvent is a failed row and the id of its failure group.
type GroupedEvent struct {
	ConsumerName string
	EventID      string
	Group        string
}

// groupsOfChunk bounds the event ids of one GroupsOf query.
const groupsOfChunk = 500

// GroupsOf returns the failed rows among those f selects whose event id is
// one of eventIDs (of any consumer), each with the id of the failure group
// FailureGroups puts it in (the same columns, the same Fingerprint). It
// asks one query per 500 ids, through the primary key (EVENT_ID,
// CONSUMER_NAME). A dead letter on a queue finds its group by its
// envelope's consumer and event id here.
func (s *Store) GroupsOf(ctx context.Context, f FailureFilter, eventIDs []string) ([]GroupedEvent, error) {
	var out []GroupedEvent
	where, fargs := s.filterWhere(f)
	for len(eventIDs) > 0 {
		n := min(len(eventIDs), groupsOfChunk)
		batch := eventIDs[:n]
		eventIDs = eventIDs[n:]
		q := s.d.Rebind(`SELECT CONSUMER_NAME, EVENT_ID, ` + s.d.exactStatus() + `, REASON_CODE, ` + s.expr("ERROR_CLASS") + `, ` + s.expr("LAST_ERROR") +
			` FROM ` + s.cfg.Table + ` WHERE ` + where + ` AND EVENT_ID IN (?` + strings.Repeat(", ?", n-1) + `)`)
		args := append([]any{}, fargs...)
		for _, ev := range batch {
			args = append(args, ev)
		}
		if err := func() error {
			rows, err := s.db.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var consumer, ev, status string
				var reason, class, lastErr sql.NullString
				if err := rows.Scan(&consumer, &ev, &status, &reason, &class, &lastErr); err != nil {
					return err
				}
				id, _ := groupOf(consumer, status, reason, class, lastErr)
				out = append(out, GroupedEvent{ConsumerName: consumer, EventID: ev, Group: id})
			}
			return rows.Err()
		}(); err != nil {
			return out, fmt.Errorf("inbox: failure groups of %d event(s): %w", n, err)
		}
	}
	return out, nil
}
