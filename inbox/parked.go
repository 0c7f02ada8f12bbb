package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// A parked key (consumer.OnPoisonParkKey) is not stored anywhere: it is
// derived from the inbox rows, so that it holds across processes and
// restarts. Key K of consumer C is parked while a row of C with ORDER_KEY K
// is DEAD_LETTERED and not archived (ARCHIVED_AT NULL). KeyParked answers
// for one delivery; ParkedKeys lists them.

// ParkCheck is one keyed delivery a consumer in park-key mode asks about
// before it runs it.
type ParkCheck struct {
	// ConsumerName, OrderKey and EventID are the delivery's.
	ConsumerName, OrderKey, EventID string
	// Replayed: the message was sent by a replay of the dead-letter queue
	// (it carries dlq.HeaderReplayedAt).
	Replayed bool
}

// KeyParked reports whether the delivery c describes must go to the
// dead-letter queue behind its key's head instead of running. A row of the
// event itself never counts. A delivery is held back by:
//
//   - a DEAD_LETTERED row of the key, not archived, dead-lettered for its
//     own failure (any reason but KEY_PARKED): the head;
//   - unless the delivery is a replay, also a DEAD_LETTERED row of
//     reason KEY_PARKED (a later message parked behind the head, not yet
//     replayed), and a TECHNICAL_FAILURE row with REPLAY_COUNT above 0 (a
//     replayed message of the key not yet processed), so that a new
//     message does not overtake the key's replayed ones.
//
// A replayed message is held back by a head only: a replay of the key
// sends the head first, then the parked ones in their order, and none of
// them waits for the parked ones behind it. It is one query on
// (CONSUMER_NAME, ORDER_KEY) that reads at most one row; it is correct
// without an index on ORDER_KEY (then it reads the consumer's rows of
// those statuses).
func (s *Store) KeyParked(ctx context.Context, c ParkCheck) (bool, error) {
	if c.OrderKey == "" {
		return false, nil
	}
	if s.missing["ORDER_KEY"] {
		return false, fmt.Errorf("inbox: key parked: the table has no ORDER_KEY column: run 'inboxctl migrate'")
	}
	cond := `({status} = 'DEAD_LETTERED' AND (REASON_CODE IS NULL OR REASON_CODE <> '` + inboxkit.ReasonKeyParked + `'))`
	if !c.Replayed {
		cond = `({status} = 'DEAD_LETTERED' OR ({status} = 'TECHNICAL_FAILURE' AND {replays} > 0))`
	}
	q := strings.NewReplacer("{status}", s.d.exactStatus(), "{replays}", s.expr("REPLAY_COUNT")).Replace(
		`SELECT EVENT_ID FROM ` + s.cfg.Table + ` WHERE CONSUMER_NAME = ? AND ORDER_KEY = ? AND EVENT_ID <> ? AND ` +
			s.expr("ARCHIVED_AT") + ` IS NULL AND ` + cond)
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q), c.ConsumerName, c.OrderKey, c.EventID)
	if err != nil {
		return false, fmt.Errorf("inbox: key parked: %w", err)
	}
	defer rows.Close()
	found := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("inbox: key parked: %w", err)
	}
	return found, nil
}

// ParkedKey is a key with dead letters: parked for a consumer that runs
// with consumer.OnPoisonParkKey (see KeyParked).
type ParkedKey struct {
	ConsumerName string `json:"consumer"`
	OrderKey     string `json:"orderKey"`
	// DeadLetters counts the key's DEAD_LETTERED rows not archived;
	// Parked those of reason KEY_PARKED (its later messages, waiting in
	// the dead-letter queue behind the head).
	DeadLetters int64 `json:"deadLetters"`
	Parked      int64 `json:"parked"`
	// Head is the event id of a dead letter of the key that failed on its
	// own (the least such id when there are several), "" when only parked
	// messages are left (the head was replayed or archived).
	Head string `json:"head,omitempty"`
	// Since is the oldest UPDATED_AT of those rows: when the key was
	// parked.
	Since time.Time `json:"since"`
}

