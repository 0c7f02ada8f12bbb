package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/dberr"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/invoice"
)

// TestRunRecordsDeadlock: `inboxctl run` gives a real PostgreSQL deadlock its
// reason code, DEADLOCK, as the approved transcripts show: the command
// classifies with the store's default, classify.Of, as the harnesses do.
//
// The deadlock: the consumer's business transaction holds the inbox row
// (claimed before the handler runs) and its handler inserts the shipping
// letter; the test's transaction has inserted that letter first (uncommitted)
// and then updates the inbox row. Two transactions locking the same two rows
// in opposite order. The test's session waits longer before it looks for a
// deadlock (deadlock_timeout), so PostgreSQL picks the consumer's transaction
// as the victim (SQLSTATE 40P01). The message is redelivered and processed.
func TestRunRecordsDeadlock(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	db := dbtest.New(t, dbtest.Postgres)
	url := dbURL(t, db)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.deadlock.%d", time.Now().UnixNano())
	const eventID = "E-DEADLOCK-1"
	wantCode(t, inboxctl(t, "", "migrate", "--db", url, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, invoiceLine(eventID, "C-DL", "INV-DL-1", "K-100")+"\n", "publish", "--broker", broker, "--queue", queue, "--file", "-"),
		0, "published 1 message(s)")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The test's transaction: it takes the letter's key first.
	other, err := db.BeginTx(ctx, nil)
	dbtest.Must(t, err, "begin the test's transaction")
	defer other.Rollback() //nolint:errcheck // ends it if the test fails early
	_, err = other.ExecContext(ctx, `SET LOCAL deadlock_timeout = '30s'`)
	dbtest.Must(t, err, "deadlock_timeout of the test's session")
	_, err = other.ExecContext(ctx, `INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES ($1, 'INV-DL-1', 'K-100', NULL, now())`,
		invoice.LetterIDFor(eventID))
	dbtest.Must(t, err, "insert the letter first")
	var otherPID int
	dbtest.Must(t, other.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID), "the test transaction's backend")

	_, logs := startRun(ctx, t, "--db", url, "--broker", broker, "--queue", queue, "--log-format", "json",
		"--log-level", "debug", "--requeue-delay", "100ms")

	// The consumer's handler now waits for the letter's key: an insert
	// blocked by this test's transaction, not by another test's (every
	// test schema lives in the same database, and other tests and test
	// processes insert letters too).
	waitFor(t, "the consumer's insert to wait for the test's transaction", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE 'INSERT INTO shipping_letters%'`, otherPID).Scan(&n)
		return err == nil && n == 1
	}, logs)
	// Closing the cycle: the test's transaction wants the inbox row's key,
	// which the consumer's transaction inserted (a first delivery runs
	// without a marker: the row is not committed yet). It waits until
	// PostgreSQL aborted the consumer's transaction, then goes on.
	_, err = other.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS) VALUES ($1, 'invoice-consumer', 'PROCESSED')`, eventID)
	if c, ok := dberr.Of(err); ok && c.SQLState == "23505" {
		// On a loaded machine the consumer's failure row (its own
		// transaction, after the rollback PostgreSQL forced on it) can
		// commit before this insert resumes: the deadlock happened all the
		// same, and this key is taken.
		err = nil
	}
	dbtest.Must(t, err, "insert the inbox row's key (the test's side of the deadlock)")
	dbtest.Must(t, other.Rollback(), "roll back the test's transaction")

	waitFor(t, "the event to be processed after the deadlock", func() bool {
		return strings.Contains(logs.String(), `"outcome":"PROCESSED"`)
	}, logs)
	var failure string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"settled"`) && strings.Contains(line, `"outcome":"RETRY"`) {
			failure = line
			break
		}
	}
	if !strings.Contains(failure, `"reason":"DEADLOCK"`) || !strings.Contains(failure, "deadlock detected") {
		t.Fatalf("the failed delivery's settled line is %q, want reason DEADLOCK and the database's message\nlogs:\n%s", failure, logs.String())
	}
	var status string
	var attempts int
	dbtest.Must(t, db.QueryRowContext(ctx, `SELECT STATUS, ATTEMPTS FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1`, eventID).Scan(&status, &attempts), "read the row")
	if status != "PROCESSED" || attempts != 2 {
		t.Errorf("row %s after %d attempts, want PROCESSED after 2 (the deadlock, then the redelivery)", status, attempts)
	}
	t.Logf("the deadlocked delivery: %s", failure)
}
