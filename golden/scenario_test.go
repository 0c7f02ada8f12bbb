package golden

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := `# comment
queue invoices
max-attempts 4
instances 2

message a
  header eventId E-1
  header empty
	body {"x": 1}
  body second line
message b
send a
send b parallel 2
fail letter-service 2
fail commit 1
crash before-commit
crash after-commit
note the producer resends
crash during letter-service
`
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Scenario{
		Queue: "invoices", MaxAttempts: 4, BrokerMaxDeliveries: 5, Instances: 2,
		Messages: []*Message{
			{Name: "a", Headers: []Header{{"eventId", "E-1"}, {"empty", ""}}, Body: "{\"x\": 1}\nsecond line"},
			{Name: "b"},
		},
		Steps: []Step{
			{Kind: StepSend, Message: "a", Parallel: 1, Line: 12},
			{Kind: StepSend, Message: "b", Parallel: 2, Line: 13},
			{Kind: StepFail, Service: "letter-service", Count: 2, Line: 14},
			{Kind: StepFail, Service: "commit", Count: 1, Line: 15},
			{Kind: StepCrash, Point: CrashBeforeCommit, Line: 16},
			{Kind: StepCrash, Point: CrashAfterCommit, Line: 17},
			{Kind: StepNote, Text: "the producer resends", Line: 18},
			{Kind: StepCrash, Point: CrashDuring, Service: "letter-service", Line: 19},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", s, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"  header a b", "line 1: indented line outside a message block"},
		{"message a\n  footer x", "line 2: unknown message line"},
		{"message a\n  header a 1\n  header a 2", "line 3: header \"a\" repeated"},
		{"message a\nmessage a", "line 2: message \"a\" defined twice"},
		{"send nobody", "line 1: send nobody: no message of that name"},
		{"message a\nsend a parallel 2", "only 1 instances"},
		{"message a\nsend a twice", "send NAME [parallel N]"},
		{"fail letter-service many", "is not a number"},
		{"fail letter-service 0", "is not a number from 1"},
		{"crash sometime", "crash sometime: use crash before-commit"},
		{"crash during", "crash during: use crash before-commit, crash after-commit or crash during SERVICE"},
		{"database sideways", "database sideways: use database down or database up"},
		{"crash before-commit letter-service", "crash before-commit letter-service: use"},
		{"deliver a", "unknown directive \"deliver\""},
		{"instances", "instances takes 1 to 1 arguments"},
	} {
		_, err := Parse([]byte(tt.src))
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want a SyntaxError containing %q", tt.src, err, tt.want)
		}
	}
}

func withoutLines(s *Scenario) *Scenario {
	c := *s
	c.Steps = append([]Step(nil), s.Steps...)
	for i := range c.Steps {
		c.Steps[i].Line = 0
	}
	return &c
}

// FuzzParse: Parse never panics, and what it accepts survives Format.
func FuzzParse(f *testing.F) {
	dirs, _ := filepath.Glob("../testdata/golden/*/scenario")
	more, _ := filepath.Glob("../examples/*/testdata/golden/*/scenario")
	for _, p := range append(dirs, more...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("message a\n  body \n  body x\nsend a parallel 1\n"))
	f.Add([]byte("message a\r\n  header k v\r\r\nsend a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Parse(Format(s))
		if err != nil {
			t.Fatalf("Parse(Format(s)): %v\n%s", err, Format(s))
		}
		if !reflect.DeepEqual(withoutLines(s), withoutLines(again)) {
			t.Fatalf("round trip changed the scenario:\n%+v\n%+v\n%s", s, again, Format(s))
		}
	})
}

func TestScrub(t *testing.T) {
	in := "golden-id-000007 2026-01-05 09:00:01.000000 golden-id-000003 2026-01-05T09:00:01Z 2026-01-05T09:00:02.5Z golden-id-000007"
	want := "<id_1> <time_1> <id_2> <time_1> <time_2> <id_1>"
	if got := Scrub(in); got != want {
		t.Fatalf("Scrub = %q, want %q", got, want)
	}
}

func TestDiff(t *testing.T) {
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	b := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\neleven\n"
	want := "--- a\n+++ b\n@@ -2,9 +2,10 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n 10\n+eleven\n"
	if got := Diff("a", a, "b", b); got != want {
		t.Fatalf("Diff:\n%s\nwant:\n%s", got, want)
	}
	a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	b = "x\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ny\n"
	want = "--- a\n+++ b\n@@ -1,4 +1,4 @@\n-1\n+x\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+y\n"
	if got := Diff("a", a, "b", b); got != want {
		t.Fatalf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if Diff("a", a, "b", a) != "" {
		t.Fatal("Diff of equal texts is not empty")
	}
}
