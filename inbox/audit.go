package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

// ErrNotFound is returned by Get when the event has no row.
var ErrNotFound = errors.New("inbox: event not found")

// Record is one row of the inbox table.
type Record struct {
	EventID       string
	ConsumerName  string
	Status        inboxkit.Status
	CorrelationID string
	ReasonCode    string
	// ProcessedAt is the time the row became terminal (PROCESSED, REJECTED,
	// DEAD_LETTERED); nil before.
	ProcessedAt   *time.Time
	CreatedAt     time.Time
	Attempts      int
	ErrorClass    string
	LastError     string
	UpdatedAt     *time.Time
	FirstFailedAt *time.Time
	PayloadHash   string
	// ReplayCount counts replays from the dead-letter destination.
	ReplayCount int
	LeaseOwner  string
	LeaseUntil  *time.Time
	NextAttempt *time.Time
	// EventIDSource names where a derived event id came from ("" for the
	// event id header).
	EventIDSource string
	// OrderKey is the delivery's order key ("" for none: see
	// consumer.Config.OrderKeyFunc).
	OrderKey string
}

type rowScanner interface{ Scan(dest ...any) error }

func scanRecord(sc rowScanner) (Record, error) {
	var r Record
	var status string
	var corr, reason, class, lastErr, hash, owner, source, okey sql.NullString
	var processed, created, updated, firstFailed, leaseUntil, next dbTime
	err := sc.Scan(&r.EventID, &r.ConsumerName, &status, &corr, &reason, &processed, &created, &r.Attempts, &class, &lastErr,
		&updated, &firstFailed, &hash, &r.ReplayCount, &owner, &leaseUntil, &next, &source, &okey)
	if err != nil {
		return Record{}, err
	}
	r.Status = inboxkit.Status(status)
	r.CorrelationID, r.ReasonCode, r.ErrorClass = corr.String, reason.String, class.String
	r.LastError, r.PayloadHash, r.LeaseOwner = lastErr.String, hash.String, owner.String
	r.EventIDSource, r.OrderKey = source.String, okey.String
	r.ProcessedAt, r.CreatedAt, r.UpdatedAt = processed.ptr(), created.Time, updated.ptr()
	r.FirstFailedAt, r.LeaseUntil, r.NextAttempt = firstFailed.ptr(), leaseUntil.ptr(), next.ptr()
	return r, nil
}

// Get returns the row of one event for one consumer, or ErrNotFound.
func (s *Store) Get(ctx context.Context, eventID, consumerName string) (Record, error) {
	r, err := scanRecord(s.q.selectOne.queryRow(ctx, s.db, Entry{EventID: eventID, ConsumerName: consumerName}.key()))
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, fmt.Errorf("%w: event %q for consumer %q", ErrNotFound, eventID, consumerName)
	}
	if err != nil {
		return Record{}, fmt.Errorf("inbox: get: %w", err)
	}
	return r, nil
}

// ByCorrelation returns every row with the correlation id, of all
// consumers, oldest first (by CREATED_AT, then event id).
func (s *Store) ByCorrelation(ctx context.Context, correlationID string) ([]Record, error) {
	return s.query(ctx, s.q.selectByCorr, correlationID)
}

// ByEventID returns the rows of one event id, of all consumers, by
// consumer name.
func (s *Store) ByEventID(ctx context.Context, eventID string) ([]Record, error) {
	return s.query(ctx, s.d.Rebind(`SELECT `+s.recordColumns()+` FROM `+s.cfg.Table+` WHERE EVENT_ID = ? ORDER BY CONSUMER_NAME`), eventID)
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: query: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("inbox: scan: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: query: %w", err)
	}
	return out, nil
}

// CountByStatus returns the number of rows per status.
func (s *Store) CountByStatus(ctx context.Context) (map[inboxkit.Status]int, error) {
	rows, err := s.db.QueryContext(ctx, s.q.countByStatus)
	if err != nil {
		return nil, fmt.Errorf("inbox: count: %w", err)
	}
	defer rows.Close()
	out := map[inboxkit.Status]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("inbox: count: %w", err)
		}
		out[inboxkit.Status(st)] = n
	}
	return out, rows.Err()
}
