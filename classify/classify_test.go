package classify_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	_ "github.com/inboxkit/inboxkit/driver/mysql" // MySQL errors are read only with it (TestOfDriverCodes)
)

var errCause = errors.New("customer 42 not found")

func TestConstructors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want inboxkit.Decision
		msg  string
	}{
		{"reject", classify.Reject("CUSTOMER_UNKNOWN", errCause),
			inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}, "rejected CUSTOMER_UNKNOWN: customer 42 not found"},
		{"reject nil cause", classify.Reject("CUSTOMER_UNKNOWN", nil),
			inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}, "rejected CUSTOMER_UNKNOWN"},
		{"reject normalised code", classify.Reject("customer-unknown", errCause),
			inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "CUSTOMER_UNKNOWN"}, "rejected CUSTOMER_UNKNOWN: customer 42 not found"},
		{"reject empty code", classify.Reject("  ", errCause),
			inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: inboxkit.ReasonRejected}, "rejected REJECTED: customer 42 not found"},
		{"poison", classify.Poison(inboxkit.ReasonMalformedPayload, io.ErrUnexpectedEOF),
			inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: "MALFORMED_PAYLOAD"}, "poison MALFORMED_PAYLOAD: unexpected EOF"},
		{"poison empty code", classify.Poison("", nil),
			inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonPoison}, "poison POISON"},
		{"retry", classify.Retry(errCause),
			inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonTransient}, "transient: customer 42 not found"},
		{"retry keeps driver reason", classify.Retry(&pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"}),
			inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonDeadlock}, "transient DEADLOCK: ERROR: deadlock detected (SQLSTATE 40P01)"},
		{"retry after", classify.RetryAfter(2*time.Second, errCause),
			inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonTransient, RetryAfter: 2 * time.Second}, "transient (retry after 2s): customer 42 not found"},
		{"retry after negative", classify.RetryAfter(-time.Second, nil),
			inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonTransient}, "transient"},
		{"outermost wins", classify.Reject("NO", classify.Retry(errCause)),
			inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: "NO"}, "rejected NO: transient: customer 42 not found"},
		{"wrapped with %w", fmt.Errorf("handle invoice: %w", classify.Poison(inboxkit.ReasonMissingField, nil)),
			inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: "MISSING_FIELD"}, "handle invoice: poison MISSING_FIELD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify.Of(tt.err); got != tt.want {
				t.Errorf("Of = %+v, want %+v", got, tt.want)
			}
			if got := inboxkit.DecisionOf(tt.err); got != tt.want {
				t.Errorf("inboxkit.DecisionOf = %+v, want %+v", got, tt.want)
			}
			if got := tt.err.Error(); got != tt.msg {
				t.Errorf("Error() = %q, want %q", got, tt.msg)
			}
			var ce *classify.Error
			if !errors.As(tt.err, &ce) {
				t.Error("errors.As(*classify.Error) = false")
			}
		})
	}
}

func TestUnwrap(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		classify.Reject("X", errCause), classify.Poison("X", errCause),
		classify.Retry(errCause), classify.RetryAfter(time.Second, errCause),
	} {
		if !errors.Is(err, errCause) {
			t.Errorf("errors.Is(%v, cause) = false", err)
		}
		if errors.Unwrap(err) != errCause {
			t.Errorf("Unwrap(%v) is not the cause", err)
		}
	}
	var pe *pgconn.PgError
	if !errors.As(classify.Retry(fmt.Errorf("x: %w", &pgconn.PgError{Code: "40001"})), &pe) || pe.Code != "40001" {
		t.Error("errors.As does not reach the driver error")
	}
}

