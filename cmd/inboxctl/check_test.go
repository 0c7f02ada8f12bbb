package main

import (
	"context"
	"testing"

	"github.com/inboxkit/inboxkit/examples/claims"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// TestCheckClaimsConsumer runs check with the claims example's own config
// on its own table (claim_cases): a split transaction, a double effect, a
// message-id-derived id and a resend a derived id did not catch are found.
func TestCheckClaimsConsumer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	url := dbURL(t, db)
	ctx := context.Background()
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--no-invoice-tables"), 0, "inbox table INBOX_EVENT_PROCESSING;")
	dbtest.Must(t, claims.Migrate(ctx, db.DB), "claims tables")
	wantCode(t, inboxctl(t, "", "check", "--db", url, "--config", "../../examples/claims/check.json"), 0, "ok    processed-without-case", "ok    duplicate-cases", "no findings")
	for _, q := range []string{
		// consistent
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, PAYLOAD_HASH) VALUES ('n-1', 'claims-service', 'PROCESSED', 1, 'h1')`,
		`INSERT INTO claim_cases VALUES ('c-1', '4711', 'n-1', '2026-01-01 00:00:00')`,
		// split transaction: PROCESSED, no case
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, PAYLOAD_HASH) VALUES ('n-2', 'claims-service', 'PROCESSED', 1, 'h2')`,
		// the same claim reported under a new broker message id: two cases
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE) VALUES ('ID:a-1', 'claims-service', 'PROCESSED', 1, 'h5', 'message-id')`,
		`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE) VALUES ('ID:a-2', 'claims-service', 'PROCESSED', 1, 'h5', 'message-id')`,
		`INSERT INTO claim_cases VALUES ('c-5a', '5000', 'ID:a-1', '2026-01-01 00:00:00')`,
		`INSERT INTO claim_cases VALUES ('c-5b', '5000', 'ID:a-2', '2026-01-01 00:00:00')`,
	} {
		_, err := db.ExecContext(ctx, q)
		dbtest.Must(t, err, "plant")
	}
	r := inboxctl(t, "", "check", "--db", url, "--config", "../../examples/claims/check.json")
	wantCode(t, r, 1,
		"FOUND processed-without-case", "n-2",
		"FOUND duplicate-cases", "5000: 2 rows, event ids ID:a-1, ID:a-2",
		"FOUND payload-hash-reuse",
		"FOUND derived-id-payload-reuse", "ID:a-1 from message-id, ID:a-2 from message-id",
		"FOUND message-id-event-ids", "ID:a-1 (claims-service): PROCESSED",
		"ok    stuck-technical-failure")
	// The same with flags instead of the file.
	wantCode(t, inboxctl(t, "", "check", "--db", url, "--consumer", claims.ConsumerName,
		"--business-row-sql", "SELECT 1 FROM claim_cases c WHERE c.event_id = {event_id}",
		"--business-key-sql", "SELECT claim_no AS business_key, event_id FROM claim_cases"), 1,
		"FOUND processed-without-business-row", "FOUND duplicate-business-keys", "5000: 2 rows")
	wantCode(t, inboxctl(t, "", "check", "--db", url, "--business-row-sql", "SELECT 1 FROM claim_cases"), 2, "{event_id}")
}
