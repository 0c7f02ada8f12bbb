package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
)

// pgMarkUpsert is PostgreSQL's attempt marker in one statement (rule 5): an
// upsert on the primary key, which still decides (rule 1). It inserts the
// row as TECHNICAL_FAILURE with ATTEMPTS 1, or raises the ATTEMPTS of a
// TECHNICAL_FAILURE row below the backout threshold, and returns (STATUS,
// ATTEMPTS, true) for the attempt it counted. A row it must not touch
// (terminal, exhausted, or a store-then-process entry) is left alone and
// returned as the statement's snapshot saw it, with false: a duplicate
// costs one round trip as well. No row at all: another delivery inserted it
// after the snapshot (read it again).
//
// The marker commits with synchronous_commit off for its own implicit
// transaction only (set_config(..., true)), so the commit does not wait for
// its WAL flush. Why that is safe: the marker is visible to every other
// session at once, so no competing delivery misses it; WAL is flushed in
// order, so the business transaction's synchronous commit (or the failure
// record's) makes the marker durable before it returns; a consumer process
// that dies in its handler never loses its marker, the server has it. Only
// a crash of the database server itself, before the WAL writer flushed (a
// fraction of a second), can lose a marker, and then that one attempt is
// not counted: the message comes again and is counted then.
//
// The other dialects keep the three statements of mark (UPDATE, status
// SELECT, INSERT; BenchmarkProcessSteps runs both): MySQL's upsert reports
// "inserted" and "found, unchanged" both as 1 row when the driver sets
// CLIENT_FOUND_ROWS, so its count cannot tell the cases apart; on SQLite an
// upsert takes the write lock for every duplicate, and a new message's cost
// is its commit either way; Oracle has no upsert that returns what it did.
// The figures: docs/decisions.md.
const pgMarkUpsert = `WITH sync AS (SELECT set_config('synchronous_commit', 'off', true)), ` +
	`m AS (INSERT INTO %[1]s AS t (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE) ` +
	`SELECT @event, @consumer, 'TECHNICAL_FAILURE', @corr, @now, @now, 1, @hash, @source FROM sync ` +
	`ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO UPDATE SET ` +
	`LAST_ERROR = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN @marker ELSE t.LAST_ERROR END, ` +
	`FIRST_FAILED_AT = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN COALESCE(t.FIRST_FAILED_AT, t.UPDATED_AT) ELSE t.FIRST_FAILED_AT END, ` +
	`ERROR_CLASS = NULL, UPDATED_AT = @now, ATTEMPTS = t.ATTEMPTS + 1 ` +
	`WHERE t.STATUS = 'TECHNICAL_FAILURE' AND t.ATTEMPTS < @max ` +
	`RETURNING t.STATUS, t.ATTEMPTS) ` +
	`SELECT STATUS, ATTEMPTS, true FROM m UNION ALL ` +
	`SELECT STATUS, ATTEMPTS, false FROM %[1]s WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer AND NOT EXISTS (SELECT 1 FROM m)`

// markUpsert is mark in one statement, where the dialect has one (see
// pgMarkUpsert).
func (s *Store) markUpsert(ctx context.Context, q execer, e Entry) (marked, error) {
	var st string
	var attempts int
	var counted bool
	err := s.q.markUpsert.queryRow(ctx, q, e.row(args{"marker": markerError, "now": s.t(s.now()), "max": s.cfg.Retry.MaxAttempts})).
		Scan(&st, &attempts, &counted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Another delivery inserted the row after our snapshot: read it.
		st, attempts, ok, err := s.status(ctx, q, e)
		if err != nil || !ok {
			return marked{again: err == nil}, err
		}
		return s.found(ctx, q, e, st, attempts)
	case err != nil:
		return marked{}, fmt.Errorf("inbox: start attempt: %w", err)
	case counted:
		return marked{started: attempts}, nil
	}
	return s.found(ctx, q, e, inboxkit.Status(st), attempts)
}
