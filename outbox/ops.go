package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
)

// Row is one outbox row, as List returns it.
type Row struct {
	ID            string            `json:"messageId"`
	Key           string            `json:"key,omitempty"`
	Seq           int64             `json:"seq"`
	Destination   string            `json:"destination"`
	Headers       map[string]string `json:"headers,omitempty"`
	Body          []byte            `json:"-"`
	BodySize      int               `json:"bodySize"`
	CauseEventID  string            `json:"causeEventId,omitempty"`
	CorrelationID string            `json:"correlationId,omitempty"`
	Status        Status            `json:"status"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"lastError,omitempty"`
	CreatedAt     time.Time         `json:"createdAt"`
	UpdatedAt     *time.Time        `json:"updatedAt,omitempty"`
	SentAt        *time.Time        `json:"sentAt,omitempty"`
}

// ListOptions select the rows List returns. Conditions combine with AND.
type ListOptions struct {
	// Statuses are the statuses listed. Defaults to PENDING and PARKED.
	Statuses []Status
	// Key, MessageID: only this key's, or this message's, rows.
	Key, MessageID string
	// CauseEventIDs: only rows written while these events were handled.
	// On PostgreSQL no index serves it (outbox schema step 3): it reads
	// the rows the other conditions leave, the whole table without them.
	CauseEventIDs []string
	// OlderThan: only rows written before this time.
	OlderThan time.Time
	// Limit bounds the rows returned, oldest first. Defaults to 100.
	Limit int
}

const listCols = `MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, HEADERS, BODY, CAUSE_EVENT_ID, CORRELATION_ID, STATUS, ATTEMPTS, LAST_ERROR, CREATED_AT, UPDATED_AT, SENT_AT`

// List returns the rows opt selects, oldest first.
func (s *Store) List(ctx context.Context, opt ListOptions) ([]Row, error) {
	if len(opt.Statuses) == 0 && opt.MessageID == "" && len(opt.CauseEventIDs) == 0 {
		opt.Statuses = []Status{StatusPending, StatusParked}
	}
	if opt.Limit <= 0 {
		opt.Limit = 100
	}
	var where []string
	var args []any
	if len(opt.Statuses) > 0 {
		where = append(where, "STATUS IN ("+placeholders(len(opt.Statuses))+")")
		for _, st := range opt.Statuses {
			args = append(args, string(st))
		}
	}
	if opt.Key != "" {
		where = append(where, "MSG_KEY = ? AND SEQ > 0") // a keyed row: the key numbers' index
		args = append(args, opt.Key)
	}
	if opt.MessageID != "" {
		where = append(where, "MESSAGE_ID = ?")
		args = append(args, opt.MessageID)
	}
	if len(opt.CauseEventIDs) > 0 {
		where = append(where, "CAUSE_EVENT_ID IN ("+placeholders(len(opt.CauseEventIDs))+")")
		args = append(args, anys(opt.CauseEventIDs)...)
	}
	if !opt.OlderThan.IsZero() {
		where = append(where, "CREATED_AT < ?")
		args = append(args, s.t(opt.OlderThan))
	}
	q := `SELECT ` + listCols + ` FROM ` + s.cfg.Table
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(` ORDER BY CREATED_AT, MSG_KEY, SEQ LIMIT %d`, opt.Limit)
	return s.query(ctx, s.db, s.d.Rebind(q), args...)
}

func (s *Store) query(ctx context.Context, q querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		var r Row
		var headers, cause, corr, lastErr sql.NullString
		var created, updated, sent inbox.NullTime
		var status string
		if err := rows.Scan(&r.ID, &r.Key, &r.Seq, &r.Destination, &headers, &r.Body, &cause, &corr, &status, &r.Attempts, &lastErr, &created, &updated, &sent); err != nil {
			return nil, fmt.Errorf("outbox: list: %w", err)
		}
		if r.Key == r.ID {
			r.Key = ""
		}
		r.Headers, _ = decodeHeaders(headers)
		r.BodySize = len(r.Body)
		r.CauseEventID, r.CorrelationID, r.LastError, r.Status = cause.String, corr.String, lastErr.String, Status(status)
		r.CreatedAt, r.UpdatedAt, r.SentAt = created.Time, updated.Ptr(), sent.Ptr()
		out = append(out, r)
	}
	return out, rows.Err()
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// Selector names the parked messages Retry and Drop act on: one message,
// or every parked message of a key, or (All) every parked message.
type Selector struct {
	MessageID string
	Key       string
	All       bool
}

