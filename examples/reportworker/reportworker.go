// Package reportworker is a tiny example consumer: the consumer
// "report-worker" raises a report counter by one per event. Without an inbox
// a redelivered event would count twice; with it, E-42 raises the counter
// from 6 to 7 and a redelivery after a lost acknowledgement leaves it at 7,
// also when two instances receive E-42 at the same moment. Its approval
// cases live in testdata/golden.
package reportworker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// ConsumerName is the consumer's CONSUMER_NAME.
const ConsumerName = "report-worker"

// Migrate creates report_counters if it does not exist and seeds report
// with value start when it has no row.
func Migrate(ctx context.Context, db *sql.DB, d inbox.Dialect, report string, start int) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS report_counters (
    report_id VARCHAR(40) NOT NULL PRIMARY KEY,
    value     INTEGER     NOT NULL
)`); err != nil {
		return fmt.Errorf("reportworker: migrate: %w", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, d.Rebind(`SELECT COUNT(*) FROM report_counters WHERE report_id = ?`), report).Scan(&n); err != nil {
		return fmt.Errorf("reportworker: migrate: %w", err)
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, d.Rebind(`INSERT INTO report_counters (report_id, value) VALUES (?, ?)`), report, start); err != nil {
			return fmt.Errorf("reportworker: seed: %w", err)
		}
	}
	return nil
}

// NewHandler returns the handler: it adds one to the counter named in the
// "report" header; an unknown report is a business rejection
// (REPORT_UNKNOWN), a message without the header is poison (MISSING_FIELD).
func NewHandler(d inbox.Dialect) consumer.Handler {
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		report := m.Header("report")
		if report == "" {
			return classify.Poison(inboxkit.ReasonMissingField, errors.New("reportworker: no report header"))
		}
		res, err := tx.ExecContext(ctx, d.Rebind(`UPDATE report_counters SET value = value + 1 WHERE report_id = ?`), report)
		if err != nil {
			return fmt.Errorf("reportworker: raise %s: %w", report, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return classify.Reject("REPORT_UNKNOWN", fmt.Errorf("reportworker: no counter %q", report))
		}
		return nil
	}
}
