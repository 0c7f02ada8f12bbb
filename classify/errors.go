package classify

import (
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
)

var transientReasons = map[string]bool{
	inboxkit.ReasonTransient:             true,
	inboxkit.ReasonDeadlock:              true,
	inboxkit.ReasonSerializationFailure:  true,
	inboxkit.ReasonLockTimeout:           true,
	inboxkit.ReasonDBBusy:                true,
	inboxkit.ReasonConnection:            true,
	inboxkit.ReasonInsufficientResources: true,
	inboxkit.ReasonTimeout:               true,
}

// IsTransientReason reports whether code is one of the transient reason
// codes (inboxkit.ReasonTransient, inboxkit.ReasonDeadlock, ...).
func IsTransientReason(code string) bool { return transientReasons[code] }

// Error is an error that carries a [inboxkit.Decision]. [Reject], [Poison],
// [Retry], [RetryAfter] and an open classify/breaker.Breaker return it. Read it with
// errors.As, or read the decision with [Of] or [inboxkit.DecisionOf].
//
// When errors are nested, the outermost decision wins:
// Reject("X", Retry(err)) is a business rejection.
type Error struct {
	// Decision is what should happen to the message.
	Decision inboxkit.Decision
	// Err is the wrapped cause; it may be nil.
	Err error
}

// Error returns the class, the reason and the cause, for example
// "rejected CUSTOMER_UNKNOWN: customer 42 not found".
func (e *Error) Error() string {
	var s string
	switch e.Decision.Class {
	case inboxkit.ClassBusiness:
		s = "rejected " + e.Decision.Reason
	case inboxkit.ClassPoison:
		s = "poison " + e.Decision.Reason
	default:
		s = "technical"
		if IsTransientReason(e.Decision.Reason) {
			s = "transient"
		}
		if e.Decision.Reason != "" && e.Decision.Reason != inboxkit.ReasonTransient {
			s += " " + e.Decision.Reason
		}
		if e.Decision.RetryAfter > 0 {
			s += fmt.Sprintf(" (retry after %s)", e.Decision.RetryAfter)
		}
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// InboxDecision implements [inboxkit.Decider].
func (e *Error) InboxDecision() inboxkit.Decision { return e.Decision }

// Reject marks err as a business rejection: the message is valid but the
// business says no. The inbox records REJECTED with code; the message is
// acknowledged and never retried. code is normalised with [NormalizeCode];
// an empty result becomes inboxkit.ReasonRejected. err may be nil; Reject always
// returns a non-nil error.
func Reject(code string, err error) error {
	return &Error{Decision: inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: codeOr(code, inboxkit.ReasonRejected)}, Err: err}
}

// Poison marks err as a permanent technical failure: the message can never
// be processed (undecodable payload, missing or over-long event id). It goes
// to the dead-letter queue at once, without retries. code is normalised with
// [NormalizeCode]; an empty result becomes inboxkit.ReasonPoison. err may be nil; Poison
// always returns a non-nil error.
func Poison(code string, err error) error {
	return &Error{Decision: inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: codeOr(code, inboxkit.ReasonPoison)}, Err: err}
}

// Retry marks err as transient: [Do] retries it in process, and the
// message is redelivered up to the backout threshold. The reason is the
// transient reason detected in err (DEADLOCK, CONNECTION, ...) or
// inboxkit.ReasonTransient. err may be nil; Retry always returns a non-nil error.
func Retry(err error) error {
	return RetryAfter(0, err)
}

// RetryAfter is [Retry] with a hint: wait at least d before the next attempt
// (in process and, where the broker allows it, for the redelivery). A d of
// zero or less means no hint.
func RetryAfter(d time.Duration, err error) error {
	if d < 0 {
		d = 0
	}
	reason := inboxkit.ReasonTransient
	if r := driverReason(err); IsTransientReason(r) {
		reason = r
	}
	return &Error{Decision: inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: reason, RetryAfter: d}, Err: err}
}

// MaxCodeLen is the maximum length of a reason code (the REASON_CODE column).
const MaxCodeLen = 80

// ValidCode reports whether code matches ^[A-Z][A-Z0-9_]{0,79}$.
func ValidCode(code string) bool {
	if code == "" || len(code) > MaxCodeLen || code[0] < 'A' || code[0] > 'Z' {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// NormalizeCode turns code into a valid reason code instead of failing: a
// valid code is returned unchanged; otherwise ASCII letters are upper-cased,
// every other byte outside [A-Z0-9_] becomes '_', surrounding '_' are trimmed,
// a code that does not start with a letter gets the prefix "CODE_", and the
// result is cut to 80 bytes. "customer-unknown" becomes "CUSTOMER_UNKNOWN",
// "404" becomes "CODE_404". A code with nothing usable in it (empty, blanks
// only) becomes "".
func NormalizeCode(code string) string {
	if ValidCode(code) {
		return code
	}
	b := []byte(code)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		default:
			b[i] = '_'
		}
	}
	s := trimUnderscores(string(b))
	if s == "" {
		return ""
	}
	if s[0] < 'A' || s[0] > 'Z' {
		s = "CODE_" + s
	}
	if len(s) > MaxCodeLen {
		s = s[:MaxCodeLen]
	}
	return s
}

func trimUnderscores(s string) string {
	for len(s) > 0 && s[0] == '_' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] == '_' {
		s = s[:len(s)-1]
	}
	return s
}

func codeOr(code, def string) string {
	if c := NormalizeCode(code); c != "" {
		return c
	}
	return def
}