func (sel Selector) validate() error {
	n := 0
	for _, set := range []bool{sel.MessageID != "", sel.Key != "", sel.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("outbox: name exactly one of a message id, a key, or all parked messages")
	}
	return nil
}

// ErrNotParked is returned by Retry and Drop when the selector matches no
// parked message.
var ErrNotParked = errors.New("outbox: no parked message matches")

// Retry makes the selected parked messages PENDING again with their
// attempts reset, and returns how many. A parked message at the head of its
// key (PoisonParkKey) is sent next, before the key's later messages; one
// the key went on without (SkipMessage) is sent after the messages the key
// has now.
func (s *Store) Retry(ctx context.Context, sel Selector) (int, error) {
	return s.operate(ctx, sel, true)
}

// Drop marks the selected parked messages DROPPED (never sent; purged like
// SENT rows) and lets their keys go on; it returns how many.
func (s *Store) Drop(ctx context.Context, sel Selector) (int, error) {
	return s.operate(ctx, sel, false)
}

func (s *Store) operate(ctx context.Context, sel Selector, retry bool) (int, error) {
	if err := sel.validate(); err != nil {
		return 0, err
	}
	what := "drop"
	if retry {
		what = "retry"
	}
	// The parked messages, by key: each key is repaired in a transaction
	// of its own, holding its key row.
	q := `SELECT MSG_KEY, MESSAGE_ID, SEQ FROM ` + s.cfg.Table + ` WHERE STATUS = 'PARKED'`
	var args []any
	switch {
	case sel.MessageID != "":
		q += ` AND MESSAGE_ID = ?`
		args = append(args, sel.MessageID)
	case sel.Key != "":
		q += ` AND MSG_KEY = ?`
		args = append(args, sel.Key)
	}
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q+` ORDER BY MSG_KEY, SEQ`), args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", what, err)
	}
	var keys []string
	byKey := map[string][]parked{}
	for rows.Next() {
		var k string
		var p parked
		if err := rows.Scan(&k, &p.id, &p.seq); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox: %s: %w", what, err)
		}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", what, err)
	}
	if len(keys) == 0 {
		return 0, ErrNotParked
	}
	n := 0
	for _, k := range keys {
		done, err := s.repairKey(ctx, k, byKey[k], retry)
		n += done
		if err != nil {
			return n, fmt.Errorf("outbox: %s messages of key %s: %w", what, k, err)
		}
	}
	return n, nil
}

// parked is a parked message's id and sequence number.
type parked struct {
	id  string
	seq int64
}

