package target

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseDB(t *testing.T) {
	tests := []struct {
		in, driver, dsn, display string
	}{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "inboxkit-pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"postgresql://u:s3cret@db:5432/x", "inboxkit-pgx", "postgresql://u:s3cret@db:5432/x", "postgresql://u:xxxxx@db:5432/x"},
		{"mysql://root@127.0.0.1:3306/inboxkit", "mysql", "root@tcp(127.0.0.1:3306)/inboxkit?interpolateParams=true&loc=UTC&parseTime=true&time_zone=%27%2B00%3A00%27", "mysql://root@127.0.0.1:3306/inboxkit"},
		{"mysql://app:p%40ss@db/inv?timeout=5s", "mysql", "app:p@ss@tcp(db:3306)/inv?interpolateParams=true&loc=UTC&parseTime=true&time_zone=%27%2B00%3A00%27&timeout=5s", "mysql://app:xxxxx@db/inv?timeout=5s"},
		{"sqlite:./inbox.db", "sqlite", SQLiteDSN("./inbox.db"), "sqlite:./inbox.db"},
		{"sqlite:///tmp/x.db", "sqlite", SQLiteDSN("/tmp/x.db"), "sqlite:/tmp/x.db"},
	}
	for _, tt := range tests {
		got, err := ParseDB(tt.in)
		if err != nil {
			t.Errorf("ParseDB(%q): %v", tt.in, err)
			continue
		}
		if got.Driver != tt.driver || got.DSN != tt.dsn || got.Display != tt.display {
			t.Errorf("ParseDB(%q) = %q %q %q, want %q %q %q", tt.in, got.Driver, got.DSN, got.Display, tt.driver, tt.dsn, tt.display)
		}
	}
}

func TestParseDBErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "INBOXKIT_DB"},
		{"godror://scott:tiger@db:1521/ORCL", "CGO_ENABLED=1 go build -tags godror"},
		{"oracle://scott:tiger@db:1521/", "names no service"},
		{"oracle://scott:tiger@db:1521/a/b", "names no service"},
		{"oracle://:tiger@db:1521/ORCL", "has no user"},
		{"oracle:///ORCL", "has no host"},
		{"mysql://root@127.0.0.1:3306/", "names no database"},
		{"redis://x", "not supported"},
		{"inbox.db", "no scheme"},
		{"sqlite:", "no file path"},
		{"postgres://u:hunter2@[bad", "not a valid URL"},
	}
	for _, tt := range tests {
		_, err := ParseDB(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseDB(%q) = %v, want an error with %q", tt.in, err, tt.want)
			continue
		}
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Errorf("ParseDB(%q): %T is not a *UsageError", tt.in, err)
		}
		for _, pw := range []string{"tiger", "hunter2"} {
			if strings.Contains(err.Error(), pw) {
				t.Errorf("ParseDB(%q) error shows the password: %v", tt.in, err)
			}
		}
	}
}

func TestParseBroker(t *testing.T) {
	b, err := ParseBroker("stomp://admin:topsecret@127.0.0.1")
	if err != nil || b.Kind != STOMP || b.Addr != "127.0.0.1:61613" || b.Login != "admin" || b.Passcode != "topsecret" || strings.Contains(b.Display, "topsecret") {
		t.Errorf("stomp: %+v %v", b, err)
	}
	if got := Scrub("broker stomp://admin:topsecret@127.0.0.1:61613: dial failed"); got != "broker stomp://admin:xxxxx@127.0.0.1:61613: dial failed" {
		t.Errorf("Scrub did not remove the passcode: %s", got)
	}
	b, err = ParseBroker("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil || b.Kind != AMQP || b.Display != "amqp://guest:xxxxx@127.0.0.1:5672/" {
		t.Errorf("amqp: %+v %v", b, err)
	}
	for _, raw := range []string{"amqp10://app:p@mq.example:5672", "amqp10s://app:p@mq.example:5671?addressing=plain"} {
		b, err = ParseBroker(raw)
		if err != nil || b.Kind != AMQP10 || b.URL != raw || strings.Contains(b.Display, ":p@") || !strings.Contains(b.Display, "app:xxxxx@mq.example") {
			t.Errorf("amqp10: %+v %v", b, err)
		}
	}
	b, err = ParseBroker("nats://127.0.0.1:4222")
	if err != nil || b.Kind != NATS {
		t.Errorf("nats: %+v %v", b, err)
	}
	b, err = ParseBroker("embedded:/tmp/js")
	if err != nil || b.Kind != Embedded || b.Dir != "/tmp/js" {
		t.Errorf("embedded: %+v %v", b, err)
	}
	for _, bad := range []string{"", "kafka://x:9092", "127.0.0.1:61613", "stomp://", "amqp10://"} {
		if _, err := ParseBroker(bad); err == nil {
			t.Errorf("ParseBroker(%q) accepted", bad)
		}
	}
}

