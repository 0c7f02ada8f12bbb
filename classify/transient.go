package classify

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"regexp"
	"syscall"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dberr"
)

// Of returns the decision for err: the decision of the first error in err's
// chain that implements [inboxkit.Decider] (as [inboxkit.DecisionOf] does);
// when there is none, a technical decision whose reason is the detected
// driver condition (DEADLOCK, CONNECTION, CONSTRAINT_VIOLATION, ...; see the
// inboxkit.Reason* constants), or an empty reason for an unknown error. Of(nil) is the
// zero Decision.
//
// Of has the signature of the inbox's ClassifyFunc and can be used as one.
func Of(err error) inboxkit.Decision {
	if err == nil {
		return inboxkit.Decision{}
	}
	var d inboxkit.Decider
	if errors.As(err, &d) {
		return inboxkit.DecisionOf(err)
	}
	if ValueReason(err) == inboxkit.ReasonInvalidEncoding {
		// Text the database refuses (PostgreSQL 22021, 22P05; MySQL 1300,
		// 1366 "Incorrect string value"; Oracle ORA-29275): every delivery
		// of the message fails the same way.
		return inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonInvalidEncoding}
	}
	return inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: driverReason(err)}
}

// IsTransient reports whether err is a transient technical failure worth
// retrying soon: its decision (see [Of]) is technical, does not have
// NoAttempt set (an open circuit breaker is not retried in process), and
// carries a transient reason code. Errors wrapped with [Retry] or
// [RetryAfter] are transient; so are the driver conditions listed at the
// inboxkit.Reason* constants. Unknown errors and constraint violations are not.
func IsTransient(err error) bool {
	return transientDecision(Of(err))
}

func transientDecision(d inboxkit.Decision) bool {
	return d.Class == inboxkit.ClassTechnical && !d.NoAttempt && IsTransientReason(d.Reason)
}

// PostgreSQL SQLSTATE codes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
var (
	pgCodes = map[string]string{
		"40001": inboxkit.ReasonSerializationFailure, // serialization_failure
		"40P01": inboxkit.ReasonDeadlock,             // deadlock_detected
		"55P03": inboxkit.ReasonLockTimeout,          // lock_not_available
		"57P01": inboxkit.ReasonConnection,           // admin_shutdown
		"57P02": inboxkit.ReasonConnection,           // crash_shutdown
		"57P03": inboxkit.ReasonConnection,           // cannot_connect_now
	}
	pgClasses = map[string]string{
		"08": inboxkit.ReasonConnection,            // connection exception
		"53": inboxkit.ReasonInsufficientResources, // insufficient resources
		"23": inboxkit.ReasonConstraintViolation,   // integrity constraint violation
	}
)

// MySQL/MariaDB error numbers.
var mysqlNumbers = map[int]string{
	1205: inboxkit.ReasonLockTimeout,           // ER_LOCK_WAIT_TIMEOUT
	1213: inboxkit.ReasonDeadlock,              // ER_LOCK_DEADLOCK
	2006: inboxkit.ReasonConnection,            // CR_SERVER_GONE_ERROR
	2013: inboxkit.ReasonConnection,            // CR_SERVER_LOST
	1927: inboxkit.ReasonConnection,            // ER_CONNECTION_KILLED (MariaDB)
	1040: inboxkit.ReasonInsufficientResources, // ER_CON_COUNT_ERROR (too many connections)
	1048: inboxkit.ReasonConstraintViolation,   // ER_BAD_NULL_ERROR
	1062: inboxkit.ReasonConstraintViolation,   // ER_DUP_ENTRY
	1216: inboxkit.ReasonConstraintViolation,   // ER_NO_REFERENCED_ROW
	1217: inboxkit.ReasonConstraintViolation,   // ER_ROW_IS_REFERENCED
	1451: inboxkit.ReasonConstraintViolation,   // ER_ROW_IS_REFERENCED_2
	1452: inboxkit.ReasonConstraintViolation,   // ER_NO_REFERENCED_ROW_2
	3819: inboxkit.ReasonConstraintViolation,   // ER_CHECK_CONSTRAINT_VIOLATED (MySQL)
	4025: inboxkit.ReasonConstraintViolation,   // ER_CONSTRAINT_FAILED (MariaDB)
}

// SQLite primary result codes (the low byte of an extended code).
var sqliteCodes = map[int]string{
	5:  inboxkit.ReasonDBBusy,              // SQLITE_BUSY
	6:  inboxkit.ReasonDBBusy,              // SQLITE_LOCKED
	19: inboxkit.ReasonConstraintViolation, // SQLITE_CONSTRAINT
}

// Oracle error codes, matched in the error text as ORA-nnnnn.
var oracleCodes = map[string]string{
	"00060": inboxkit.ReasonDeadlock,             // deadlock detected while waiting for resource
	"08177": inboxkit.ReasonSerializationFailure, // can't serialize access for this transaction
	"00054": inboxkit.ReasonLockTimeout,          // resource busy and acquire with NOWAIT specified or timeout expired
	"03113": inboxkit.ReasonConnection,           // end-of-file on communication channel
	"03114": inboxkit.ReasonConnection,           // not connected to ORACLE
	"12541": inboxkit.ReasonConnection,           // TNS:no listener
	"12170": inboxkit.ReasonConnection,           // TNS:Connect timeout occurred
	"00001": inboxkit.ReasonConstraintViolation,  // unique constraint violated
	"02291": inboxkit.ReasonConstraintViolation,  // integrity constraint violated - parent key not found
	"02292": inboxkit.ReasonConstraintViolation,  // integrity constraint violated - child record found
}

var oraPattern = regexp.MustCompile(`ORA-(\d{5})`)

// Connection-level errno values, matched with errors.Is.
var connErrnos = []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE}

// codeReason returns the reason of a database error code, or "".
func codeReason(c dberr.Code) string {
	switch c.Database {
	case dberr.Postgres:
		if r, ok := pgCodes[c.SQLState]; ok {
			return r
		}
		if len(c.SQLState) == 5 {
			return pgClasses[c.SQLState[:2]]
		}
	case dberr.MySQL:
		return mysqlNumbers[c.Number]
	case dberr.SQLite:
		return sqliteCodes[c.Number&0xff]
	}
	return ""
}

// driverReason returns the reason code of the driver or network condition
// found in err's chain, or "" when none is recognised. Database error codes
// (read by package dberr, which links no driver) are checked first, so a
// PostgreSQL 40P01 reports DEADLOCK even when the driver also wrapped a
// network error. MySQL/MariaDB errors are read only when
// github.com/inboxkit/inboxkit/driver/mysql is linked.
func driverReason(err error) string {
	if err == nil {
		return ""
	}
	if c, ok := dberr.Of(err); ok {
		if r := codeReason(c); r != "" {
			return r
		}
	}
	if errors.Is(err, driver.ErrBadConn) {
		return inboxkit.ReasonConnection
	}
	for _, m := range oraPattern.FindAllStringSubmatch(err.Error(), -1) {
		if r, ok := oracleCodes[m[1]]; ok {
			return r
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return inboxkit.ReasonTimeout
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return inboxkit.ReasonTimeout
	}
	for _, e := range connErrnos {
		if errors.Is(err, e) {
			return inboxkit.ReasonConnection
		}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return inboxkit.ReasonConnection
	}
	return ""
}
