package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit"
)

// DeadLetter describes a message that was published to the dead-letter
// destination.
type DeadLetter struct {
	Entry
	// Class and Reason as in the Result that asked for the dead letter.
	Class  inboxkit.Class
	Reason string
	// Err is the last error, if any; its text goes to LAST_ERROR.
	Err error
}

// MarkDeadLettered records that the message was published to the
// dead-letter destination: a TECHNICAL_FAILURE row becomes DEAD_LETTERED,
// and a message that has no row yet (poison on its first delivery) gets one.
// Call it only after the publish was confirmed (rule 3), then acknowledge.
//
// A message without a usable event id (MISSING_EVENT_ID, EVENT_ID_TOO_LONG,
// INVALID_EVENT_ID) has no row to mark; MarkDeadLettered returns "" and does nothing. When the
// row is already terminal (a concurrent delivery finished the event), it
// returns that status and changes nothing.
func (s *Store) MarkDeadLettered(ctx context.Context, dl DeadLetter) (inboxkit.Status, error) {
	e, poison, err := normalize(dl.Entry)
	if err != nil || poison != "" {
		return "", err
	}
	dl.Entry = e
	dead := s.deadArgs(dl, false)
	var dup error // the INSERT's, when the row exists
	err = s.inTx(ctx, "mark dead-lettered", func(tx *txn) error {
		res, err := s.verdict(ctx, tx, s.q.deadFromFailure, dead)
		if err != nil {
			return fmt.Errorf("inbox: mark dead-lettered: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		if _, err := s.verdict(ctx, tx, s.q.insertDead, dead); err != nil {
			if s.d.IsDuplicate(err) {
				dup = err
			}
			return fmt.Errorf("inbox: mark dead-lettered: %w", err)
		}
		return nil
	})
	if err == nil {
		return inboxkit.StatusDeadLettered, nil
	}
	if dup == nil {
		return "", err
	}
	st, _, ok, err := s.status(ctx, s.db, e)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("inbox: mark dead-lettered: event %q for %q: row vanished", e.EventID, e.ConsumerName)
	}
	if st == inboxkit.StatusTechnicalFailure {
		// It became TECHNICAL_FAILURE between our two statements; try once more.
		return s.MarkDeadLettered(ctx, dl)
	}
	return st, nil
}

// deadArgs are the arguments of a DEAD_LETTERED row's statements for dl
// (class TECHNICAL when empty); bare leaves out the entry's optional
// values.
func (s *Store) deadArgs(dl DeadLetter, bare bool) args {
	class := dl.Class
	if class == "" {
		class = inboxkit.ClassTechnical
	}
	var msg any
	if dl.Err != nil {
		msg = s.truncate(dl.Err.Error())
	}
	e := dl.Entry
	if bare {
		e.CorrelationID, e.PayloadHash, e.EventIDSource = "", "", ""
	}
	return e.row(arg{"reason", nullString(dl.Reason)}, arg{"class", string(class)}, arg{"error", msg}, arg{"now", s.t(s.now())},
		arg{"attempts", 1}) // a new row: the delivery that found the poison, or the one that failed
}

// ResetForReplay prepares a DEAD_LETTERED row for a replay from the
// dead-letter destination: it becomes TECHNICAL_FAILURE with ATTEMPTS 0, and
// REPLAY_COUNT is raised as a trace. The replayed message (same event id) is
// then processed once more; any other copy stays a duplicate once it is
// processed. It reports false when the row is not DEAD_LETTERED (or absent).
func (s *Store) ResetForReplay(ctx context.Context, eventID, consumerName string) (bool, error) {
	res, err := s.q.resetForReplay.exec(ctx, s.db, Entry{EventID: eventID, ConsumerName: consumerName}.key(arg{"now", s.t(s.now())}))
	if err != nil {
		return false, fmt.Errorf("inbox: reset for replay: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ReopenRejected prepares a REJECTED row for a replay from the reject
// queue after the business case was clarified (the customer now exists):
// it becomes TECHNICAL_FAILURE with ATTEMPTS 0, REPLAY_COUNT is raised, and
// LAST_ERROR keeps the rejection ("rejected REASON: error"), so the audit
// shows the rejection, the replay and, later, the processing. The replayed
// message is then processed once. It reports false when the row is not
// REJECTED (or absent).
func (s *Store) ReopenRejected(ctx context.Context, eventID, consumerName string) (bool, error) {
	return s.reopenRejectedOn(ctx, s.db, eventID, consumerName)
}

// reopenRejectedOn is ReopenRejected on q (the pool or a transaction).
func (s *Store) reopenRejectedOn(ctx context.Context, q execer, eventID, consumerName string) (bool, error) {
	r, err := scanRecord(s.q.selectOne.queryRow(ctx, q, Entry{EventID: eventID, ConsumerName: consumerName}.key()))
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inbox: reopen rejected: %w", err)
	}
	if r.Status != inboxkit.StatusRejected {
		return false, nil
	}
	story := "rejected " + r.ReasonCode
	switch {
	case strings.HasPrefix(r.LastError, "rejected "): // classify.Reject's text names it already
		story = r.LastError
	case r.LastError != "":
		story += ": " + r.LastError
	}
	res, err := s.q.reopenRejected.exec(ctx, q, Entry{EventID: eventID, ConsumerName: consumerName}.key(arg{"now", s.t(s.now())}, arg{"error", s.truncate(story)}))
	if err != nil {
		return false, fmt.Errorf("inbox: reopen rejected: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
