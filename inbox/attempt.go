package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
)

// AttemptTable keeps the history of an event's failures, which the inbox
// row cannot (it holds ATTEMPTS and the last error only): one row per
// failure verdict recorded, written in the transaction that records it
// (rule 4) — a technical failure, a rejection, a dead letter (poison,
// attempts exhausted, a timeout the handler reported) — as a copy of what
// the row holds then: ATTEMPT (ATTEMPTS), REPLAY_COUNT, STATUS (the
// status the failure led to: TECHNICAL_FAILURE, REJECTED, DEAD_LETTERED),
// ERROR_CLASS, REASON_CODE, ERROR_TEXT (LAST_ERROR, truncated like it)
// and RECORDED_AT (UPDATED_AT), with TABLE_NAME, EVENT_ID and
// CONSUMER_NAME. A success writes nothing (the row says PROCESSED), nor
// does a duplicate, nor a dead letter of a row in a status the machine
// does not know (UNKNOWN_STATUS: the row is left as it is). Migration step
// 10 creates it; it is shared by the inbox tables of a schema, like
// ActionTable; Purge deletes the rows of the events it deletes, a replay
// keeps them.
//
// Its key, ATTEMPT_ID, is numbered by the database (an identity,
// AUTO_INCREMENT, SQLite's rowid), never by the attempt: the attempt
// number is not unique. A marker is taken back when the outcome could not
// be recorded (rule 5), also when its failure was recorded by a commit
// whose answer was lost, and a delivery that lost its row to another
// takes its marker back too, so the same (REPLAY_COUNT, ATTEMPT) can be
// recorded twice; an exhausted attempt has its technical failure and then
// its dead letter. A key made of them would refuse the second record and
// turn a recorded failure into a delivery handed back. Invariant: the
// rows of one event are written only by a transaction that holds its
// inbox row's lock (the verdict's conditional UPDATE or primary-key
// INSERT comes first), one after the other, so ATTEMPT_ID orders them as
// they happened.
const AttemptTable = "INBOXKIT_ATTEMPT"

// attemptColumns are the columns of AttemptTable in d.
func attemptColumns(d Dialect) []string {
	return []string{
		"ATTEMPT_ID " + d.schema.serial,
		d.columnDDL(column{"TABLE_NAME", kVarchar, 30, true}),
		d.columnDDL(column{"EVENT_ID", kVarchar, 120, true}),
		d.columnDDL(column{"CONSUMER_NAME", kVarchar, 80, true}),
		d.columnDDL(column{"ATTEMPT", kCount, 0, true}),
		d.columnDDL(column{"REPLAY_COUNT", kCount, 0, true}),
		d.columnDDL(column{"STATUS", kVarchar, 20, true}),
		d.columnDDL(column{"ERROR_CLASS", kVarchar, 20, false}),
		d.columnDDL(column{"REASON_CODE", kVarchar, 80, false}),
		d.columnDDL(column{"ERROR_TEXT", kVarchar, 1000, false}),
		d.columnDDL(column{"RECORDED_AT", kTime, 0, false}),
		"CONSTRAINT " + AttemptTable + "_PK PRIMARY KEY (ATTEMPT_ID)",
	}
}

// insertAttempt copies the row of @event, @consumer into AttemptTable:
// run right after the verdict's statement, in its transaction.
const insertAttempt = `INSERT INTO ` + AttemptTable + ` (TABLE_NAME, EVENT_ID, CONSUMER_NAME, ATTEMPT, REPLAY_COUNT, STATUS, ERROR_CLASS, REASON_CODE, ERROR_TEXT, RECORDED_AT) ` +
	`SELECT %s, EVENT_ID, CONSUMER_NAME, ATTEMPTS, REPLAY_COUNT, STATUS, ERROR_CLASS, REASON_CODE, LAST_ERROR, UPDATED_AT FROM {t} WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer`

