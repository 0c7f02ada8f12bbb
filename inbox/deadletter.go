package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
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
	res, err := s.q.deadFromFailure.exec(ctx, s.db, dead)
	if err != nil {
		return "", fmt.Errorf("inbox: mark dead-lettered: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return inboxkit.StatusDeadLettered, nil
	}
	_, err = s.q.insertDead.exec(ctx, s.db, dead)
	if err == nil {
		return inboxkit.StatusDeadLettered, nil
	}
	if !s.d.IsDuplicate(err) {
		return "", fmt.Errorf("inbox: mark dead-lettered: %w", err)
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

// PublishFunc publishes the dead letter dl, as the store records it; r is
// the event's row as it was before it became DEAD_LETTERED (the zero
// Record when the event has none). See Store.PublishDeadLetter.
type PublishFunc func(ctx context.Context, dl DeadLetter, r Record) error

// PublishDeadLetter dead-letters a message once, however many deliveries
// of its event ask for it at the same time: in one transaction it moves
// the row to DEAD_LETTERED (a TECHNICAL_FAILURE row by a conditional
// UPDATE, a message that has no row yet by the primary-key INSERT), calls
// publish while that uncommitted write holds the row, and commits only
// when publish returned nil (rule 3). A delivery that finds the row
// terminal already, or that loses the race for it, publishes nothing and
// gets the status found with published false: the message is in the
// dead-letter queue once. A row in a status the state machine does not
// know (UNKNOWN_STATUS) is left as it is and the message published. A
// Reason left empty keeps the row's.
//
// When publish fails nothing is recorded and its error is returned: hand
// the delivery back. When the commit fails after the publish, the
// envelope is in the dead-letter queue and the row is not marked: the
// error says so, and the redelivery dead-letters the message again (a
// second copy rather than a lost message).
//
// A message without a usable event id (MISSING_EVENT_ID,
// EVENT_ID_TOO_LONG, INVALID_EVENT_ID) has no row: publish is called and
// "" returned. When the database refuses a value of the entry (see
// Process), the row is recorded without the correlation id, payload hash
// and event id source; when it refuses the event id itself, there is no
// row and the reason becomes INVALID_EVENT_ID.
func (s *Store) PublishDeadLetter(ctx context.Context, dl DeadLetter, publish PublishFunc) (st inboxkit.Status, published bool, err error) {
	e, poison, err := normalize(dl.Entry)
	if err != nil {
		return "", false, err
	}
	if poison != "" {
		dl.Entry = e
		err := publish(ctx, dl, Record{})
		return "", err == nil, err
	}
	dl.Entry = e
	bare := false // the row without the entry's optional values
	for round := 0; round < 4; round++ {
		st, published, again, err := s.publishDeadLetter(ctx, dl, bare, publish)
		switch {
		case published || classify.ValueReason(err) == "":
			if !again {
				return st, published, err
			}
		case !bare:
			// The database refuses a value of the entry: record the row
			// without the correlation id, payload hash and id source.
			bare = true
		default:
			// It refuses the key itself (a legacy EVENT_ID column narrower
			// than MaxEventIDLength): no row, as for a missing event id.
			dl.Reason = inboxkit.ReasonInvalidEventID
			err := publish(ctx, dl, Record{})
			return "", err == nil, err
		}
	}
	return "", false, fmt.Errorf("inbox: dead-letter event %q for %q: the row kept changing", e.EventID, e.ConsumerName)
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
	return e.row(args{"reason": nullString(dl.Reason), "class": string(class), "error": msg, "now": s.t(s.now()),
		"attempts": 1}) // a new row: the delivery that found the poison, or the one that failed
}

// publishDeadLetter is one round of PublishDeadLetter; again: the row
// appeared or changed between two statements, look again.
func (s *Store) publishDeadLetter(ctx context.Context, dl DeadLetter, bare bool, publish PublishFunc) (st inboxkit.Status, published, again bool, err error) {
	e := dl.Entry
	tx, err := s.begin(ctx, "dead-letter", nil)
	if err != nil {
		return "", false, false, err
	}
	defer tx.rollback()
	r, err := scanRecord(s.q.selectOne.queryRow(ctx, tx, e.key(nil)))
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", false, false, fmt.Errorf("inbox: dead-letter: %w", err)
	}
	switch {
	case found && r.Status.Terminal():
		return r.Status, false, false, nil // finished by another delivery: nothing to publish
	case found && r.Status != inboxkit.StatusTechnicalFailure:
		// A row the state machine does not know (UNKNOWN_STATUS, adopted
		// tables): left as it is, the message published all the same.
		if err := publish(ctx, dl, r); err != nil {
			return "", false, false, err
		}
		return r.Status, true, false, nil
	}
	if found && dl.Reason == "" {
		dl.Reason = r.ReasonCode
	}
	dead := s.deadArgs(dl, bare)
	if found {
		res, err := s.q.deadFromFailure.exec(ctx, tx, dead)
		if err != nil {
			return "", false, false, fmt.Errorf("inbox: dead-letter: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return "", false, true, nil // finished by another delivery meanwhile
		}
	} else if _, err := s.q.insertDead.exec(ctx, tx, dead); err != nil {
		if s.d.IsDuplicate(err) {
			return "", false, true, nil
		}
		return "", false, false, fmt.Errorf("inbox: dead-letter: %w", err)
	}
	if err := publish(ctx, dl, r); err != nil {
		return "", false, false, err
	}
	if err := tx.commit(); err != nil {
		return "", true, false, fmt.Errorf("inbox: dead-letter: commit after publish (the message is in the dead-letter queue; its redelivery publishes it again): %w", err)
	}
	return inboxkit.StatusDeadLettered, true, false, nil
}

// ResetForReplay prepares a DEAD_LETTERED row for a replay from the
// dead-letter destination: it becomes TECHNICAL_FAILURE with ATTEMPTS 0, and
// REPLAY_COUNT is raised as a trace. The replayed message (same event id) is
// then processed once more; any other copy stays a duplicate once it is
// processed. It reports false when the row is not DEAD_LETTERED (or absent).
func (s *Store) ResetForReplay(ctx context.Context, eventID, consumerName string) (bool, error) {
	res, err := s.q.resetForReplay.exec(ctx, s.db, Entry{EventID: eventID, ConsumerName: consumerName}.key(args{"now": s.t(s.now())}))
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
	r, err := s.Get(ctx, eventID, consumerName)
	if errors.Is(err, ErrNotFound) {
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
	res, err := s.q.reopenRejected.exec(ctx, s.db, Entry{EventID: eventID, ConsumerName: consumerName}.key(args{"now": s.t(s.now()), "error": s.truncate(story)}))
	if err != nil {
		return false, fmt.Errorf("inbox: reopen rejected: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
