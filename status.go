package inboxkit

import (
	"errors"
	"time"
)

// Status is the STATUS column of an inbox row.
type Status string

// The statuses of the inbox state machine (ARCHITECTURE.md, "Status machine").
const (
	// StatusReceived: stored by the store-then-process receiver, not yet claimed.
	StatusReceived Status = "RECEIVED"
	// StatusInProgress: claimed by a worker holding a lease.
	StatusInProgress Status = "IN_PROGRESS"
	// StatusProcessed: the handler committed together with this row. Terminal.
	StatusProcessed Status = "PROCESSED"
	// StatusRejected: a business rejection; the handler's writes were rolled
	// back and the row was committed with the reason code. Terminal.
	StatusRejected Status = "REJECTED"
	// StatusTechnicalFailure: the last attempt failed technically; the message
	// is expected again. Not terminal.
	StatusTechnicalFailure Status = "TECHNICAL_FAILURE"
	// StatusDeadLettered: the message was published to the dead-letter
	// destination. Terminal.
	StatusDeadLettered Status = "DEAD_LETTERED"
)

// Terminal reports whether no further processing happens for the row:
// PROCESSED, REJECTED or DEAD_LETTERED. Only these make a delivery a
// duplicate.
func (s Status) Terminal() bool {
	return s == StatusProcessed || s == StatusRejected || s == StatusDeadLettered
}

// Known reports whether s is a status of the state machine, spelled
// exactly as above. A row in any other status (FAILED, lower-case
// processed: written by a legacy consumer) is never taken for a duplicate
// and never processed; see ReasonUnknownStatus.
func (s Status) Known() bool {
	switch s {
	case StatusReceived, StatusInProgress, StatusProcessed, StatusRejected, StatusTechnicalFailure, StatusDeadLettered:
		return true
	}
	return false
}

// Class is the class of a failure.
type Class string

// Failure classes.
const (
	// ClassTechnical: transient or unknown; retried up to the backout
	// threshold, then dead-lettered. The safe default for unknown errors.
	ClassTechnical Class = "TECHNICAL"
	// ClassBusiness: the message is valid but the business says no
	// (unknown customer). Recorded as REJECTED, never retried.
	ClassBusiness Class = "BUSINESS"
	// ClassPoison: the message can never be processed (undecodable, no event
	// id). Dead-lettered at once, no retries.
	ClassPoison Class = "POISON"
)

