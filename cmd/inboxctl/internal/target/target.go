// Package target turns the URLs of inboxctl's --db and --broker flags into
// what the program opens: a database/sql driver name and DSN with the
// inbox dialect, or a broker kind with its settings.
//
// # Database URLs
//
//	postgres://user:pass@host:5432/db?sslmode=disable   pgx (postgresql:// too)
//	mysql://user:pass@host:3306/db                      go-sql-driver/mysql, MariaDB too
//	sqlite:PATH                                         modernc.org/sqlite (pure Go)
//	oracle://user:pass@host:1521/service                sijms/go-ora (pure Go, no client libraries)
//	godror://user:pass@host:1521/service                godror, only in a build with -tags godror (cgo)
//
// # Broker URLs
//
//	stomp://[login:passcode@]host:61613   ActiveMQ Classic over STOMP 1.2
//	amqp://user:pass@host:5672/[vhost]    RabbitMQ (amqps:// too)
//	amqp10://user:pass@host:5672          AMQP 1.0: IBM MQ, Artemis, Service Bus, RabbitMQ's plugin (amqp10s:// TLS)
//	nats://[user:pass@]host:4222          NATS JetStream
//	embedded[:DIR]                        a NATS JetStream server inside this process
//
// Passwords never appear in what this package returns for display
// (Redact), and Scrub masks the password of every URL or driver DSN in a
// text, and nothing else.
package target

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/inbox"
)

// ErrUnsupported is returned for a URL scheme that is known but not
// compiled into this build (godror without the build tag).
var ErrUnsupported = errors.New("not available in this build")

// DB is a parsed database URL.
type DB struct {
	// Driver is the database/sql driver name: postgres.DriverName (pgx
	// with fewer round trips), "mysql", "sqlite", "oracle" (go-ora) or
	// "godror".
	Driver string
	// DSN is the driver's data source name. It may hold a password: never print it.
	DSN string
	// Dialect is the inbox dialect.
	Dialect inbox.Dialect
	// Display is the URL with the password replaced by "xxxxx".
	Display string
}

// Broker kinds (brokerurl's).
const (
	STOMP    = brokerurl.STOMP
	AMQP     = brokerurl.AMQP
	AMQP10   = brokerurl.AMQP10
	NATS     = brokerurl.NATS
	Embedded = brokerurl.Embedded
)

// Broker is a parsed broker URL (see brokerurl.URL).
type Broker = brokerurl.URL

// urlUserInfo matches a URL's scheme and user info (up to the last '@'
// before the host): the part url.URL.Redacted masks.
var urlUserInfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/?#@]*(?:@[^\s/?#@]*)*)@`)

// dsnUserInfo matches the user:password@ of a go-sql-driver/mysql DSN
// (user:pass@tcp(host:port)/db).
var dsnUserInfo = regexp.MustCompile(`([^\s:/@(]+):(\S*)@((?:tcp|tcp6|unix)\()`)

// Scrub masks the password in the user info of every URL in s (the rule of
// url.URL.Redacted: "scheme://user:xxxxx@host") and of every MySQL driver
// DSN ("user:xxxxx@tcp(host)"), and changes nothing else. inboxctl passes
// all its output of errors through it, because a driver error may quote a
// DSN. It does not look for a password elsewhere: replacing every
// occurrence of a short password would corrupt the text (with the password
// "p", "postgres" and "tcp" would be masked too).
func Scrub(s string) string {
	s = urlUserInfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlUserInfo.FindStringSubmatch(m)
		user, _, hasPW := strings.Cut(sub[2], ":")
		if !hasPW {
			return m
		}
		return sub[1] + user + ":xxxxx@"
	})
	return dsnUserInfo.ReplaceAllString(s, "${1}:xxxxx@${3}")
}

// Redact returns raw with the password of its userinfo replaced by "xxxxx".
// A string that is not a URL is returned as "<unparsable URL>" unless it
// holds no '@' (and so no credentials).
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return "<unparsable URL>"
		}
		return raw
	}
	return u.Redacted()
}

// UsageError is a URL that cannot be used; Error says what to do.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usage(format string, args ...any) error { return &UsageError{msg: fmt.Sprintf(format, args...)} }

const dbExamples = "use postgres://user@127.0.0.1:5432/db?sslmode=disable, mysql://root@127.0.0.1:3306/db or sqlite:./inbox.db"

