// Package claims is a tiny example consumer from the Inbox Pattern text: an
// insurer's claims service. The message "Schaden 4711 gemeldet" ("claim 4711
// reported") opens one claim case. Behind an inbox, a redelivery of the same
// event (a crash after the commit and before the acknowledgement) opens no
// second case. Its approval cases live in testdata/golden.
package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// ConsumerName is the consumer's CONSUMER_NAME.
const ConsumerName = "claims-service"

// Migrate creates the claim_cases table if it does not exist (PostgreSQL,
// MariaDB/MySQL, SQLite).
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS claim_cases (
    case_id   VARCHAR(64)  NOT NULL PRIMARY KEY,
    claim_no  VARCHAR(40)  NOT NULL,
    event_id  VARCHAR(120) NOT NULL,
    opened_at TIMESTAMP    NOT NULL
)`)
	if err != nil {
		return fmt.Errorf("claims: migrate: %w", err)
	}
	return nil
}

var reported = regexp.MustCompile(`^Schaden (\d{1,20}) gemeldet$`)

// Config configures the handler.
type Config struct {
	// Dialect of the database. Required.
	Dialect inbox.Dialect
	// IDFunc returns new case ids. Required (tests inject a counter).
	IDFunc func() string
	// Clock stamps opened_at. Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
}

// NewHandler returns the handler: it opens one claim case per "Schaden N
// gemeldet" message; any other text is poison (MALFORMED_PAYLOAD).
func NewHandler(cfg Config) (consumer.Handler, error) {
	if cfg.Dialect.Name() == "" || cfg.IDFunc == nil {
		return nil, errors.New("claims: Config.Dialect and Config.IDFunc are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = inboxkit.SystemClock{}
	}
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		match := reported.FindStringSubmatch(string(m.Body))
		if match == nil {
			return classify.Poison(inboxkit.ReasonMalformedPayload, fmt.Errorf("claims: %q is not \"Schaden <no> gemeldet\"", m.Body))
		}
		var at any = cfg.Clock.Now().UTC()
		if cfg.Dialect.Name() == "sqlite" {
			at = cfg.Clock.Now().UTC().Format("2006-01-02 15:04:05.000000")
		}
		_, err := tx.ExecContext(ctx, cfg.Dialect.Rebind(`INSERT INTO claim_cases (case_id, claim_no, event_id, opened_at) VALUES (?, ?, ?, ?)`),
			cfg.IDFunc(), match[1], m.ID, at)
		if err != nil {
			return fmt.Errorf("claims: open case for claim %s: %w", match[1], err)
		}
		return nil
	}, nil
}