// Reason codes the toolkit itself produces, stored in REASON_CODE and in the
// dead-letter envelope. Handlers may use any code that matches
// ^[A-Z][A-Z0-9_]{0,79}$ (see classify.NormalizeCode); these are defined here
// once, for every package.
const (
	// ReasonRejected: a business rejection whose reason is empty (a
	// classify.Reject with an empty code, or a Decider that gave none).
	ReasonRejected = "REJECTED"
	// ReasonPoison: a poison decision whose reason is empty.
	ReasonPoison = "POISON"
	// ReasonMaxAttemptsExceeded: the backout threshold was reached; the
	// reason a technical failure ends in the dead-letter queue.
	ReasonMaxAttemptsExceeded = "MAX_ATTEMPTS_EXCEEDED"

	// ReasonMissingEventID: the message carries no event id (poison, rule 6).
	ReasonMissingEventID = "MISSING_EVENT_ID"
	// ReasonEventIDTooLong: the event id does not fit EVENT_ID (poison).
	ReasonEventIDTooLong = "EVENT_ID_TOO_LONG"
	// ReasonMalformedPayload: the body cannot be decoded (poison).
	ReasonMalformedPayload = "MALFORMED_PAYLOAD"
	// ReasonMissingField: a required field of the payload is absent (poison).
	ReasonMissingField = "MISSING_FIELD"
	// ReasonInvalidEncoding: the message holds text the database refuses
	// (invalid UTF-8 for a text column). Poison: retrying cannot help.
	ReasonInvalidEncoding = "INVALID_ENCODING"
	// ReasonValueTooLong: the database refused a value of the message as
	// too long for its column (PostgreSQL 22001, MySQL/MariaDB 1406; see
	// classify.ValueReason). Poison.
	ReasonValueTooLong = "VALUE_TOO_LONG"
	// ReasonInvalidValue: the database refused a value of the message for
	// another reason of its kind (a data exception; see
	// classify.ValueReason). Poison.
	ReasonInvalidValue = "INVALID_VALUE"
	// ReasonInvalidEventID: the event id is one the inbox cannot key a row
	// by: it holds a NUL byte or is not valid UTF-8, or the database
	// refused it for the EVENT_ID column. Poison.
	ReasonInvalidEventID = "INVALID_EVENT_ID"
	// ReasonMalformedHeaders: the stored headers of a store-then-process
	// entry cannot be decoded (poison).
	ReasonMalformedHeaders = "MALFORMED_HEADERS"
	// ReasonMessageTooLarge: the broker adapter refused a body over its size
	// limit (poison).
	ReasonMessageTooLarge = "MESSAGE_TOO_LARGE"
	// ReasonUnknownStatus: the event's inbox row is in a status the state
	// machine does not know (Status.Known), or is a RECEIVED or IN_PROGRESS
	// row no store-then-process receiver wrote (a legacy row: no payload
	// hash, no lease). The message is dead-lettered at once (technical; it
	// is not the message's fault) and the row is left as it is: map the
	// status (inboxctl migrate --map-status) and replay the dead letter.
	ReasonUnknownStatus = "UNKNOWN_STATUS"
	// ReasonKeyParked: the message's order key is parked (a consumer with
	// consumer.OnPoisonParkKey): an earlier message of the key is in the
	// dead-letter queue, so this one follows it there, in arrival order,
	// unprocessed (class TECHNICAL, no attempt counted). Replaying the
	// key's dead letters, head first, releases the key (docs/order.md).
	ReasonKeyParked = "KEY_PARKED"

	// ReasonCircuitOpen: a circuit breaker refused the call; technical,
	// NoAttempt (see classify/breaker).
	ReasonCircuitOpen = "CIRCUIT_OPEN"
	// ReasonConstraintViolation: a constraint violation (PostgreSQL class 23,
	// MySQL/MariaDB 1062 and friends, SQLite SQLITE_CONSTRAINT, ORA-00001).
	// NOT transient: a plain technical failure, retried by redelivery up to
	// the backout threshold; a handler that knows it is a business case
	// wraps it with classify.Reject.
	ReasonConstraintViolation = "CONSTRAINT_VIOLATION"

	// The transient technical reasons (classify.IsTransientReason): worth
	// retrying soon, in process.

	// ReasonTransient: marked with classify.Retry or classify.RetryAfter,
	// cause not recognised as a specific driver condition.
	ReasonTransient = "TRANSIENT"
	// ReasonDeadlock: PostgreSQL 40P01, MySQL/MariaDB 1213, Oracle ORA-00060.
	ReasonDeadlock = "DEADLOCK"
	// ReasonSerializationFailure: PostgreSQL 40001, Oracle ORA-08177.
	ReasonSerializationFailure = "SERIALIZATION_FAILURE"
	// ReasonLockTimeout: PostgreSQL 55P03, MySQL/MariaDB 1205, Oracle ORA-00054.
	ReasonLockTimeout = "LOCK_TIMEOUT"
	// ReasonDBBusy: SQLite SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their
	// extended codes.
	ReasonDBBusy = "DB_BUSY"
	// ReasonConnection: the connection failed or was lost (PostgreSQL class
	// 08 and 57P01..57P03, MySQL/MariaDB 2006, 2013, 1927, driver.ErrBadConn,
	// Oracle ORA-03113, ORA-03114, ORA-12541, ORA-12170, connection
	// refused/reset/aborted, broken pipe, any *net.OpError).
	ReasonConnection = "CONNECTION"
	// ReasonInsufficientResources: PostgreSQL class 53, MySQL/MariaDB 1040.
	ReasonInsufficientResources = "INSUFFICIENT_RESOURCES"
	// ReasonTimeout: a net.Error whose Timeout() is true, or
	// context.DeadlineExceeded.
	ReasonTimeout = "TIMEOUT"
)

