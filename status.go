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
// PROCESSED, REJECTED or DEAD_LETTERED.
func (s Status) Terminal() bool {
	return s == StatusProcessed || s == StatusRejected || s == StatusDeadLettered
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

// Decision is what an error says should happen to the message that caused it.
type Decision struct {
	// Class of the failure.
	Class Class
	// Reason is a short upper-case reason code (CUSTOMER_UNKNOWN,
	// MALFORMED_PAYLOAD). Empty for plain technical errors.
	Reason string
	// RetryAfter is a hint for the redelivery delay of a technical failure;
	// zero means the consumer's default.
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
	// OutcomeDuplicate: the event was seen before; nothing was done.
	// Acknowledge (unless the row found is still being processed elsewhere,
	// which changes nothing either).
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
	// RECEIVED. Acknowledge; a worker processes it.
	OutcomeStored Outcome = "STORED"
)
