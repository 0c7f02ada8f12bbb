package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/inboxkit/inboxkit"
)

// ErrUnstorable is wrapped by every *ReceiveError: the message cannot be
// stored and must be dead-lettered by the caller.
var ErrUnstorable = errors.New("inbox: message cannot be stored")

// ReceiveError is returned by Receive for a message that cannot be stored
// because its event id is missing or longer than the column. The caller
// publishes the message to the dead-letter destination with Reason
// (inboxkit.ReasonMissingEventID or inboxkit.ReasonEventIDTooLong) and then acknowledges it.
// It implements inboxkit.Decider (class POISON), so inboxkit.DecisionOf
// routes it like any other poison error.
type ReceiveError struct {
	// Reason is inboxkit.ReasonMissingEventID or inboxkit.ReasonEventIDTooLong.
	Reason string
	// EventID is the offending id ("" when missing).
	EventID string
}

func (e *ReceiveError) Error() string {
	if e.Reason == inboxkit.ReasonMissingEventID {
		return "inbox: receive: message has no event id (" + e.Reason + ")"
	}
	return fmt.Sprintf("inbox: receive: event id of %d bytes is longer than %d (%s)", len(e.EventID), MaxEventIDLength, e.Reason)
}

// Unwrap returns ErrUnstorable.
func (e *ReceiveError) Unwrap() error { return ErrUnstorable }

// InboxDecision classifies the error as poison with the reason code.
func (e *ReceiveError) InboxDecision() inboxkit.Decision {
	return inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: e.Reason}
}

type queueQueries struct {
	insertReceived string
	// claimSelect / claimUpdate: PostgreSQL, MariaDB, Oracle (SKIP LOCKED).
	claimSelect string
	claimUpdate string // IN list appended per call
	// claimReturning: SQLite, one atomic UPDATE ... RETURNING.
	claimReturning string
	processed      string
	rejected       string
	failed         string
	deadLettered   string
	release        string
}

const claimColumns = `EVENT_ID, CORRELATION_ID, HEADERS, PAYLOAD, ATTEMPTS, CREATED_AT, ERROR_CLASS, REASON_CODE, LAST_ERROR`

func buildQueueQueries(d Dialect, table string) queueQueries {
	r := func(q string) string {
		return d.Rebind(fmtTable(q, table))
	}
	// Claimable: never claimed; failed technically and due; or claimed
	// under a lease that has expired. TECHNICAL_FAILURE rows written by the
	// transactional variant (Process) have no NEXT_ATTEMPT_AT and are never
	// claimed: they wait for the broker's redelivery.
	const eligible = `CONSUMER_NAME = ? AND (STATUS = 'RECEIVED'` +
		` OR (STATUS = 'TECHNICAL_FAILURE' AND NEXT_ATTEMPT_AT <= ?)` +
		` OR (STATUS = 'IN_PROGRESS' AND LEASE_UNTIL <= ?))`
	// The lease is identified by owner and attempt number: every claim
	// raises ATTEMPTS, so a worker that re-claims under the same owner name
	// still cannot complete an older claim.
	const mine = ` WHERE EVENT_ID = ? AND CONSUMER_NAME = ? AND STATUS = 'IN_PROGRESS' AND LEASE_OWNER = ? AND ATTEMPTS = ?`
	const setLease = `STATUS = 'IN_PROGRESS', LEASE_OWNER = ?, LEASE_UNTIL = ?, ATTEMPTS = ATTEMPTS + 1, UPDATED_AT = ?`

	q := queueQueries{
		insertReceived: r(`INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PAYLOAD_HASH, PAYLOAD, HEADERS, CREATED_AT, UPDATED_AT, ATTEMPTS, EVENT_ID_SOURCE) VALUES (?, ?, 'RECEIVED', ?, ?, ?, ?, ?, ?, 0, ?)`),
		claimUpdate:    `UPDATE {t} SET ` + setLease + ` WHERE CONSUMER_NAME = ? AND EVENT_ID IN (`,
		processed:      r(`UPDATE {t} SET STATUS = 'PROCESSED', PROCESSED_AT = ?, UPDATED_AT = ?, LEASE_OWNER = NULL, LEASE_UNTIL = NULL, NEXT_ATTEMPT_AT = NULL, REASON_CODE = NULL, ERROR_CLASS = NULL` + mine),
		rejected:       r(`UPDATE {t} SET STATUS = 'REJECTED', REASON_CODE = ?, ERROR_CLASS = 'BUSINESS', LAST_ERROR = ?, PROCESSED_AT = ?, UPDATED_AT = ?, LEASE_OWNER = NULL, LEASE_UNTIL = NULL, NEXT_ATTEMPT_AT = NULL` + mine),
		failed:         r(`UPDATE {t} SET STATUS = 'TECHNICAL_FAILURE', REASON_CODE = ?, ERROR_CLASS = ?, LAST_ERROR = ?, NEXT_ATTEMPT_AT = ?, UPDATED_AT = ?, FIRST_FAILED_AT = COALESCE(FIRST_FAILED_AT, ?), ATTEMPTS = ATTEMPTS - ?, LEASE_OWNER = NULL, LEASE_UNTIL = NULL` + mine),
		// NEXT_ATTEMPT_AT is set, not cleared: should ResetForReplay make the
		// row TECHNICAL_FAILURE again, the worker replays it from the stored
		// payload at once (a redelivery from the DLQ is only a duplicate).
		deadLettered: r(`UPDATE {t} SET STATUS = 'DEAD_LETTERED', REASON_CODE = ?, ERROR_CLASS = ?, LAST_ERROR = COALESCE(?, LAST_ERROR), PROCESSED_AT = ?, UPDATED_AT = ?, NEXT_ATTEMPT_AT = ?, LEASE_OWNER = NULL, LEASE_UNTIL = NULL` + mine),
		// Release hands an unstarted claim back: the lease ends now. The
		// attempt stays counted: (owner, ATTEMPTS) is the claim's fencing
		// token and must never repeat. LEASE_OWNER changes, so MySQL
		// reports the row as affected.
		release: r(`UPDATE {t} SET LEASE_OWNER = NULL, LEASE_UNTIL = ?, UPDATED_AT = ?` + mine),
	}
	q.claimUpdate = fmtTable(q.claimUpdate, table)
	switch d.name {
	case "sqlite":
		q.claimReturning = r(`UPDATE {t} SET ` + setLease + ` WHERE rowid IN (SELECT rowid FROM {t} WHERE ` + eligible +
			` ORDER BY CREATED_AT, EVENT_ID LIMIT ?) RETURNING ` + claimColumns)
	case "mysql":
		// No ORDER BY: InnoDB would lock every eligible row to sort them,
		// and the other workers would find nothing to claim.
		q.claimSelect = r(`SELECT ` + claimColumns + ` FROM {t} WHERE ` + eligible + ` LIMIT ?` + d.skipLocked)
	case "oracle":
		// Oracle refuses FETCH FIRST with FOR UPDATE; ROWNUM limits before
		// the skip, so a claim may return fewer rows than asked. Untested:
		// there is no Oracle server in CI.
		q.claimSelect = r(`SELECT ` + claimColumns + ` FROM {t} WHERE ` + eligible + ` AND ROWNUM <= ?` + d.skipLocked)
	default:
		q.claimSelect = r(`SELECT ` + claimColumns + ` FROM {t} WHERE ` + eligible + ` ORDER BY CREATED_AT, EVENT_ID LIMIT ?` + d.skipLocked)
	}
	return q
}