// ParseDB parses a database URL.
func ParseDB(raw string) (DB, error) {
	if raw == "" {
		return DB{}, usage("no database given: pass --db URL or set INBOXKIT_DB; %s", dbExamples)
	}
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return DB{}, usage("database %q has no scheme: %s", Redact(raw), dbExamples)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		u, err := url.Parse(raw)
		if err != nil {
			return DB{}, usage("database URL is not a valid URL (%s): %s", hideURLError(err), dbExamples)
		}
		if u.Host == "" {
			return DB{}, usage("database URL %s has no host: e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable", u.Redacted())
		}
		return DB{Driver: postgres.DriverName, DSN: raw, Dialect: inbox.Postgres, Display: u.Redacted()}, nil
	case "mysql", "mariadb":
		u, err := url.Parse(raw)
		if err != nil {
			return DB{}, usage("database URL is not a valid URL (%s): %s", hideURLError(err), dbExamples)
		}
		dsn, err := mysqlDSN(u)
		if err != nil {
			return DB{}, err
		}
		return DB{Driver: "mysql", DSN: dsn, Dialect: inbox.MySQL, Display: u.Redacted()}, nil
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if i := strings.IndexByte(path, '?'); i >= 0 {
			return DB{}, usage("sqlite URL %q: options are not accepted (the busy timeout, WAL and immediate transactions are set by inboxctl); use sqlite:PATH", raw)
		}
		if path == "" {
			return DB{}, usage("sqlite URL %q has no file path: use sqlite:./inbox.db or sqlite:/var/lib/inboxkit/inbox.db", raw)
		}
		return DB{Driver: "sqlite", DSN: SQLiteDSN(path), Dialect: inbox.SQLite, Display: "sqlite:" + path}, nil
	case "oracle":
		return parseOracle(raw)
	case "godror":
		u, err := url.Parse(raw)
		if err != nil {
			return DB{}, usage("database URL is not a valid URL (%s): e.g. godror://user:pass@host:1521/service", hideURLError(err))
		}
		if GodrorDSN == nil {
			return DB{}, &UsageError{msg: fmt.Sprintf("database %s: the godror driver is %s (it needs cgo and Oracle's client libraries; build with: CGO_ENABLED=1 go build -tags godror ./cmd/inboxctl); without it use oracle://, the pure-Go driver", u.Redacted(), ErrUnsupported)}
		}
		dsn, err := GodrorDSN(u)
		if err != nil {
			return DB{}, usage("database %s: %v", u.Redacted(), err)
		}
		return DB{Driver: "godror", DSN: dsn, Dialect: inbox.Oracle, Display: u.Redacted()}, nil
	}
	return DB{}, usage("database scheme %q is not supported: %s", scheme, dbExamples)
}

// GodrorDSN turns a godror://user:pass@host:port/service URL into the
// godror driver's connect string. It is nil unless inboxctl is built with
// the "godror" tag (cmd/inboxctl/godror.go).
var GodrorDSN func(u *url.URL) (string, error)

// parseOracle checks oracle://user:pass@host[:port]/service[?options] for
// the pure-Go driver github.com/sijms/go-ora/v2, which takes the URL as its
// DSN (options such as SSL=true or TRACE FILE pass through).
func parseOracle(raw string) (DB, error) {
	const example = "e.g. oracle://app:secret@db.example.com:1521/ORCLPDB1"
	u, err := url.Parse(raw)
	if err != nil {
		return DB{}, usage("database URL is not a valid URL (%s): %s", hideURLError(err), example)
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return DB{}, usage("database URL %s has no host: %s", u.Redacted(), example)
	case u.User == nil || u.User.Username() == "":
		return DB{}, usage("database URL %s has no user: %s", u.Redacted(), example)
	case strings.Trim(u.Path, "/") == "" || strings.Contains(strings.Trim(u.Path, "/"), "/"):
		return DB{}, usage("database URL %s names no service: %s (the service name, not a SID)", u.Redacted(), example)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "1521")
	}
	u.Scheme = "oracle"
	return DB{Driver: "oracle", DSN: u.String(), Dialect: inbox.Oracle, Display: u.Redacted()}, nil
}

// hideURLError drops the URL that url.Parse quotes in its errors.
func hideURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "invalid URL"
}

// SQLiteDSN returns the modernc.org/sqlite DSN for a file with the settings
// concurrent writers need: WAL, a busy timeout, and BEGIN IMMEDIATE.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"
}

// mysqlDSN converts mysql://user:pass@host:port/db?opts to the
// go-sql-driver form user:pass@tcp(host:port)/db?opts with parseTime, UTC
// and a UTC session time zone, which the inbox needs, and
// interpolateParams (one round trip a statement) unless opts set it.
func mysqlDSN(u *url.URL) (string, error) {
	if u.Host == "" {
		return "", usage("database URL %s has no host: e.g. mysql://root@127.0.0.1:3306/inboxkit", u.Redacted())
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", usage("database URL %s names no database: e.g. mysql://root@127.0.0.1:3306/inboxkit", u.Redacted())
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if pw, ok := u.User.Password(); ok {
			b.WriteString(":" + pw)
		}
		b.WriteString("@")
	}
	b.WriteString("tcp(" + host + ")/" + db)
	q := u.Query()
	q.Set("parseTime", "true")
	q.Set("loc", "UTC")
	q.Set("time_zone", "'+00:00'")
	if !q.Has("interpolateParams") {
		q.Set("interpolateParams", "true")
	}
	b.WriteString("?" + q.Encode())
	return b.String(), nil
}

// ParseBroker parses a broker URL with brokerurl.Parse; its errors are
// *UsageError.
func ParseBroker(raw string) (Broker, error) {
	if raw == "" {
		return Broker{}, usage("no broker given: pass --broker URL or set INBOXKIT_BROKER; %s", brokerurl.Examples)
	}
	b, err := brokerurl.Parse(raw)
	if err != nil {
		return Broker{}, &UsageError{msg: err.Error()}
	}
	return b, nil
}
