package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

// ErrUnstorable is wrapped by every *ReceiveError: the message cannot be
// stored and must be dead-lettered by the caller.
var ErrUnstorable = errors.New("inbox: message cannot be stored")

// ReceiveError is returned by Receive for a message that cannot be stored:
// its event id is missing, longer than the column or not one the inbox can
// key a row by, the database refuses one of its values (a header that is
// not valid UTF-8, a value longer than a legacy table's column), or its
// event has a row in a status the state machine does not know (see
// inboxkit.ReasonUnknownStatus; the row is left as it is). The caller
// publishes the message to the dead-letter destination with Reason and
// then acknowledges it. It implements inboxkit.Decider (class POISON;
// TECHNICAL for an unknown status), so inboxkit.DecisionOf routes it like
// any other error of its class.
type ReceiveError struct {
	// Reason is inboxkit.ReasonMissingEventID, ReasonEventIDTooLong,
	// ReasonInvalidEventID or ReasonUnknownStatus, or, for a value the
	// database refuses, ReasonInvalidEncoding, ReasonValueTooLong or
	// ReasonInvalidValue.
	Reason string
	// EventID is the offending id ("" when missing).
	EventID string
	// Unknown says which row an UNKNOWN_STATUS refers to.
	Unknown *UnknownStatusError
	// Err is the database's error, for a refused value.
	Err error
}

func (e *ReceiveError) Error() string {
	switch {
	case e.Unknown != nil:
		return "inbox: receive: " + strings.TrimPrefix(e.Unknown.Error(), "inbox: ")
	case e.Reason == inboxkit.ReasonMissingEventID:
		return "inbox: receive: message has no event id (" + e.Reason + ")"
	case e.Reason == inboxkit.ReasonEventIDTooLong:
		return fmt.Sprintf("inbox: receive: event id of %d bytes is longer than %d (%s)", len(e.EventID), MaxEventIDLength, e.Reason)
	case e.Reason == inboxkit.ReasonInvalidEventID:
		return fmt.Sprintf("inbox: receive: event id %q holds a NUL byte or is not valid UTF-8 (%s)", e.EventID, e.Reason)
	}
	return fmt.Sprintf("inbox: receive: event %q: the database cannot store a value of the message (%s): %v", e.EventID, e.Reason, e.Err)
}

// Unwrap returns ErrUnstorable.
func (e *ReceiveError) Unwrap() error { return ErrUnstorable }

// InboxDecision classifies the error as poison with the reason code, or,
// for an unknown status, as technical (the row's fault, not the message's).
func (e *ReceiveError) InboxDecision() inboxkit.Decision {
	if e.Unknown != nil {
		return e.Unknown.InboxDecision()
	}
	return inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: e.Reason}
}

// insertLeasedHead + leasedRow is insertLeased: a new entry stored
// claimed, one row of a group's INSERT (receiveGroup).
const (
	insertLeasedHead = `INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PAYLOAD_HASH, PAYLOAD, HEADERS, CREATED_AT, UPDATED_AT, ATTEMPTS, EVENT_ID_SOURCE, ORDER_KEY, LEASE_OWNER, LEASE_UNTIL) VALUES `
	leasedRow        = `(@event, @consumer, 'IN_PROGRESS', @corr, @hash, @payload, @headers, @created, @now, 1, @source, @okey, @owner, @until)`
)

type queueQueries struct {
	insertReceived stmt
	// insertLeased stores a new entry already claimed (Worker.Receive):
	// IN_PROGRESS under @owner's lease until @until, its first attempt
	// counted, as a claim would leave it.
	insertLeased stmt
	// insertLeasedRows is insertLeased's head for many rows, the VALUES
	// (leasedRow) appended per call (receiveGroup); "" where entries are
	// not stored in groups (Store.groups).
	insertLeasedRows string
	adoptReceived    stmt
	// lastOpen reads the CREATED_AT of the newest open entry of a key.
	lastOpen stmt
	// claim selects claimable rows FOR UPDATE; claimUpdate (with the IN
	// list appended per call) then claims them. When claimUpdates is set,
	// claim is one UPDATE ... RETURNING that claims by itself (SQLite).
	claim        stmt
	claimUpdates bool
	claimUpdate  string
	processed    stmt
	// processedFenced is processed where a failed statement aborts the
	// transaction (PostgreSQL): it fails when the lease is lost (naming
	// leaseLostText) instead of counting no row, so that a COMMIT sent
	// with it cannot commit the handler's writes without it (lease.fence).
	// Empty elsewhere.
	processedFenced stmt
	rejected        stmt
	failed          stmt
	deadLettered    stmt
	release         stmt
}

