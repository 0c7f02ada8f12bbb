package inbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// StatusCount is the number of rows of one consumer in one status.
type StatusCount struct {
	ConsumerName string          `json:"consumer"`
	Status       inboxkit.Status `json:"status"`
	Rows         int64           `json:"rows"`
	// AtThreshold counts the rows whose ATTEMPTS reached Config.Retry.MaxAttempts.
	AtThreshold int64 `json:"atThreshold"`
	// NearThreshold counts the rows one failed attempt below it.
	NearThreshold int64 `json:"nearThreshold"`
	// Oldest is the oldest CREATED_AT of these rows.
	Oldest time.Time `json:"oldest"`
}

// Stats is an overview of the inbox table: what a dashboard and
// `inboxctl stats` show.
type Stats struct {
	// At is when the overview was taken (the store's clock).
	At time.Time `json:"at"`
	// MaxAttempts is the backout threshold the threshold counts refer to.
	MaxAttempts int `json:"maxAttempts"`
	// Counts are the rows per consumer and status, ordered by both.
	Counts []StatusCount `json:"counts"`
}

// OldestNonTerminal returns the oldest CREATED_AT among rows that are not
// terminal (RECEIVED, IN_PROGRESS, TECHNICAL_FAILURE) of the consumer (""
// for all), and false when there is none.
func (st Stats) OldestNonTerminal(consumer string) (time.Time, bool) {
	var oldest time.Time
	for _, c := range st.Counts {
		if c.Status.Terminal() || (consumer != "" && c.ConsumerName != consumer) {
			continue
		}
		if oldest.IsZero() || c.Oldest.Before(oldest) {
			oldest = c.Oldest
		}
	}
	return oldest, !oldest.IsZero()
}

// Stats counts the rows per consumer and status, with the oldest row of
// each and the rows at or near the backout threshold. It is one GROUP BY
// over the table: cheap enough to run every few seconds, but a full scan
// on a large table, so do not run it per message.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	attempts := "ATTEMPTS"
	if s.missing["ATTEMPTS"] {
		attempts = "0" // a table before migration (ForReading)
	}
	// Statuses byte for byte: a legacy 'processed' is not PROCESSED.
	q := s.d.Rebind(strings.NewReplacer("{t}", s.cfg.Table, "{attempts}", attempts, "{status}", s.d.exactStatus()).Replace(`SELECT CONSUMER_NAME, {status}, COUNT(*), MIN(CREATED_AT),
	SUM(CASE WHEN {attempts} >= ? THEN 1 ELSE 0 END), SUM(CASE WHEN {attempts} = ? THEN 1 ELSE 0 END)
	FROM {t} GROUP BY CONSUMER_NAME, {status}`))
	out := Stats{At: s.now(), MaxAttempts: s.cfg.Retry.MaxAttempts, Counts: []StatusCount{}}
	rows, err := s.db.QueryContext(ctx, q, s.cfg.Retry.MaxAttempts, s.cfg.Retry.MaxAttempts-1)
	if err != nil {
		return out, fmt.Errorf("inbox: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c StatusCount
		var st string
		var oldest dbTime
		if err := rows.Scan(&c.ConsumerName, &st, &c.Rows, &oldest, &c.AtThreshold, &c.NearThreshold); err != nil {
			return out, fmt.Errorf("inbox: stats: %w", err)
		}
		c.Status, c.Oldest = inboxkit.Status(st), oldest.Time
		out.Counts = append(out.Counts, c)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("inbox: stats: %w", err)
	}
	sort.Slice(out.Counts, func(i, j int) bool {
		a, b := out.Counts[i], out.Counts[j]
		if a.ConsumerName != b.ConsumerName {
			return a.ConsumerName < b.ConsumerName
		}
		return a.Status < b.Status
	})
	return out, nil
}

// ErrSchema is returned by CheckReady when the inbox table is missing or
// lacks columns this version needs.
var ErrSchema = errors.New("inbox: schema not ready")

// CheckReady tells whether the store can work: the database answers and the
// inbox table has every column this version reads and writes. It returns an
// error wrapping ErrSchema (run Migrate) when the database answers but the
// table is missing or behind, and the database's error when it does not
// answer. It reads no rows.
func (s *Store) CheckReady(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("inbox: database unreachable: %w", err)
	}
	q := `SELECT ` + recordColumns + `, PAYLOAD, HEADERS FROM ` + s.cfg.Table + ` WHERE 1 = 0`
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		if perr := s.db.PingContext(ctx); perr != nil {
			return fmt.Errorf("inbox: database unreachable: %w", perr)
		}
		return fmt.Errorf("%w: table %s: %v (run inboxctl migrate)", ErrSchema, s.cfg.Table, err)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}