func fmtTable(q, table string) string { return strings.ReplaceAll(q, "{t}", table) }

// Receive stores a message for the store-then-process variant: the whole
// message (headers as JSON, payload, payload hash, correlation id) becomes a
// RECEIVED row in its own transaction, keyed by event id and consumer name.
// When Receive returns a nil error the message is safe in the database and
// the caller acknowledges it to the broker; a Worker processes it later.
//
// A duplicate delivery, whatever the status of the row found (RECEIVED,
// IN_PROGRESS, PROCESSED, ...), is reported with inserted false and the
// status found, and changes nothing: acknowledge it too. When e.PayloadHash
// is empty the SHA-256 of payload is stored.
//
// A message without event id or with one longer than MaxEventIDLength is
// not stored: the error is a *ReceiveError carrying the reason code; the
// caller dead-letters the message, then acknowledges it. Any other error
// means nothing is stored: do not acknowledge.
//
// Receive is safe for concurrent use by many goroutines and processes.
func (s *Store) Receive(ctx context.Context, e Entry, headers map[string]string, payload []byte) (inserted bool, status inboxkit.Status, err error) {
	if e.PayloadHash == "" {
		sum := sha256.Sum256(payload)
		e.PayloadHash = hex.EncodeToString(sum[:])
	}
	e, poison, err := normalize(e)
	if err != nil {
		return false, "", err
	}
	if poison != "" {
		return false, "", &ReceiveError{Reason: poison, EventID: e.EventID}
	}
	var hdr any
	if headers != nil {
		b, err := json.Marshal(headers)
		if err != nil {
			return false, "", fmt.Errorf("inbox: receive: encode headers: %w", err)
		}
		hdr = string(b)
	}
	q := &s.qq
	// A few rounds: a duplicate row can vanish (retention purge) between
	// the failed INSERT and the read of its status.
	for round := 0; round < 3; round++ {
		now := s.now()
		_, err = s.db.ExecContext(ctx, q.insertReceived, e.EventID, e.ConsumerName, nullString(e.CorrelationID), nullString(e.PayloadHash),
			payload, hdr, s.t(now), s.t(now), sourceArg(e.EventIDSource))
		if err == nil {
			return true, inboxkit.StatusReceived, nil
		}
		if !s.d.IsDuplicate(err) {
			return false, "", fmt.Errorf("inbox: receive: %w", err)
		}
		st, _, ok, err := s.status(ctx, s.db, e)
		if err != nil {
			return false, "", err
		}
		if ok {
			return false, st, nil
		}
	}
	return false, "", fmt.Errorf("inbox: receive: event %q for %q kept appearing and vanishing", e.EventID, e.ConsumerName)
}