const claimColumns = `EVENT_ID, CORRELATION_ID, HEADERS, PAYLOAD, ATTEMPTS, CREATED_AT, ERROR_CLASS, REASON_CODE, LAST_ERROR`

// Claimable: never claimed; failed technically and due; or claimed under a
// lease that has expired. TECHNICAL_FAILURE rows written by the
// transactional variant (Process) have no NEXT_ATTEMPT_AT and are never
// claimed: they wait for the broker's redelivery.
//
// An entry with an order key is claimable only while it is the oldest open
// entry of its key (keyHead), so that no two workers ever hold entries of
// one key and a key's entries run in arrival order, also after a lease
// expires: the expired entry is still its key's oldest open one.
const claimable = `CONSUMER_NAME = @consumer AND (STATUS = 'RECEIVED'` +
	` OR (STATUS = 'TECHNICAL_FAILURE' AND NEXT_ATTEMPT_AT <= @now)` +
	` OR (STATUS = 'IN_PROGRESS' AND LEASE_UNTIL <= @now))` + keyHead

// openEntry is an entry of the store-then-process variant that is not
// finished: stored, leased (expired or not), or failed and due again at
// NEXT_ATTEMPT_AT. A TECHNICAL_FAILURE without NEXT_ATTEMPT_AT waits for the
// broker (the transactional variant's) and holds no key.
const openEntry = `(STATUS IN ('RECEIVED', 'IN_PROGRESS') OR (STATUS = 'TECHNICAL_FAILURE' AND NEXT_ATTEMPT_AT IS NOT NULL))`

// keyHead admits an entry without an order key, or the oldest open entry
// of its key: the first by (CREATED_AT, EVENT_ID). Receive makes a keyed
// entry's CREATED_AT later than that of every open entry of its key
// (arrival), so the event id only breaks ties a coarse CREATED_AT column
// could leave: at most one entry of a key is ever its head. The heads are
// one uncorrelated subquery (a window over the open keyed entries), which
// the databases evaluate once per claim, and not at all when no candidate
// has a key. It reads without locking: an entry locked by a concurrent
// claim still counts as open, so its key's next entry is no head.
const keyHead = ` AND (ORDER_KEY IS NULL OR EVENT_ID IN (SELECT EVENT_ID FROM (SELECT EVENT_ID, ROW_NUMBER() OVER ` +
	`(PARTITION BY ORDER_KEY ORDER BY CREATED_AT, EVENT_ID) AS KEY_RANK FROM {t} WHERE CONSUMER_NAME = @consumer AND ORDER_KEY IS NOT NULL AND ` +
	openEntry + `) heads WHERE KEY_RANK = 1))`

// setLease is the SET list of a claim.
const setLease = `STATUS = 'IN_PROGRESS', LEASE_OWNER = @owner, LEASE_UNTIL = @until, ATTEMPTS = ATTEMPTS + 1, UPDATED_AT = @now`