// repairKey retries or drops the parked messages ps of key k in one
// transaction that holds the key row, and wakes the key.
func (s *Store) repairKey(ctx context.Context, k string, ps []parked, retry bool) (int, error) {
	tx, err := s.db.BeginTx(ctx, s.d.LockingTx())
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if len(ps) == 1 && ps[0].seq == 0 {
		return s.repairOwn(ctx, tx, ps[0].id, retry)
	}
	kt := keyTable(s.cfg.Table)
	lock := `SELECT LAST_SEQ, DONE_SEQ FROM ` + kt + ` WHERE MSG_KEY = ?`
	if s.d.Name() != "sqlite" {
		lock += ` FOR UPDATE`
	} else if _, err := tx.ExecContext(ctx, `UPDATE `+kt+` SET LAST_SEQ = LAST_SEQ WHERE MSG_KEY = ?`, k); err != nil {
		return 0, err // SQLite: take the write lock first
	}
	var last, done int64
	if err := tx.QueryRowContext(ctx, s.d.Rebind(lock), k).Scan(&last, &done); err != nil {
		return 0, err
	}
	now := s.t(s.now())
	n := 0
	for _, p := range ps {
		var res sql.Result
		switch {
		case !retry:
			res, err = tx.ExecContext(ctx, s.d.Rebind(`UPDATE `+s.cfg.Table+` SET STATUS = 'DROPPED', UPDATED_AT = ? WHERE MESSAGE_ID = ? AND STATUS = 'PARKED'`), now, p.id)
		case p.seq > done:
			// Still ahead of the key's progress (it waits behind it): sent in its place.
			res, err = tx.ExecContext(ctx, s.d.Rebind(`UPDATE `+s.cfg.Table+` SET STATUS = 'PENDING', ATTEMPTS = 0, UPDATED_AT = ? WHERE MESSAGE_ID = ? AND STATUS = 'PARKED'`), now, p.id)
		default:
			// The key went on without it: it takes the key's next number.
			last++
			res, err = tx.ExecContext(ctx, s.d.Rebind(`UPDATE `+s.cfg.Table+` SET STATUS = 'PENDING', ATTEMPTS = 0, SEQ = ?, UPDATED_AT = ? WHERE MESSAGE_ID = ? AND STATUS = 'PARKED'`), last, now, p.id)
		}
		if err != nil {
			return 0, err
		}
		if c, _ := res.RowsAffected(); c == 1 {
			n++
		}
	}
	// Wake the key unless a relay holds it (its release sees LAST_SEQ).
	if _, err := tx.ExecContext(ctx, s.d.Rebind(`UPDATE `+kt+` SET LAST_SEQ = ?, NEXT_AT = CASE WHEN NEXT_AT IS NULL THEN `+cast(s.d, "?", "TIMESTAMP")+` ELSE NEXT_AT END WHERE MSG_KEY = ?`), last, now, k); err != nil {
		return 0, err
	}
	if s.q.notify != "" {
		if _, err := tx.ExecContext(ctx, s.q.notify); err != nil {
			return 0, err
		}
	}
	return n, tx.Commit()
}

// repairOwn retries or drops the parked message without a key id (SEQ 0,
// claimed by its own row, see queries): a retry makes its row due now.
func (s *Store) repairOwn(ctx context.Context, tx *sql.Tx, id string, retry bool) (int, error) {
	now := s.t(s.now())
	q := `UPDATE ` + s.cfg.Table + ` SET STATUS = 'DROPPED', UPDATED_AT = ?, NEXT_AT = NULL WHERE MESSAGE_ID = ? AND STATUS = 'PARKED'`
	args := []any{now, id}
	if retry {
		q = `UPDATE ` + s.cfg.Table + ` SET STATUS = 'PENDING', ATTEMPTS = 0, UPDATED_AT = ?, NEXT_AT = ` + cast(s.d, "?", "TIMESTAMP") + ` WHERE MESSAGE_ID = ? AND STATUS = 'PARKED'`
		args = []any{now, now, id}
	}
	res, err := tx.ExecContext(ctx, s.d.Rebind(q), args...)
	if err != nil {
		return 0, err
	}
	if retry && s.q.notify != "" {
		if _, err := tx.ExecContext(ctx, s.q.notify); err != nil {
			return 0, err
		}
	}
	n, _ := res.RowsAffected()
	return int(n), tx.Commit()
}

// Counts are the outbox rows of one destination and status.
type Counts struct {
	Destination string `json:"destination"`
	Status      Status `json:"status"`
	Rows        int64  `json:"rows"`
	// Oldest is the CREATED_AT of the oldest of these rows.
	Oldest *time.Time `json:"oldest,omitempty"`
}