func TestNormalizeCode(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("A", 100)
	tests := []struct{ in, want string }{
		{"CUSTOMER_UNKNOWN", "CUSTOMER_UNKNOWN"},
		{"A", "A"},
		{"customer unknown", "CUSTOMER_UNKNOWN"},
		{"customer-unknown!", "CUSTOMER_UNKNOWN"},
		{"_leading", "LEADING"},
		{"404", "CODE_404"},
		{"x.y.z", "X_Y_Z"},
		{"", ""},
		{" - ", ""},
		{long, long[:80]},
		{"Größe", "GR____E"},
	}
	for _, tt := range tests {
		got := classify.NormalizeCode(tt.in)
		if got != tt.want {
			t.Errorf("NormalizeCode(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got != "" && !classify.ValidCode(got) {
			t.Errorf("NormalizeCode(%q) = %q is not valid", tt.in, got)
		}
	}
	for _, c := range []string{"", "a", "1A", "A-B", "A B", long[:81]} {
		if classify.ValidCode(c) {
			t.Errorf("ValidCode(%q) = true", c)
		}
	}
	if !classify.ValidCode(long[:80]) {
		t.Error("ValidCode(80 x A) = false")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestOfDriverCodes covers the detection tables with driver error values.
// modernc's *sqlite.Error has no exported constructor, so SQLite codes are
// covered by the real-database tests only.
func TestOfDriverCodes(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	my := func(n uint16) error { return &mysql.MySQLError{Number: n, Message: "m"} }
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{"pg 08006 connection failure", pg("08006"), inboxkit.ReasonConnection},
		{"pg 08001", pg("08001"), inboxkit.ReasonConnection},
		{"pg 40001", pg("40001"), inboxkit.ReasonSerializationFailure},
		{"pg 40P01", pg("40P01"), inboxkit.ReasonDeadlock},
		{"pg 53300 too many connections", pg("53300"), inboxkit.ReasonInsufficientResources},
		{"pg 53100 disk full", pg("53100"), inboxkit.ReasonInsufficientResources},
		{"pg 57P01 admin shutdown", pg("57P01"), inboxkit.ReasonConnection},
		{"pg 55P03 lock not available", pg("55P03"), inboxkit.ReasonLockTimeout},
		{"pg 23505 unique", pg("23505"), inboxkit.ReasonConstraintViolation},
		{"pg 23503 foreign key", pg("23503"), inboxkit.ReasonConstraintViolation},
		{"pg 42601 syntax", pg("42601"), ""},
		{"pg 40002 other class 40", pg("40002"), ""},
		{"mysql 1205", my(1205), inboxkit.ReasonLockTimeout},
		{"mysql 1213", my(1213), inboxkit.ReasonDeadlock},
		{"mysql 2006", my(2006), inboxkit.ReasonConnection},
		{"mysql 2013", my(2013), inboxkit.ReasonConnection},
		{"mysql 1040", my(1040), inboxkit.ReasonInsufficientResources},
		{"mysql 1062", my(1062), inboxkit.ReasonConstraintViolation},
		{"mysql 1452", my(1452), inboxkit.ReasonConstraintViolation},
		{"mysql 1064 syntax", my(1064), ""},
		{"mysql ErrInvalidConn", mysql.ErrInvalidConn, inboxkit.ReasonConnection},
		{"driver.ErrBadConn", driver.ErrBadConn, inboxkit.ReasonConnection},
		{"ORA-00060", errors.New("ORA-00060: deadlock detected while waiting for resource"), inboxkit.ReasonDeadlock},
		{"ORA-03113", errors.New("ORA-03113: end-of-file on communication channel"), inboxkit.ReasonConnection},
		{"ORA-03114", errors.New("ORA-03114: not connected to ORACLE"), inboxkit.ReasonConnection},
		{"ORA-12541", errors.New("ORA-12541: TNS:no listener"), inboxkit.ReasonConnection},
		{"ORA-12170", errors.New("ORA-12170: TNS:Connect timeout occurred"), inboxkit.ReasonConnection},
		{"ORA stack, real code second", errors.New("ORA-06512: at line 3\nORA-00060: deadlock detected"), inboxkit.ReasonDeadlock},
		{"ORA-00001", errors.New("ORA-00001: unique constraint (X.PK) violated"), inboxkit.ReasonConstraintViolation},
		{"ORA-00942 unknown", errors.New("ORA-00942: table or view does not exist"), ""},
		{"ECONNREFUSED", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), inboxkit.ReasonConnection},
		{"ECONNRESET", &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}, inboxkit.ReasonConnection},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), inboxkit.ReasonConnection},
		{"net timeout", fmt.Errorf("read: %w", timeoutErr{}), inboxkit.ReasonTimeout},
		{"deadline exceeded", fmt.Errorf("query: %w", context.DeadlineExceeded), inboxkit.ReasonTimeout},
		{"canceled", context.Canceled, ""},
		{"unknown", errors.New("boom"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: tt.reason}
			if got := classify.Of(tt.err); got != want {
				t.Errorf("Of = %+v, want %+v", got, want)
			}
			wantTransient := tt.reason != "" && tt.reason != inboxkit.ReasonConstraintViolation
			if got := classify.IsTransient(tt.err); got != wantTransient {
				t.Errorf("IsTransient = %v, want %v", got, wantTransient)
			}
		})
	}
}