func buildQueueQueries(d Dialect, table string) queueQueries {
	n := func(q string) stmt { return compile(d, fmtTable(q, table)) }
	// The lease is identified by owner and attempt number: every claim
	// raises ATTEMPTS, so a worker that re-claims under the same owner name
	// still cannot complete an older claim.
	const mine = ` WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer AND STATUS = 'IN_PROGRESS' AND LEASE_OWNER = @owner AND ATTEMPTS = @attempts`
	const setProcessed = `UPDATE {t} SET STATUS = 'PROCESSED', PROCESSED_AT = @now, UPDATED_AT = @now, LEASE_OWNER = NULL, LEASE_UNTIL = NULL, NEXT_ATTEMPT_AT = NULL, REASON_CODE = NULL, ERROR_CLASS = NULL` + mine
	leasedRows := ""
	if d.multiRowInsert && (d.doNothing != "" || !d.abortsOnError) {
		leasedRows = fmtTable(insertLeasedHead, table)
	}
	var fenced stmt
	if d.abortsOnError {
		// The CASE depends on the row count, so the cast is evaluated when
		// the statement runs, never folded by the planner.
		fenced = n(`WITH done AS (` + setProcessed + ` RETURNING 1) SELECT CAST(CASE COUNT(*) WHEN 1 THEN '1' ELSE '` + leaseLostText + `' END AS INTEGER) FROM done`)
	}
	return queueQueries{
		insertReceived:   n(`INSERT INTO {t} (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PAYLOAD_HASH, PAYLOAD, HEADERS, CREATED_AT, UPDATED_AT, ATTEMPTS, EVENT_ID_SOURCE, ORDER_KEY) VALUES (@event, @consumer, 'RECEIVED', @corr, @hash, @payload, @headers, @created, @now, 0, @source, @okey)` + d.doNothing),
		insertLeased:     n(insertLeasedHead + leasedRow + d.doNothing),
		insertLeasedRows: leasedRows,
		lastOpen:         n(`SELECT MAX(CREATED_AT) FROM {t} WHERE CONSUMER_NAME = @consumer AND ORDER_KEY = @okey AND ` + openEntry),
		// A TECHNICAL_FAILURE row no worker will claim (no NEXT_ATTEMPT_AT:
		// written by the transactional variant, or an adopted legacy row
		// mapped by Migrate) takes the message in and becomes a RECEIVED
		// entry; its attempts stay counted.
		adoptReceived: n(`UPDATE {t} SET STATUS = 'RECEIVED', PAYLOAD = @payload, HEADERS = @headers, PAYLOAD_HASH = COALESCE(PAYLOAD_HASH, @hash), ` +
			`CORRELATION_ID = COALESCE(CORRELATION_ID, @corr), EVENT_ID_SOURCE = COALESCE(EVENT_ID_SOURCE, @source), ORDER_KEY = COALESCE(ORDER_KEY, @okey), UPDATED_AT = @now ` +
			`WHERE EVENT_ID = @event AND CONSUMER_NAME = @consumer AND STATUS = 'TECHNICAL_FAILURE' AND NEXT_ATTEMPT_AT IS NULL`),
		claim:           n(fmt.Sprintf(d.claim, "{t}", claimable, claimColumns, setLease)),
		claimUpdates:    d.claimUpdates,
		claimUpdate:     fmtTable(`UPDATE {t} SET `+setLease+` WHERE CONSUMER_NAME = @consumer AND EVENT_ID IN (`, table),
		processed:       n(setProcessed),
		processedFenced: fenced,
		rejected:        failing(n(`UPDATE {t} SET STATUS = 'REJECTED', REASON_CODE = @reason, ERROR_CLASS = 'BUSINESS', LAST_ERROR = @error, PROCESSED_AT = @now, UPDATED_AT = @now, LEASE_OWNER = NULL, LEASE_UNTIL = NULL, NEXT_ATTEMPT_AT = NULL` + mine)),
		failed:          failing(n(`UPDATE {t} SET STATUS = 'TECHNICAL_FAILURE', REASON_CODE = @reason, ERROR_CLASS = @class, LAST_ERROR = @error, NEXT_ATTEMPT_AT = @next, UPDATED_AT = @now, FIRST_FAILED_AT = COALESCE(FIRST_FAILED_AT, @now), ATTEMPTS = ATTEMPTS - @uncount, LEASE_OWNER = NULL, LEASE_UNTIL = NULL` + mine)),
		// NEXT_ATTEMPT_AT is set, not cleared: should ResetForReplay make the
		// row TECHNICAL_FAILURE again, the worker replays it from the stored
		// payload at once (a redelivery from the DLQ is only a duplicate).
		deadLettered: failing(n(`UPDATE {t} SET STATUS = 'DEAD_LETTERED', REASON_CODE = @reason, ERROR_CLASS = @class, LAST_ERROR = COALESCE(@error, LAST_ERROR), PROCESSED_AT = @now, UPDATED_AT = @now, NEXT_ATTEMPT_AT = @now, LEASE_OWNER = NULL, LEASE_UNTIL = NULL` + mine)),
		// Release hands an unstarted claim back: the lease ends now. The
		// attempt stays counted: (owner, ATTEMPTS) is the claim's fencing
		// token and must never repeat. LEASE_OWNER changes, so MySQL
		// reports the row as affected.
		release: n(`UPDATE {t} SET LEASE_OWNER = NULL, LEASE_UNTIL = @now, UPDATED_AT = @now` + mine),
	}
}

