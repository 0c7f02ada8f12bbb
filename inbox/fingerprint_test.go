package inbox_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit/inbox"
)

func TestFingerprint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"letter service down", "letter service down"},
		{"customer K-100 unknown", "customer <id> unknown"},
		{"customer K-200 unknown", "customer <id> unknown"},
		{"invoice INV-2026-0042 already billed.", "invoice <id> already billed."},
		{"HTTP 503 after 1.5s", "HTTP <n> after <id>"},
		{"retry 3 of 5", "retry <n> of <n>"},
		{"amount -12.50 below 0", "amount <n> below <n>"},
		{`value "abc def" too long for column 'NOTE'`, "value <q> too long for column <q>"},
		{"unterminated 'quote here", "unterminated <q>"},
		{"don't retry", "don't retry"},
		{"event 3f2b8c1e-9d4a-4e1b-8c3f-2a1b3c4d5e6f: dial tcp 127.0.0.1:5432: connection refused",
			"event <id>: dial tcp <n>:<n>: connection refused"},
		{"  many\t\tspaces \n here ", "many spaces here"},
		{"Kunde Müller-7 fehlt", "Kunde <id> fehlt"},
		{"ORA-00001: unique constraint (APP.PK) violated", "<id>: unique constraint (APP.PK) violated"},
		{"`x` and `y`", "<q> and <q>"},
		{strings.Repeat("word ", 100), strings.TrimSpace(strings.Repeat("word ", 40))},
	} {
		if got := inbox.Fingerprint(tc.in); got != tc.want {
			t.Errorf("Fingerprint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGroupID(t *testing.T) {
	a := inbox.GroupID("c", "REJECTED", "CUSTOMER_UNKNOWN", "BUSINESS", "customer <id> unknown")
	if len(a) != 12 || a != inbox.GroupID("c", "REJECTED", "CUSTOMER_UNKNOWN", "BUSINESS", "customer <id> unknown") {
		t.Fatalf("GroupID not stable or not 12 hex digits: %q", a)
	}
	if a == inbox.GroupID("c", "DEAD_LETTERED", "CUSTOMER_UNKNOWN", "BUSINESS", "customer <id> unknown") {
		t.Fatal("GroupID ignores the status")
	}
}

// FuzzFingerprint: bounded, valid UTF-8 out of valid UTF-8, a fixed point,
// and blind to the digits of an id.
//
//	go test -run '^$' -fuzz FuzzFingerprint -fuzztime 30s ./inbox/
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{"customer K-100 unknown", `value "x" 'y'`, "don't", "a.1.", "--1", "Müller-7", "'", "x\t\ny"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fp := inbox.Fingerprint(s)
		if len(fp) > 200 {
			t.Fatalf("Fingerprint(%q) is %d bytes", s, len(fp))
		}
		if utf8.ValidString(s) && !utf8.ValidString(fp) {
			t.Fatalf("Fingerprint(%q) = %q: invalid UTF-8", s, fp)
		}
		if again := inbox.Fingerprint(fp); again != fp {
			t.Fatalf("not a fixed point: %q -> %q -> %q", s, fp, again)
		}
		d := []byte(s)
		for i, c := range d {
			if c >= '0' && c <= '9' {
				d[i] = '7'
			}
		}
		if inbox.Fingerprint(string(d)) != fp {
			t.Fatalf("digits change the fingerprint: %q -> %q, %q -> %q", s, fp, d, inbox.Fingerprint(string(d)))
		}
	})
}
