// Package classify turns a handler's error into a decision about the message
// that caused it: a business rejection, a technical failure to retry, or
// poison for the dead-letter queue. Legacy message-driven beans throw
// everything into one exception path, so everything is retried and the
// dead-letter queue fills with noise; this package makes the separation
// explicit, and the inbox row records it (STATUS and REASON_CODE).
//
// A handler returns its error wrapped in a decision, like river's JobCancel
// or JetStream's Term/Nak:
//
//	if customer == nil {
//		return classify.Reject("CUSTOMER_UNKNOWN", fmt.Errorf("customer %s", id))
//	}
//
// The inbox and the consumer read the decision with [Of] (or
// [inboxkit.DecisionOf]); both find the first [inboxkit.Decider] in the error
// chain, so wrapping with fmt.Errorf("...: %w", err) keeps it. When wrappers
// are nested, the outermost decision wins.
//
// # Business rejection
//
// [Reject](code, err): the message is valid, the business says no (unknown
// customer, invoice already cancelled). The handler's writes are rolled back,
// the inbox row is committed as REJECTED with the reason code, the message is
// acknowledged and never retried; people clarify the case. Class
// [inboxkit.ClassBusiness].
//
// # Poison
//
// [Poison](code, err): the message can never be processed: undecodable payload
// (MALFORMED_PAYLOAD), a required field missing (MISSING_FIELD), no event id
// (MISSING_EVENT_ID), an event id longer than the EVENT_ID column
// (EVENT_ID_TOO_LONG). It goes to the dead-letter queue at once, without
// retries, and the row becomes DEAD_LETTERED with the code. Class
// [inboxkit.ClassPoison].
//
// # Technical failure
//
// Everything else is technical ([inboxkit.ClassTechnical]): the row becomes
// TECHNICAL_FAILURE, ATTEMPTS is raised, the message is handed back for
// redelivery, and after [inboxkit.RetryPolicy].MaxAttempts failures (default 5) it is
// dead-lettered with MAX_ATTEMPTS_EXCEEDED. Unknown errors are technical with
// an empty reason: the safe default, since retrying a message whose failure is
// not understood loses nothing.
//
// Transient technical failures are worth retrying soon, in process, before
// the message is handed back: errors marked with [Retry] or [RetryAfter], and
// driver errors that [IsTransient] recognises:
//
//	reason                  detected from
//	DEADLOCK                PostgreSQL 40P01, MySQL/MariaDB 1213, ORA-00060
//	SERIALIZATION_FAILURE   PostgreSQL 40001, ORA-08177
//	LOCK_TIMEOUT            PostgreSQL 55P03, MySQL/MariaDB 1205, ORA-00054
//	DB_BUSY                 SQLite SQLITE_BUSY (5), SQLITE_LOCKED (6) and their extended codes
//	CONNECTION              PostgreSQL class 08, 57P01-57P03; MySQL/MariaDB 2006, 2013, 1927;
//	                        driver.ErrBadConn, mysql's ErrInvalidConn; ORA-03113, ORA-03114,
//	                        ORA-12541, ORA-12170; ECONNREFUSED, ECONNRESET, ECONNABORTED,
//	                        EPIPE; any *net.OpError
//	INSUFFICIENT_RESOURCES  PostgreSQL class 53, MySQL/MariaDB 1040
//	TIMEOUT                 a net.Error with Timeout(), context.DeadlineExceeded
//	TRANSIENT               Retry/RetryAfter of an error not recognised above
//
// This package links no database driver; it reads the codes through package
// dberr. PostgreSQL errors are read through their SQLState() method and
// SQLite's (modernc.org/sqlite) through their Code() method, so importing the
// driver is enough. Oracle errors are recognised by the ORA-nnnnn code in the
// error text, so any Oracle driver works. MySQL/MariaDB errors (numbers, and
// the driver's ErrInvalidConn, read as 2013) are recognised only when the
// program imports _ "github.com/inboxkit/inboxkit/driver/mysql"; inbox.New
// refuses the MySQL dialect without it.
//
// A constraint violation (PostgreSQL class 23, MySQL/MariaDB 1062 and
// friends, SQLite SQLITE_CONSTRAINT, ORA-00001) is reported with reason
// CONSTRAINT_VIOLATION and is NOT transient: retrying at once gives the same
// answer. It stays a plain technical failure, retried by redelivery up to the
// backout threshold and then dead-lettered, because the database cannot tell
// a bug from a case for the business; a handler that knows it is a business
// case wraps it with [Reject]. (The inbox's own duplicate detection is a
// different matter: the inbox store handles its primary key itself.)
//
// # Retries in process
//
// [Do] runs a function and retries it with exponential backoff and jitter
// while it fails transiently, as the toolkit's one retry policy says
// ([inboxkit.RetryPolicy]: InProcessRetries retries, InProcess waits, none
// after InProcessMaxTime; set on the inbox store, so the consumer runtime
// retries as configured there), and stops when its context is done.
// Rejections, poison, unknown errors and constraint violations are returned
// at once: the redelivery, counted in the database, is the retry for those.
// A classify function passed to Do (the store's ClassifyFunc) overrides the
// decision for errors the defaults get wrong.
//
// # Circuit breaker
//
// The circuit breaker that guards calls to a downstream service, failing
// fast with reason CIRCUIT_OPEN and NoAttempt while the downstream is down,
// is package classify/breaker: apart, so that this package and the inbox
// link no gobreaker.
//
// # Reason codes
//
// Reason codes are short upper-case identifiers, ^[A-Z][A-Z0-9_]{0,79}$,
// stored in REASON_CODE. [Reject] and [Poison] do not panic on a bad code:
// they normalise it with [NormalizeCode] ("customer-unknown" becomes
// CUSTOMER_UNKNOWN) and fall back to REJECTED or POISON when nothing is left.
// The toolkit's own codes are the inboxkit.Reason* constants (defined there
// once for every package); [IsTransientReason] tells the transient ones.
package classify