// verdict runs st, a statement that records a verdict on one row, through
// q. A failure verdict (st.fails) that wrote the row also writes the
// attempt's row into AttemptTable through q, which is then a transaction
// (rule 4: the failure and its history commit together). It is the one
// place that does: every failure verdict's statement runs through it.
func (s *Store) verdict(ctx context.Context, q execer, st stmt, a args) (sql.Result, error) {
	res, err := st.exec(ctx, q, a)
	if err != nil || !st.fails {
		return res, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return res, nil // nothing written: the caller finds out why
	}
	return res, s.logAttempt(ctx, q, a)
}

// logAttempt writes the attempt row of the event in a (@event,
// @consumer) through tx, after its failure was recorded there; nothing
// where the table is below migration step 10 (no AttemptTable).
func (s *Store) logAttempt(ctx context.Context, tx execer, a args) error {
	if ok, err := s.attempts.exists(ctx, tx, s.d, s.now()); err != nil || !ok {
		return err
	}
	if _, err := s.q.insertAttempt.exec(ctx, tx, a); err != nil {
		return fmt.Errorf("inbox: record the attempt in %s: %w", AttemptTable, err)
	}
	return nil
}

// attemptLog says whether AttemptTable exists: looked up on the first
// failure a store records (in its transaction), kept once found; a table
// found missing is looked up again a minute later, so that a consumer
// left running across `inboxctl migrate` starts the history.
type attemptLog struct {
	mu      sync.Mutex
	found   bool
	missing time.Time // when it was found missing; zero: not looked up
}

func (l *attemptLog) exists(ctx context.Context, q execer, d Dialect, now time.Time) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.found {
		return true, nil
	}
	if !l.missing.IsZero() && !now.Before(l.missing) && now.Sub(l.missing) < time.Minute {
		return false, nil
	}
	found, err := d.TableExists(ctx, q, AttemptTable)
	if err != nil {
		return false, err
	}
	l.found, l.missing = found, now
	return found, nil
}

// Attempt is one row of AttemptTable: a failure recorded for an event.
type Attempt struct {
	EventID      string `json:"eventId"`
	ConsumerName string `json:"consumerName"`
	// Attempt is the row's ATTEMPTS when the failure was recorded: the
	// attempt that failed (a dead letter found before the handler ran
	// repeats the last one's number).
	Attempt int `json:"attempt"`
	// ReplayCount is the row's REPLAY_COUNT then: the attempts before and
	// after a replay differ in it.
	ReplayCount int `json:"replayCount"`
	// Status is what the failure made of the row: TECHNICAL_FAILURE,
	// REJECTED or DEAD_LETTERED.
	Status inboxkit.Status `json:"status"`
	Class  inboxkit.Class  `json:"class,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Error  string          `json:"error,omitempty"`
	At     time.Time       `json:"at"`
}

// Attempts returns the failures recorded for the event, of every
// consumer (consumerName "") or of one, in the order they happened; empty,
// never nil, when there are none or the table is below migration step 10.
func (s *Store) Attempts(ctx context.Context, eventID, consumerName string) ([]Attempt, error) {
	out := []Attempt{}
	if found, err := s.d.TableExists(ctx, s.db, AttemptTable); err != nil || !found {
		return out, err
	}
	q := `SELECT EVENT_ID, CONSUMER_NAME, ATTEMPT, REPLAY_COUNT, STATUS, ERROR_CLASS, REASON_CODE, ERROR_TEXT, RECORDED_AT FROM ` + AttemptTable +
		` WHERE TABLE_NAME = ? AND EVENT_ID = ?`
	params := []any{s.cfg.Table, eventID}
	if consumerName != "" {
		q += ` AND CONSUMER_NAME = ?`
		params = append(params, consumerName)
	}
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q+` ORDER BY ATTEMPT_ID`), params...)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the attempts from %s: %w", AttemptTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var a Attempt
		var st string
		var class, reason, text sql.NullString
		var at dbTime
		if err := rows.Scan(&a.EventID, &a.ConsumerName, &a.Attempt, &a.ReplayCount, &st, &class, &reason, &text, &at); err != nil {
			return nil, fmt.Errorf("inbox: read the attempts: %w", err)
		}
		a.Status, a.Class, a.Reason, a.Error, a.At = inboxkit.Status(st), inboxkit.Class(class.String), reason.String, text.String, at.Time
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the attempts: %w", err)
	}
	return out, nil
}
