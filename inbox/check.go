package inbox

import (
	"context"
	"fmt"
	"strings"
)

// StuckFailures returns at most limit rows (oldest first) that are still
// TECHNICAL_FAILURE although their ATTEMPTS reached the backout threshold
// (Config.MaxAttempts). Such a row should have been dead-lettered: the
// consumer that owns it is down, or its dead-letter publish keeps failing.
// A limit of 0 or less means 100.
func (s *Store) StuckFailures(ctx context.Context, limit int) ([]Record, error) {
	if limit <= 0 {
		limit = 100
	}
	out, err := s.query(ctx, s.q.stuckFailures, s.cfg.MaxAttempts, limit)
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
	q := s.d.Rebind(strings.ReplaceAll(`SELECT EVENT_ID FROM {t} WHERE PAYLOAD_HASH = ? AND CONSUMER_NAME = ? ORDER BY EVENT_ID`, "{t}", s.cfg.Table))
	for i := range out {
		ids, err := s.strings(ctx, q, out[i].PayloadHash, out[i].ConsumerName)
		if err != nil {
			return nil, fmt.Errorf("inbox: payload hash reuse: %w", err)
		}
		out[i].EventIDs = ids
	}
	return out, nil
}

func (s *Store) strings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
