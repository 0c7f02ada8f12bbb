package inbox

import (
	"time"

	"github.com/inboxkit/inboxkit"
)

// facts are what the decision table knows about one delivery: the row as
// the delivery found it, the attempts counted, and, once the handler ran,
// the decision of its error. Both engines (the transactional Process and
// ProcessBatch, and the store-then-process Worker) fill them in and do
// what decide says.
type facts struct {
	// Found is the row's status before this delivery's attempt: "" when
	// the delivery holds the row to attempt (a worker's claim) or there is
	// none yet, TECHNICAL_FAILURE for a row a transactional delivery may
	// attempt. Only a terminal status makes the delivery a duplicate;
	// RECEIVED and IN_PROGRESS rows belong to the store-then-process
	// workers (stored: acknowledge), unless Orphan; any other status is
	// unknown (dead letter, UNKNOWN_STATUS, the row left as it is).
	Found inboxkit.Status
	// Orphan is true for a RECEIVED or IN_PROGRESS row that no
	// store-then-process receiver wrote (no payload hash, no lease): a
	// legacy row no worker will ever process, unknown like a status the
	// machine does not know.
	Orphan bool
	// Ran is true once the handler ran; Decision is then its error's
	// (the zero Decision when it returned nil).
	Ran bool
	// Decision classifies the failure. Before the handler, a ClassPoison
	// decision is poison found without running it (no event id, stored
	// headers that do not decode).
	Decision inboxkit.Decision
	// Attempts is the ATTEMPTS column: before the handler, without this
	// delivery; once it ran, counting it.
	Attempts int
	// MaxAttempts is the backout threshold (Config.MaxAttempts).
	MaxAttempts int
}

// verdict is what decide says to do with a delivery.
type verdict struct {
	// Run is true when the handler must run now (before the handler only).
	Run bool
	// Row is what the inbox row becomes: PROCESSED (with the handler's
	// writes), REJECTED (the handler's writes rolled back), TECHNICAL_FAILURE
	// (rolled back; the failure recorded in its own transaction, rule 4) or
	// DEAD_LETTERED (rolled back; marked only after the confirmed publish,
	// rule 3). Empty: the row does not change.
	Row inboxkit.Status
	// Outcome is what the caller tells the broker.
	Outcome inboxkit.Outcome
	// Class and Reason classify a failure; empty when processed.
	Class  inboxkit.Class
	Reason string
	// Uncount is true when this attempt must not count (Decision.NoAttempt).
	Uncount bool
	// RetryAfter is the handler error's redelivery delay hint.
	RetryAfter time.Duration
}

// decide is the decision table of both engines. It is pure: no database,
// no clock.
//
//	before the handler (Ran false):
//	  row found terminal                       -> unchanged, duplicate
//	  row found RECEIVED or IN_PROGRESS        -> unchanged, stored (a worker processes it)
//	  row found in any other status but TECHNICAL_FAILURE, or Orphan
//	                                           -> unchanged, dead letter (TECHNICAL, UNKNOWN_STATUS)
//	  Attempts >= MaxAttempts                  -> DEAD_LETTERED, dead letter (TECHNICAL, MAX_ATTEMPTS_EXCEEDED)
//	  poison found (no event id, bad headers)  -> DEAD_LETTERED, dead letter (POISON, its reason)
//	  otherwise                                -> run the handler
//	after the handler (Ran true):
//	  nil error                                -> PROCESSED, processed
//	  business                                 -> REJECTED, rejected (reason, or REJECTED)
//	  poison                                   -> DEAD_LETTERED, dead letter (POISON, its reason)
//	  technical, Attempts >= MaxAttempts       -> DEAD_LETTERED, dead letter (TECHNICAL, MAX_ATTEMPTS_EXCEEDED)
//	    (never when NoAttempt: such a failure does not count)
//	  technical                                -> TECHNICAL_FAILURE, retry (its reason, RetryAfter, Uncount = NoAttempt)
//
// Any class other than business and poison is technical (the safe default).
func decide(f facts) verdict {
	dec := f.Decision
	exhausted := verdict{Row: inboxkit.StatusDeadLettered, Outcome: inboxkit.OutcomeDeadLetter,
		Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonMaxAttemptsExceeded}
	if !f.Ran {
		switch {
		case f.Found.Terminal():
			return verdict{Outcome: inboxkit.OutcomeDuplicate}
		case (f.Found == inboxkit.StatusReceived || f.Found == inboxkit.StatusInProgress) && !f.Orphan:
			return verdict{Outcome: inboxkit.OutcomeStored}
		case f.Found != "" && f.Found != inboxkit.StatusTechnicalFailure:
			return verdict{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonUnknownStatus}
		case f.Attempts >= f.MaxAttempts:
			return exhausted
		case dec.Class == inboxkit.ClassPoison:
			return verdict{Row: inboxkit.StatusDeadLettered, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: dec.Reason}
		}
		return verdict{Run: true}
	}
	switch dec.Class {
	case "":
		return verdict{Row: inboxkit.StatusProcessed, Outcome: inboxkit.OutcomeProcessed}
	case inboxkit.ClassBusiness:
		reason := dec.Reason
		if reason == "" {
			reason = inboxkit.ReasonRejected
		}
		return verdict{Row: inboxkit.StatusRejected, Outcome: inboxkit.OutcomeRejected, Class: inboxkit.ClassBusiness, Reason: reason}
	case inboxkit.ClassPoison:
		return verdict{Row: inboxkit.StatusDeadLettered, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: dec.Reason}
	}
	if f.Attempts >= f.MaxAttempts && !dec.NoAttempt {
		exhausted.RetryAfter = dec.RetryAfter
		return exhausted
	}
	return verdict{Row: inboxkit.StatusTechnicalFailure, Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical,
		Reason: dec.Reason, Uncount: dec.NoAttempt, RetryAfter: dec.RetryAfter}
}

// result is the Result of a verdict for a row left in status st with the
// given attempts, caused by err.
func (v verdict) result(st inboxkit.Status, attempts int, err error) Result {
	return Result{Outcome: v.Outcome, Status: st, Class: v.Class, Reason: v.Reason, Attempts: attempts, Err: err, RetryAfter: v.RetryAfter}
}

// asTechnical is the decision for an error that is a technical failure
// whatever it says (a commit that failed, a rejection that could not be
// recorded): its reason is kept.
func asTechnical(dec inboxkit.Decision) inboxkit.Decision {
	if dec.Class != inboxkit.ClassTechnical {
		return inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: dec.Reason}
	}
	return dec
}