func TestOfNilAndDeciders(t *testing.T) {
	t.Parallel()
	if got := classify.Of(nil); got != (inboxkit.Decision{}) {
		t.Errorf("Of(nil) = %+v", got)
	}
	// A Reject wrapping a transient driver error is a rejection, not transient.
	err := classify.Reject("DUPLICATE_INVOICE", &pgconn.PgError{Code: "40P01"})
	if classify.IsTransient(err) {
		t.Error("IsTransient(Reject(deadlock)) = true")
	}
	if classify.IsTransient(classify.Poison("X", syscall.ECONNREFUSED)) {
		t.Error("IsTransient(Poison(refused)) = true")
	}
	if !classify.IsTransient(classify.Retry(nil)) {
		t.Error("IsTransient(Retry(nil)) = false")
	}
}

// ValueReason and Unavailable read the drivers' own error values, wrapped
// as package inbox wraps them (the table of every dialect's codes is
// TestValueOrOutage).
func TestValueReasonOfDriverErrors(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("inbox: start attempt: %w", err) }
	pg := func(code string) error { return wrap(&pgconn.PgError{Code: code, Message: "m"}) }
	my := func(n uint16, msg string) error { return wrap(&mysql.MySQLError{Number: n, Message: msg}) }
	for _, tt := range []struct {
		err  error
		want string
	}{
		{pg("22021"), inboxkit.ReasonInvalidEncoding},
		{pg("22001"), inboxkit.ReasonValueTooLong},
		{my(1366, "Incorrect string value: '\\xFF' for column 'CORRELATION_ID' at row 1"), inboxkit.ReasonInvalidEncoding},
		{my(1406, "Data too long for column 'CORRELATION_ID' at row 1"), inboxkit.ReasonValueTooLong},
	} {
		if got := classify.ValueReason(tt.err); got != tt.want || classify.Unavailable(tt.err) {
			t.Errorf("%v: ValueReason %q, Unavailable %v; want %q, false", tt.err, got, classify.Unavailable(tt.err), tt.want)
		}
	}
	for _, err := range []error{pg("57P01"), pg("08006"), pg("25006"), my(2013, "Lost connection"), my(1040, "Too many connections"),
		wrap(mysql.ErrInvalidConn), wrap(driver.ErrBadConn), wrap(syscall.ECONNREFUSED), wrap(context.DeadlineExceeded)} {
		if classify.ValueReason(err) != "" || !classify.Unavailable(err) {
			t.Errorf("%v: ValueReason %q, Unavailable %v; want an outage", err, classify.ValueReason(err), classify.Unavailable(err))
		}
	}
	for _, err := range []error{pg("42P01"), my(1064, "syntax"), errors.New("boom")} {
		if classify.ValueReason(err) != "" || classify.Unavailable(err) {
			t.Errorf("%v: neither a value nor an outage", err)
		}
	}
}
