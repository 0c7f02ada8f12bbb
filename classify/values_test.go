package classify

import (
	"errors"
	"fmt"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dberr"
)

// TestValueOrOutage is the split of issue 23, item 3, on the codes of all
// four dialects: a value the database refuses is the message's fault
// (ValueReason names it, poison), an error of availability is an outage
// (Unavailable, never a value reason).
func TestValueOrOutage(t *testing.T) {
	t.Parallel()
	pg := func(s string) dberr.Code { return dberr.Code{Database: dberr.Postgres, SQLState: s} }
	my := func(n int, msg string) dberr.Code { return dberr.Code{Database: dberr.MySQL, Number: n, Message: msg} }
	lite := func(n int) dberr.Code { return dberr.Code{Database: dberr.SQLite, Number: n} }
	values := []struct {
		name string
		code dberr.Code
		want string
	}{
		{"postgres 22021 invalid byte sequence", pg("22021"), inboxkit.ReasonInvalidEncoding},
		{"postgres 22P05 untranslatable character", pg("22P05"), inboxkit.ReasonInvalidEncoding},
		{"postgres 22001 value too long", pg("22001"), inboxkit.ReasonValueTooLong},
		{"postgres 22P02 invalid text representation", pg("22P02"), inboxkit.ReasonInvalidValue},
		{"postgres 22007 invalid datetime", pg("22007"), inboxkit.ReasonInvalidValue},
		{"mysql 1366 incorrect string value", my(1366, "Incorrect string value: '\\xF0\\x9F' for column 'CORRELATION_ID'"), inboxkit.ReasonInvalidEncoding},
		{"mysql 1366 incorrect integer value", my(1366, "Incorrect integer value: 'x' for column 'ATTEMPTS'"), inboxkit.ReasonInvalidValue},
		{"mysql 1300 invalid character string", my(1300, "Invalid utf8mb4 character string"), inboxkit.ReasonInvalidEncoding},
		{"mysql 1406 data too long", my(1406, "Data too long for column 'CORRELATION_ID' at row 1"), inboxkit.ReasonValueTooLong},
		{"mysql 1265 data truncated", my(1265, "Data truncated for column 'STATUS'"), inboxkit.ReasonValueTooLong},
		{"mysql 1292 incorrect datetime", my(1292, "Incorrect datetime value"), inboxkit.ReasonInvalidValue},
		{"sqlite 18 SQLITE_TOOBIG", lite(18), inboxkit.ReasonValueTooLong},
		{"sqlite 20 SQLITE_MISMATCH", lite(20), inboxkit.ReasonInvalidValue},
	}
	for _, tt := range values {
		if got := valueReason(tt.code); got != tt.want {
			t.Errorf("%s: value reason %q, want %q", tt.name, got, tt.want)
		}
		if unavailableCode(tt.code) {
			t.Errorf("%s: a refused value is no outage", tt.name)
		}
	}
	outages := []struct {
		name string
		code dberr.Code
	}{
		{"postgres 08006 connection failure", pg("08006")},
		{"postgres 08001 cannot establish connection", pg("08001")},
		{"postgres 53300 too many connections", pg("53300")},
		{"postgres 57P01 admin shutdown", pg("57P01")},
		{"postgres 57P03 cannot connect now", pg("57P03")},
		{"postgres 25006 read-only transaction", pg("25006")},
		{"mysql 1040 too many connections", my(1040, "Too many connections")},
		{"mysql 2013 lost connection", my(2013, "Lost connection to MySQL server during query")},
		{"mysql 1927 connection killed", my(1927, "Connection was killed")},
		{"mysql 1290 read-only", my(1290, "The MariaDB server is running with the --read-only option")},
		{"mysql 1053 server shutdown", my(1053, "Server shutdown in progress")},
		{"sqlite 5 SQLITE_BUSY", lite(5)},
		{"sqlite 517 SQLITE_BUSY_SNAPSHOT", lite(517)},
		{"sqlite 8 SQLITE_READONLY", lite(8)},
		{"sqlite 10 SQLITE_IOERR", lite(10)},
		{"sqlite 14 SQLITE_CANTOPEN", lite(14)},
	}
	for _, tt := range outages {
		if got := valueReason(tt.code); got != "" {
			t.Errorf("%s: value reason %q, want none (an outage)", tt.name, got)
		}
		if !unavailableCode(tt.code) {
			t.Errorf("%s: not an outage", tt.name)
		}
	}
	// Oracle: the code in the error text, whatever the driver.
	ora := func(s string) error { return fmt.Errorf("insert: %w", errors.New(s)) }
	for _, tt := range []struct {
		err  error
		want string
	}{
		{ora("ORA-12899: value too large for column \"INBOX\".\"CORRELATION_ID\" (actual: 130, maximum: 120)"), inboxkit.ReasonValueTooLong},
		{ora("ORA-01401: inserted value too large for column"), inboxkit.ReasonValueTooLong},
		{ora("ORA-29275: partial multibyte character"), inboxkit.ReasonInvalidEncoding},
		{ora("ORA-01722: invalid number"), inboxkit.ReasonInvalidValue},
	} {
		if got := ValueReason(tt.err); got != tt.want || Unavailable(tt.err) {
			t.Errorf("%v: value reason %q (unavailable %v), want %q", tt.err, got, Unavailable(tt.err), tt.want)
		}
	}
	for _, err := range []error{
		ora("ORA-03113: end-of-file on communication channel"), ora("ORA-12541: TNS:no listener"),
		ora("ORA-00018: maximum number of sessions exceeded"), ora("ORA-01033: ORACLE initialization or shutdown in progress"),
		ora("ORA-16000: database or pluggable database open for read-only access"),
	} {
		if ValueReason(err) != "" || !Unavailable(err) {
			t.Errorf("%v: value reason %q, unavailable %v; want an outage", err, ValueReason(err), Unavailable(err))
		}
	}
}