func fmtTable(q, table string) string { return strings.ReplaceAll(q, "{t}", table) }

// Receive stores a message for the store-then-process variant: the whole
// message (headers as JSON, payload, payload hash, correlation id) becomes a
// RECEIVED row in its own transaction, keyed by event id and consumer name.
// When Receive returns a nil error the message is safe in the database and
// the caller acknowledges it to the broker; a Worker processes it later.
// An entry with an order key is stored with a CREATED_AT after that of
// every open entry of its key, which is the order workers take a key's
// entries in: receive a key's deliveries one at a time, in arrival order
// (package consumer's order per key does).
//
// A delivery of an event that has a row is reported with inserted false
// and the status found, and changes nothing: a terminal row (a duplicate),
// or an entry stored before (RECEIVED, IN_PROGRESS, or TECHNICAL_FAILURE
// awaiting a worker's next attempt); acknowledge it too. A
// TECHNICAL_FAILURE row no worker would ever claim (written by the
// transactional variant, or an adopted legacy row mapped by Migrate) takes
// the message in instead: it becomes RECEIVED with the payload (inserted
// true), its attempts still counted. When e.PayloadHash is empty the
// SHA-256 of payload is stored.
//
// A message that cannot be stored (no usable event id, a value the
// database refuses; see ReceiveError) is not stored, nor is one whose
// event's row is in a status the state machine does not know or is a
// legacy RECEIVED or IN_PROGRESS row: the error is a *ReceiveError
// carrying the reason code; the caller dead-letters the message, then
// acknowledges it. Any other error means nothing is stored: do not
// acknowledge.
//
// Receive is safe for concurrent use by many goroutines and processes.
func (s *Store) Receive(ctx context.Context, e Entry, headers map[string]string, payload []byte) (inserted bool, status inboxkit.Status, err error) {
	inserted, status, _, err = s.receive(ctx, e, headers, payload, nil)
	return inserted, status, err
}

// receive is Receive; with w, a new entry without an order key is stored
// claimed by w (insertLeased) and returned as its claim.
func (s *Store) receive(ctx context.Context, e Entry, headers map[string]string, payload []byte, w *Worker) (inserted bool, status inboxkit.Status, c *Claimed, err error) {
	if e.PayloadHash == "" {
		sum := sha256.Sum256(payload)
		e.PayloadHash = hex.EncodeToString(sum[:])
	}
	e, poison, err := normalize(e)
	if err != nil {
		return false, "", nil, err
	}
	if poison != "" {
		return false, "", nil, &ReceiveError{Reason: poison, EventID: e.EventID}
	}
	var hdr any
	hdrLen := 0
	if headers != nil {
		for k, v := range headers {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				// JSON would store U+FFFD for the bytes: the stored message
				// would not be the one received.
				return false, "", nil, &ReceiveError{Reason: inboxkit.ReasonInvalidEncoding, EventID: e.EventID,
					Err: fmt.Errorf("header %q is not valid UTF-8", k)}
			}
		}
		b, err := json.Marshal(headers)
		if err != nil {
			return false, "", nil, fmt.Errorf("inbox: receive: encode headers: %w", err)
		}
		hdr, hdrLen = string(b), len(b)
	}
	q := &s.qq
	created, err := s.arrival(ctx, e)
	if err != nil {
		return false, "", nil, err
	}
	// A few rounds: a duplicate row can vanish (retention purge) between
	// the INSERT that met it and the read of its status.
	for round := 0; round < 3; round++ {
		now := s.now()
		a := e.row(arg{"payload", payload}, arg{"headers", hdr}, arg{"now", s.t(now)}, arg{"created", s.t(created)})
		var res sql.Result
		if w != nil && e.OrderKey == "" {
			// A keyed entry waits for its key's head (the claim's keyHead).
			until := now.Add(w.cfg.LeaseDuration)
			la := append(a, arg{"owner", w.cfg.Owner}, arg{"until", s.t(until)})
			grouped, written := false, false
			if round == 0 && s.groups() {
				grouped, written, err = s.insertGrouped(ctx, la, jobKey{e.EventID, e.ConsumerName}, len(payload)+hdrLen)
			}
			if !grouped {
				res, err = q.insertLeased.exec(ctx, s.db, la)
				written = err == nil && wrote(res)
			}
			if written {
				return true, inboxkit.StatusInProgress, &Claimed{Message: inboxkit.Message{ID: e.EventID, CorrelationID: e.CorrelationID, Headers: headers, Body: payload},
					ConsumerName: e.ConsumerName, Attempts: 1, ReceivedAt: created, LeaseUntil: until, Owner: w.cfg.Owner}, nil
			}
		} else {
			res, err = q.insertReceived.exec(ctx, s.db, a)
			if err == nil && wrote(res) {
				return true, inboxkit.StatusReceived, nil, nil
			}
		}
		if err != nil {
			if reason := classify.ValueReason(err); reason != "" {
				return false, "", nil, &ReceiveError{Reason: reason, EventID: e.EventID, Err: err}
			}
			if !s.d.IsDuplicate(err) {
				return false, "", nil, fmt.Errorf("inbox: receive: %w", err)
			}
		}
		// The event's row exists: the INSERT skipped it (doNothing) or
		// failed on its key.
		st, _, ok, err := s.status(ctx, s.db, e)
		if err != nil {
			return false, "", nil, err
		}
		if !ok {
			continue
		}
		inserted, st, err = s.received(ctx, e, st, a)
		return inserted, st, nil, err
	}
	return false, "", nil, fmt.Errorf("inbox: receive: event %q for %q kept appearing and vanishing", e.EventID, e.ConsumerName)
}

