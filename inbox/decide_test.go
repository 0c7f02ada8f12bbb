package inbox

import (
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
)

// TestDecide is the decision table of both engines, without a database.
func TestDecide(t *testing.T) {
	t.Parallel()
	const (
		tf  = inboxkit.StatusTechnicalFailure
		dl  = inboxkit.StatusDeadLettered
		max = 3
	)
	var (
		ok        = inboxkit.Decision{}
		technical = inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: "DEADLOCK", RetryAfter: time.Second}
		breaker   = inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: "CIRCUIT_OPEN", NoAttempt: true}
		business  = inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}
		unnamed   = inboxkit.Decision{Class: inboxkit.ClassBusiness}
		poison    = inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: "MALFORMED_PAYLOAD"}
		odd       = inboxkit.Decision{Class: "SOMETHING_ELSE", Reason: "X"}
	)
	unknown := verdict{Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonUnknownStatus}
	exhausted := verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonMaxAttemptsExceeded}
	tests := []struct {
		name string
		in   facts
		want verdict
	}{
		// Before the handler.
		{"no row yet", facts{}, verdict{Run: true}},
		{"claimed by a worker", facts{Attempts: 2}, verdict{Run: true}},
		{"failed before, attempts left", facts{Found: tf, Attempts: 2}, verdict{Run: true}},
		{"processed: duplicate", facts{Found: inboxkit.StatusProcessed, Attempts: 1}, verdict{Outcome: inboxkit.OutcomeDuplicate}},
		{"rejected: duplicate", facts{Found: inboxkit.StatusRejected, Attempts: 1}, verdict{Outcome: inboxkit.OutcomeDuplicate}},
		{"dead-lettered: duplicate", facts{Found: dl, Attempts: max}, verdict{Outcome: inboxkit.OutcomeDuplicate}},
		{"stored for a worker: stored", facts{Found: inboxkit.StatusReceived}, verdict{Outcome: inboxkit.OutcomeStored}},
		{"leased by a worker: stored", facts{Found: inboxkit.StatusInProgress, Attempts: 1}, verdict{Outcome: inboxkit.OutcomeStored}},
		// Issue 23.1: a status the machine does not know is no duplicate.
		{"legacy FAILED: unknown", facts{Found: "FAILED", Attempts: 1}, unknown},
		{"lower-case processed: unknown", facts{Found: "processed", Attempts: 1}, unknown},
		{"legacy IN_PROGRESS (no payload, no lease): unknown", facts{Found: inboxkit.StatusInProgress, Orphan: true, Attempts: 1}, unknown},
		{"legacy RECEIVED (no payload): unknown", facts{Found: inboxkit.StatusReceived, Orphan: true}, unknown},
		{"unknown past the threshold: still unknown", facts{Found: "FAILED", Attempts: max}, unknown},
		{"threshold reached without an outcome", facts{Found: tf, Attempts: max}, exhausted},
		{"worker claim past the threshold", facts{Attempts: max}, exhausted},
		{"threshold before poison found", facts{Attempts: max, Decision: poison}, exhausted},
		{"no event id", facts{Decision: inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMissingEventID}},
			verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMissingEventID}},
		{"stored headers do not decode", facts{Attempts: 1, Decision: inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMalformedHeaders}},
			verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMalformedHeaders}},

		// After the handler.
		{"handler ok", facts{Ran: true, Decision: ok, Attempts: 1}, verdict{Row: inboxkit.StatusProcessed, Outcome: inboxkit.OutcomeProcessed}},
		{"handler ok at the last attempt", facts{Ran: true, Decision: ok, Attempts: max}, verdict{Row: inboxkit.StatusProcessed, Outcome: inboxkit.OutcomeProcessed}},
		{"business rejection", facts{Ran: true, Decision: business, Attempts: 1},
			verdict{Row: inboxkit.StatusRejected, Outcome: inboxkit.OutcomeRejected, Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}},
		{"business rejection without reason", facts{Ran: true, Decision: unnamed, Attempts: 1},
			verdict{Row: inboxkit.StatusRejected, Outcome: inboxkit.OutcomeRejected, Class: inboxkit.ClassBusiness, Reason: inboxkit.ReasonRejected}},
		{"business rejection at the last attempt", facts{Ran: true, Decision: business, Attempts: max},
			verdict{Row: inboxkit.StatusRejected, Outcome: inboxkit.OutcomeRejected, Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}},
		{"poison", facts{Ran: true, Decision: poison, Attempts: 1},
			verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassPoison, Reason: "MALFORMED_PAYLOAD"}},
		{"technical, attempts left", facts{Ran: true, Decision: technical, Attempts: max - 1},
			verdict{Row: tf, Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical, Reason: "DEADLOCK", RetryAfter: time.Second}},
		{"technical at the threshold", facts{Ran: true, Decision: technical, Attempts: max},
			verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonMaxAttemptsExceeded, RetryAfter: time.Second}},
		{"technical past the threshold (racing markers)", facts{Ran: true, Decision: technical, Attempts: max + 2},
			verdict{Row: dl, Outcome: inboxkit.OutcomeDeadLetter, Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonMaxAttemptsExceeded, RetryAfter: time.Second}},
		{"no-attempt failure at the threshold is not counted", facts{Ran: true, Decision: breaker, Attempts: max},
			verdict{Row: tf, Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical, Reason: "CIRCUIT_OPEN", Uncount: true}},
		{"unknown class is technical", facts{Ran: true, Decision: odd, Attempts: 1},
			verdict{Row: tf, Outcome: inboxkit.OutcomeRetry, Class: inboxkit.ClassTechnical, Reason: "X"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.MaxAttempts = max
			if got := decide(in); got != tt.want {
				t.Errorf("decide(%+v)\n got  %+v\n want %+v", in, got, tt.want)
			}
		})
	}
}
