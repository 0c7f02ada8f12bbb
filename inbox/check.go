package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// StuckFailures returns at most limit rows (oldest first) that are still
// TECHNICAL_FAILURE although their ATTEMPTS reached the backout threshold
// (Config.Retry.MaxAttempts). Such a row should have been dead-lettered: the
// consumer that owns it is down, or its dead-letter publish keeps failing.
// A limit of 0 or less means 100.
func (s *Store) StuckFailures(ctx context.Context, limit int) ([]Record, error) {
	if limit <= 0 {
		limit = 100
	}
	out, err := s.query(ctx, s.q.stuckFailures, s.cfg.Retry.MaxAttempts, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: stuck failures: %w", err)
	}
	return out, nil
}

// HashReuse is one payload hash stored under more than one event id of the
// same consumer: the producer most likely resent an event with a new event
// id, so the inbox could not recognize the duplicate.
type HashReuse struct {
	PayloadHash  string
	ConsumerName string
	// EventIDs are the event ids carrying the hash, in order.
	EventIDs []string
	// Sources are the EVENT_ID_SOURCE of each event id ("" for the event
	// id header): a derived id that did not catch a resend shows here.
	Sources []string
}

// PayloadHashReuse returns every payload hash that more than one event id
// of the same consumer carries, ordered by hash and consumer.
func (s *Store) PayloadHashReuse(ctx context.Context) ([]HashReuse, error) {
	rows, err := s.db.QueryContext(ctx, s.q.hashCollisions)
	if err != nil {
		return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
	}
	var out []HashReuse
	for rows.Next() {
		var h HashReuse
		var n int
		if err := rows.Scan(&h.PayloadHash, &h.ConsumerName, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
		}
		out = append(out, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
	}
	q := s.d.Rebind(strings.ReplaceAll(`SELECT EVENT_ID, EVENT_ID_SOURCE FROM {t} WHERE PAYLOAD_HASH = ? AND CONSUMER_NAME = ? ORDER BY EVENT_ID`, "{t}", s.cfg.Table))
	for i := range out {
		rows, err := s.db.QueryContext(ctx, q, out[i].PayloadHash, out[i].ConsumerName)
		if err != nil {
			return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
		}
		for rows.Next() {
			var id string
			var src sql.NullString
			if err := rows.Scan(&id, &src); err != nil {
				rows.Close()
				return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
			}
			out[i].EventIDs = append(out[i].EventIDs, id)
			out[i].Sources = append(out[i].Sources, src.String)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
		}
	}
	return out, nil
}

// MessageIDEventIDs returns at most limit rows (oldest first) whose event
// id was derived from the broker's message id (EVENT_ID_SOURCE message-id
// or header:JMSMessageID): such an id does not survive a producer resend or
// a DLQ replay, so those rows do not protect against them. A limit of 0 or
// less means 100.
func (s *Store) MessageIDEventIDs(ctx context.Context, limit int) ([]Record, error) {
	if limit <= 0 {
		limit = 100
	}
	_, lim := s.d.limit("?")
	q := s.d.Rebind(strings.ReplaceAll(`SELECT `+recordColumns+` FROM {t} WHERE EVENT_ID_SOURCE LIKE 'message-id%' OR EVENT_ID_SOURCE LIKE 'header:JMSMessageID%' ORDER BY CREATED_AT, EVENT_ID`+lim, "{t}", s.cfg.Table))
	out, err := s.query(ctx, q, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: message-id event ids: %w", err)
	}
	return out, nil
}