// wrote reports whether an INSERT that succeeded wrote its row: false
// when the dialect's doNothing skipped a row whose key exists. A driver
// that cannot count rows wrote it (there is no doNothing without a count).
func wrote(res sql.Result) bool {
	n, err := res.RowsAffected()
	return err != nil || n != 0
}

// arrival is the CREATED_AT of entry e: now, to the microsecond; for an
// entry with an order key, at least a microsecond after the CREATED_AT of
// the newest open entry of its key. A key's deliveries are received one at
// a time (the consumer's order per key, and the broker's across processes),
// so a key's open entries are in arrival order by CREATED_AT even when
// deliveries come within one tick of the clock, the clock steps back, or
// the key moves to a process whose clock is behind (keyHead).
//
// The resolution is the inbox DDL's (PostgreSQL TIMESTAMP, MariaDB
// TIMESTAMP(6), SQLite's text): an adopted table whose CREATED_AT keeps
// less than microseconds orders a key's entries received within one of
// its ticks by event id.
func (s *Store) arrival(ctx context.Context, e Entry) (time.Time, error) {
	now := s.now().Truncate(time.Microsecond)
	if e.OrderKey == "" {
		return now, nil
	}
	var last dbTime
	if err := s.qq.lastOpen.queryRow(ctx, s.db, e.row()).Scan(&last); err != nil {
		return time.Time{}, fmt.Errorf("inbox: receive: the newest open entry of order key %q: %w", e.OrderKey, err)
	}
	if last.Valid && !now.After(last.Time) {
		return last.Time.Truncate(time.Microsecond).Add(time.Microsecond), nil
	}
	return now, nil
}

// received is Receive's answer for a delivery whose event has a row in
// status st; a holds the delivery's row arguments.
func (s *Store) received(ctx context.Context, e Entry, st inboxkit.Status, a args) (bool, inboxkit.Status, error) {
	orphan := false
	switch {
	case st.Terminal():
		return false, st, nil
	case st == inboxkit.StatusTechnicalFailure:
		res, err := s.qq.adoptReceived.exec(ctx, s.db, a)
		if err != nil {
			return false, "", fmt.Errorf("inbox: receive: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return true, inboxkit.StatusReceived, nil
		}
		return false, st, nil // a worker's entry, due again at NEXT_ATTEMPT_AT
	case isOpen(st):
		var err error
		if orphan, err = s.orphan(ctx, s.db, e); err != nil {
			return false, "", err
		}
		if !orphan {
			return false, st, nil
		}
	}
	return false, st, &ReceiveError{Reason: inboxkit.ReasonUnknownStatus, EventID: e.EventID,
		Unknown: &UnknownStatusError{EventID: e.EventID, ConsumerName: e.ConsumerName, Status: string(st), Orphan: orphan}}
}