// ParkedKeys lists the keys that have DEAD_LETTERED rows not archived, by
// consumer ("" for all) and key, at most limit of them (0: no limit). It
// reads the DEAD_LETTERED rows that have an order key (through the
// (STATUS, PROCESSED_AT) index where the database uses it). A table
// without ORDER_KEY (before migration step 7) has none.
func (s *Store) ParkedKeys(ctx context.Context, consumer string, limit int) ([]ParkedKey, error) {
	if s.missing["ORDER_KEY"] {
		return nil, nil
	}
	q := strings.NewReplacer("{status}", s.d.exactStatus(), "{parked}", inboxkit.ReasonKeyParked).Replace(
		`SELECT CONSUMER_NAME, ORDER_KEY, COUNT(*), SUM(CASE WHEN REASON_CODE = '{parked}' THEN 1 ELSE 0 END),
	MIN(CASE WHEN REASON_CODE IS NULL OR REASON_CODE <> '{parked}' THEN EVENT_ID END), MIN(` + s.lastChanged() + `)
	FROM ` + s.cfg.Table + ` WHERE {status} = 'DEAD_LETTERED' AND ORDER_KEY IS NOT NULL AND ` + s.expr("ARCHIVED_AT") + ` IS NULL`)
	var a []any
	if consumer != "" {
		q += ` AND CONSUMER_NAME = ?`
		a = append(a, consumer)
	}
	q += ` GROUP BY CONSUMER_NAME, ORDER_KEY ORDER BY CONSUMER_NAME, ORDER_KEY`
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q), a...)
	if err != nil {
		return nil, fmt.Errorf("inbox: parked keys: %w", err)
	}
	defer rows.Close()
	out := []ParkedKey{}
	for rows.Next() && (limit <= 0 || len(out) < limit) {
		var k ParkedKey
		var head sql.NullString
		var since dbTime
		if err := rows.Scan(&k.ConsumerName, &k.OrderKey, &k.DeadLetters, &k.Parked, &head, &since); err != nil {
			return nil, fmt.Errorf("inbox: parked keys: %w", err)
		}
		k.Head, k.Since = head.String, since.Time
		out = append(out, k)
	}
	if err := rows.Err(); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("inbox: parked keys: %w", err)
	}
	return out, nil
}

// KeyEvents returns the event ids of key's DEAD_LETTERED rows not archived
// of consumer ("" for every consumer), with their consumer: what a replay
// of the key (inboxctl dlq replay --key) selects.
func (s *Store) KeyEvents(ctx context.Context, consumer, key string) ([]EventKey, error) {
	if s.missing["ORDER_KEY"] {
		return nil, fmt.Errorf("inbox: events of key %q: the table has no ORDER_KEY column: run 'inboxctl migrate'", key)
	}
	q := `SELECT EVENT_ID, CONSUMER_NAME FROM ` + s.cfg.Table + ` WHERE ORDER_KEY = ? AND ` + s.d.exactStatus() +
		` = 'DEAD_LETTERED' AND ` + s.expr("ARCHIVED_AT") + ` IS NULL`
	a := []any{key}
	if consumer != "" {
		q += ` AND CONSUMER_NAME = ?`
		a = append(a, consumer)
	}
	return s.eventKeys(ctx, fmt.Sprintf("events of key %q", key), q, a...)
}

// ArchiveEvents archives the DEAD_LETTERED rows of the events keys names
// (ARCHIVED_AT set, as ArchiveGroup sets it for a group's rows): the dead
// letters an operator gave up (inboxctl dlq drop --archive). An archived
// row no longer parks its key (KeyParked), and bulk replays leave it out.
// A row in another status, or archived already, is left as it is. It
// returns the keys of the rows it archived.
func (s *Store) ArchiveEvents(ctx context.Context, keys []EventKey) ([]EventKey, error) {
	var out []EventKey
	q := s.d.Rebind(`UPDATE ` + s.cfg.Table + ` SET ARCHIVED_AT = ? WHERE CONSUMER_NAME = ? AND EVENT_ID = ? AND ARCHIVED_AT IS NULL AND ` +
		s.d.exactStatus() + ` = 'DEAD_LETTERED'`)
	for _, k := range keys {
		res, err := s.db.ExecContext(ctx, q, s.t(s.now()), k.ConsumerName, k.EventID)
		if err != nil {
			return out, fmt.Errorf("inbox: archive event %s of %s: %w", k.EventID, k.ConsumerName, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			out = append(out, k)
		}
	}
	return out, nil
}
