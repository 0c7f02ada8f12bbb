package classify

import (
	"strings"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dberr"
)

// ValueReason tells whether err is a database refusing a value of the
// statement (a data exception: text it cannot store, a value too long for
// its column) and names it: inboxkit.ReasonInvalidEncoding,
// ReasonValueTooLong or ReasonInvalidValue. It returns "" for every other
// error, among them those of [Unavailable].
//
// Package inbox reads it on its own statements: when one fails on a
// delivery's values, the message is at fault and is dead-lettered, where
// any other error of the inbox hands the delivery back. Every delivery of
// such a message fails the same way.
//
//	PostgreSQL  class 22 (data exception): 22021, 22P05 INVALID_ENCODING;
//	            22001 VALUE_TOO_LONG; any other INVALID_VALUE
//	MySQL       1300, 1366 "Incorrect string value" INVALID_ENCODING;
//	            1406, 1265 VALUE_TOO_LONG; 1264, 1292, 1366, 1367 INVALID_VALUE
//	SQLite      SQLITE_TOOBIG (18) VALUE_TOO_LONG; SQLITE_MISMATCH (20) INVALID_VALUE
//	Oracle      ORA-29275 INVALID_ENCODING; ORA-12899, ORA-01401, ORA-01461
//	            VALUE_TOO_LONG; ORA-01722, ORA-01858, ORA-01861 INVALID_VALUE
func ValueReason(err error) string {
	if err == nil {
		return ""
	}
	if c, ok := dberr.Of(err); ok {
		return valueReason(c)
	}
	return oracleValueCodes[oracleCode(err, oracleValueCodes)]
}

// Unavailable reports whether err says the database cannot be used now,
// through no fault of the statement's values: the connection refused or
// lost, too many connections, the server shutting down or read-only, a
// timeout. The consumer runtime names such an outage in its log.
//
//	PostgreSQL  class 08, class 53, 57P01..57P03, 57014, 25006
//	MySQL       2002, 2003, 2006, 2013, 1927, 1040, 1203, 1053, 1290, 1836, 1792
//	SQLite      SQLITE_BUSY (5), LOCKED (6), NOMEM (7), READONLY (8),
//	            IOERR (10), FULL (13), CANTOPEN (14)
//	Oracle      ORA-03113, 03114, 12170, 12514, 12528, 12537, 12541, 00018,
//	            00020, 01012, 01033, 01034, 01089, 16000
//	any         driver.ErrBadConn, refused, reset or aborted connections,
//	            *net.OpError, timeouts
func Unavailable(err error) bool {
	if err == nil || ValueReason(err) != "" {
		return false
	}
	if c, ok := dberr.Of(err); ok && unavailableCode(c) {
		return true
	}
	if oracleCode(err, oracleUnavailable) != "" {
		return true
	}
	switch driverReason(err) {
	case inboxkit.ReasonConnection, inboxkit.ReasonInsufficientResources, inboxkit.ReasonTimeout:
		return true
	}
	return false
}

// valueReason is ValueReason of a database's code.
func valueReason(c dberr.Code) string {
	switch c.Database {
	case dberr.Postgres:
		switch {
		case c.SQLState == "22021" || c.SQLState == "22P05":
			return inboxkit.ReasonInvalidEncoding
		case c.SQLState == "22001":
			return inboxkit.ReasonValueTooLong
		case strings.HasPrefix(c.SQLState, "22"):
			return inboxkit.ReasonInvalidValue
		}
	case dberr.MySQL:
		switch c.Number {
		case 1300:
			return inboxkit.ReasonInvalidEncoding
		case 1366:
			if strings.Contains(c.Message, "Incorrect string value") {
				return inboxkit.ReasonInvalidEncoding
			}
			return inboxkit.ReasonInvalidValue
		case 1406, 1265:
			return inboxkit.ReasonValueTooLong
		case 1264, 1292, 1367:
			return inboxkit.ReasonInvalidValue
		}
	case dberr.SQLite:
		switch c.Number & 0xff {
		case 18:
			return inboxkit.ReasonValueTooLong
		case 20:
			return inboxkit.ReasonInvalidValue
		}
	}
	return ""
}

// unavailableCode is Unavailable of a database's code.
func unavailableCode(c dberr.Code) bool {
	switch c.Database {
	case dberr.Postgres:
		switch c.SQLState {
		case "57P01", "57P02", "57P03", "57014", "25006":
			return true
		}
		return strings.HasPrefix(c.SQLState, "08") || strings.HasPrefix(c.SQLState, "53")
	case dberr.MySQL:
		switch c.Number {
		case 2002, 2003, 2006, 2013, 1927, 1040, 1203, 1053, 1290, 1836, 1792:
			return true
		}
	case dberr.SQLite:
		switch c.Number & 0xff {
		case 5, 6, 7, 8, 10, 13, 14:
			return true
		}
	}
	return false
}

// Oracle codes of ValueReason and Unavailable, matched in the error text.
var (
	oracleValueCodes = map[string]string{
		"29275": inboxkit.ReasonInvalidEncoding, // partial multibyte character
		"12899": inboxkit.ReasonValueTooLong,    // value too large for column
		"01401": inboxkit.ReasonValueTooLong,    // inserted value too large for column
		"01461": inboxkit.ReasonValueTooLong,    // can bind a LONG value only for insert into a LONG column
		"01722": inboxkit.ReasonInvalidValue,    // invalid number
		"01858": inboxkit.ReasonInvalidValue,    // a non-numeric character was found where a numeric was expected
		"01861": inboxkit.ReasonInvalidValue,    // literal does not match format string
	}
	oracleUnavailable = map[string]string{
		"03113": "end-of-file on communication channel", "03114": "not connected to ORACLE",
		"12170": "TNS:Connect timeout occurred", "12514": "TNS:listener does not currently know of service",
		"12528": "TNS:listener: all appropriate instances are blocking new connections",
		"12537": "TNS:connection closed", "12541": "TNS:no listener",
		"00018": "maximum number of sessions exceeded", "00020": "maximum number of processes exceeded",
		"01012": "not logged on", "01033": "ORACLE initialization or shutdown in progress",
		"01034": "ORACLE not available", "01089": "immediate shutdown in progress",
		"16000": "database or pluggable database open for read-only access",
	}
)

// oracleCode returns the first ORA-nnnnn code of err's text that is a key
// of codes, or "".
func oracleCode(err error, codes map[string]string) string {
	for _, m := range oraPattern.FindAllStringSubmatch(err.Error(), -1) {
		if _, ok := codes[m[1]]; ok {
			return m[1]
		}
	}
	return ""
}