// Stats counts the rows per destination and status: only PENDING and
// PARKED rows (an index range: cheap enough to refresh metrics with)
// unless all is set.
func (s *Store) Stats(ctx context.Context, all bool) ([]Counts, error) {
	q := `SELECT DESTINATION, STATUS, COUNT(*), MIN(CREATED_AT) FROM ` + s.cfg.Table
	if !all {
		q += ` WHERE STATUS IN ('PENDING', 'PARKED')`
	}
	rows, err := s.db.QueryContext(ctx, q+` GROUP BY DESTINATION, STATUS ORDER BY DESTINATION, STATUS`)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	defer rows.Close()
	out := []Counts{}
	for rows.Next() {
		var c Counts
		var st string
		var oldest inbox.NullTime
		if err := rows.Scan(&c.Destination, &st, &c.Rows, &oldest); err != nil {
			return nil, fmt.Errorf("outbox: stats: %w", err)
		}
		c.Status, c.Oldest = Status(st), oldest.Ptr()
		out = append(out, c)
	}
	return out, rows.Err()
}

// PurgeOptions bound one Purge run.
type PurgeOptions struct {
	// OlderThan: SENT and DROPPED rows written longer ago are deleted.
	// Required. A receiver deduplicates by message id in its own inbox;
	// the outbox keeps sent rows for audit only.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction. Defaults
	// to 1000.
	BatchSize int
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
}

// Purge deletes SENT and DROPPED rows older than opt.OlderThan in batches,
// each in its own transaction, then the key rows left with nothing to
// send and no rows; it returns the message rows deleted (counted, with
// DryRun). PENDING and PARKED rows are never deleted.
func (s *Store) Purge(ctx context.Context, opt PurgeOptions) (int64, error) {
	if opt.OlderThan <= 0 {
		return 0, fmt.Errorf("outbox: Purge: OlderThan must be positive (got %s)", opt.OlderThan)
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 1000
	}
	cutoff := s.t(s.now().Add(-opt.OlderThan))
	t, k := s.cfg.Table, keyTable(s.cfg.Table)
	// Only rows the key's progress has passed: the rows after DONE_SEQ are
	// read by their numbers, which must stay without gaps.
	// A message without a key row (SEQ 0) is passed once it is settled.
	done := `STATUS IN ('SENT', 'DROPPED') AND CREATED_AT < ? AND (SEQ = 0 OR SEQ <= (SELECT k.DONE_SEQ FROM ` + k + ` k WHERE k.MSG_KEY = ` + t + `.MSG_KEY))`
	if opt.DryRun {
		var n int64
		err := s.db.QueryRowContext(ctx, s.d.Rebind(`SELECT COUNT(*) FROM `+t+` WHERE `+done), cutoff).Scan(&n)
		return n, wrapErr("outbox: purge (dry run)", err)
	}
	idleKey := `LAST_SEQ = DONE_SEQ AND NEXT_AT IS NULL AND NOT EXISTS (SELECT 1 FROM ` + t + ` o WHERE o.MSG_KEY = ` + k + `.MSG_KEY AND o.SEQ > 0)`
	var rowsQ, keysQ string
	switch s.d.Name() {
	case "postgres":
		rowsQ = `DELETE FROM ` + t + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + t + ` WHERE ` + done + ` LIMIT ?))`
		keysQ = `DELETE FROM ` + k + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + k + ` WHERE ` + idleKey + ` LIMIT ?))`
	case "mysql":
		rowsQ = `DELETE FROM ` + t + ` WHERE ` + done + ` LIMIT ?`
		keysQ = `DELETE FROM ` + k + ` WHERE ` + idleKey + ` LIMIT ?`
	default:
		rowsQ = `DELETE FROM ` + t + ` WHERE rowid IN (SELECT rowid FROM ` + t + ` WHERE ` + done + ` LIMIT ?)`
		keysQ = `DELETE FROM ` + k + ` WHERE rowid IN (SELECT rowid FROM ` + k + ` WHERE ` + idleKey + ` LIMIT ?)`
	}
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.d.Rebind(rowsQ), cutoff, opt.BatchSize)
		if err != nil {
			return total, fmt.Errorf("outbox: purge: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(opt.BatchSize) {
			break
		}
	}
	for {
		res, err := s.db.ExecContext(ctx, s.d.Rebind(keysQ), opt.BatchSize)
		if err != nil {
			return total, fmt.Errorf("outbox: purge idle keys: %w", err)
		}
		if n, _ := res.RowsAffected(); n < int64(opt.BatchSize) {
			return total, nil
		}
	}
}