// TestScrubShortPasswords is the regression test of issue 11.3: with a one-
// or two-letter password every occurrence of it was masked, so
// "postgres://u:p@..." came out as "xxxxxostgres://..." and "dial tcp" as
// "dial tcxxxxx". Only the user info of a URL (url.URL.Redacted) or of a
// MySQL DSN is masked.
func TestScrubShortPasswords(t *testing.T) {
	for _, pw := range []string{"p", "po", "tc", "s", "1"} {
		for _, raw := range []string{
			"postgres://u:" + pw + "@127.0.0.1:1/postgres?sslmode=disable",
			"mysql://u:" + pw + "@127.0.0.1:1/postgres",
			"amqp://u:" + pw + "@127.0.0.1:1/",
			"stomp://u:" + pw + "@127.0.0.1:1",
		} {
			// Parse first: before the fix parsing remembered the password.
			_, _ = ParseDB(raw)
			_, _ = ParseBroker(raw)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			tail := ": dial tcp 127.0.0.1:1: connect: connection refused (user=u database=postgres sslmode=disable)"
			want := u.Redacted() + tail
			if got := Scrub(raw + tail); got != want {
				t.Errorf("password %q:\n got %s\nwant %s", pw, got, want)
			}
		}
		dsn := "u:" + pw + "@tcp(127.0.0.1:3306)/postgres?parseTime=true"
		if got, want := Scrub("open "+dsn+": tcp refused"), "open u:xxxxx@tcp(127.0.0.1:3306)/postgres?parseTime=true: tcp refused"; got != want {
			t.Errorf("mysql DSN, password %q:\n got %s\nwant %s", pw, got, want)
		}
	}
	for in, want := range map[string]string{
		"postgres://u:p%40ss@h/db x": "postgres://u:xxxxx@h/db x",
		"postgres://u:p@ss@h/db":     "postgres://u:xxxxx@h/db",
		"postgres://u@h/db":          "postgres://u@h/db",
		"mail p@example.org, tcp":    "mail p@example.org, tcp",
		"no url: p":                  "no url: p",
	} {
		if got := Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"postgres://u:p@h/db", "mysql://u:p@h:3306/db?x=1", "sqlite:a.db", "stomp://a:b@h:1", "amqp://g:g@h/", "embedded"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if db, err := ParseDB(s); err == nil && db.Driver == "" {
			t.Fatalf("ParseDB(%q): no driver and no error", s)
		}
		if b, err := ParseBroker(s); err == nil && b.Kind == "" {
			t.Fatalf("ParseBroker(%q): no kind and no error", s)
		}
	})
}

func TestParseDBOracle(t *testing.T) {
	for _, tt := range []struct{ in, dsn, display string }{
		{"oracle://scott:tiger@db:1521/ORCLPDB1", "oracle://scott:tiger@db:1521/ORCLPDB1", "oracle://scott:xxxxx@db:1521/ORCLPDB1"},
		{"oracle://scott:tiger@db/ORCLPDB1", "oracle://scott:tiger@db:1521/ORCLPDB1", "oracle://scott:xxxxx@db:1521/ORCLPDB1"},
		{"ORACLE://app:p%40ss@10.0.0.5:1522/svc?SSL=true", "oracle://app:p%40ss@10.0.0.5:1522/svc?SSL=true", "oracle://app:xxxxx@10.0.0.5:1522/svc?SSL=true"},
	} {
		got, err := ParseDB(tt.in)
		if err != nil {
			t.Errorf("ParseDB(%q): %v", tt.in, err)
			continue
		}
		if got.Driver != "oracle" || got.DSN != tt.dsn || got.Display != tt.display || got.Dialect.Name() != "oracle" {
			t.Errorf("ParseDB(%q) = %q %q %q %s, want oracle %q %q", tt.in, got.Driver, got.DSN, got.Display, got.Dialect.Name(), tt.dsn, tt.display)
		}
	}
}