// Decision is what an error says should happen to the message that caused it.
type Decision struct {
	// Class of the failure.
	Class Class
	// Reason is a short upper-case reason code (CUSTOMER_UNKNOWN,
	// MALFORMED_PAYLOAD). Empty for plain technical errors.
	Reason string
	// RetryAfter is a hint for the redelivery delay of a technical failure;
	// zero means the retry policy's (RetryPolicy.Redelivery).
	RetryAfter time.Duration
	// NoAttempt marks a technical failure that must not count towards the
	// backout threshold (an open circuit breaker: the downstream is down, the
	// message is fine).
	NoAttempt bool
}

// Decider is implemented by errors that carry a Decision. The classify
// package's errors implement it; any error type may.
type Decider interface {
	error
	InboxDecision() Decision
}

// DecisionOf returns the Decision of the first error in err's chain that
// implements Decider, or a plain technical decision when none does (unknown
// errors are retried: the safe default). DecisionOf(nil) is the zero Decision.
func DecisionOf(err error) Decision {
	if err == nil {
		return Decision{}
	}
	var d Decider
	if errors.As(err, &d) {
		dec := d.InboxDecision()
		if dec.Class == "" {
			dec.Class = ClassTechnical
		}
		return dec
	}
	return Decision{Class: ClassTechnical}
}

// Outcome is what became of one delivery.
type Outcome string

// Outcomes of processing one delivery.
const (
	// OutcomeProcessed: the handler committed with the inbox row. Acknowledge.
	OutcomeProcessed Outcome = "PROCESSED"
	// OutcomeDuplicate: the event's row is terminal (PROCESSED, REJECTED or
	// DEAD_LETTERED): it was handled before; nothing was done. Acknowledge.
	OutcomeDuplicate Outcome = "DUPLICATE"
	// OutcomeRejected: a business rejection was recorded. Acknowledge; never retry.
	OutcomeRejected Outcome = "REJECTED"
	// OutcomeRetry: a technical failure was recorded. Hand the message back
	// for redelivery.
	OutcomeRetry Outcome = "RETRY"
	// OutcomeDeadLetter: the message must go to the dead-letter destination
	// (poison, or the backout threshold was reached). Publish it, mark the
	// row, then acknowledge.
	OutcomeDeadLetter Outcome = "DEAD_LETTER"
	// OutcomeStored: the store-then-process receiver stored the message as
	// RECEIVED, or the transactional path found the event stored as a
	// RECEIVED or IN_PROGRESS entry already. Acknowledge; a worker
	// processes it.
	OutcomeStored Outcome = "STORED"
)

// Action is what the consumer runtime told the broker about one delivery.
// It follows the Outcome, except where the runtime itself failed: a
// dead-letter or rejection publish, or the inbox, that failed hands the
// delivery back (ActionRequeue, whatever the Outcome), and a redelivered
// duplicate of a rejection is published to the reject queue again
// (ActionReject with OutcomeDuplicate). Its values are the "action" label of
// logs and metrics.
type Action string

// Actions of the consumer runtime.
const (
	// ActionAck: acknowledged (processed, stored or duplicate).
	ActionAck Action = "ack"
	// ActionRequeue: handed back to the broker for redelivery.
	ActionRequeue Action = "requeue"
	// ActionReject: acknowledged after a business rejection (and published
	// to the reject queue when there is one).
	ActionReject Action = "reject"
	// ActionDeadLetter: published to the dead-letter queue, then acknowledged.
	ActionDeadLetter Action = "dead-letter"
)
