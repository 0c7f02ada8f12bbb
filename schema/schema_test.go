package schema_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/schema"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		dialect, text string
		want          []string
	}{
		{"postgres", "-- c\nCREATE TABLE a (\n  x INT\n);\n\nCREATE INDEX i ON a (x);\n", []string{"CREATE TABLE a (\n  x INT\n)", "CREATE INDEX i ON a (x)"}},
		{"sqlite", "CREATE TABLE a (x INT);", []string{"CREATE TABLE a (x INT)"}},
		{"mysql", "", nil},
		{"postgres", "no terminator", []string{"no terminator"}},
		{"oracle", "-- c\nBEGIN\n  x;\nEND;\n/\nBEGIN y; END;\n/\n", []string{"BEGIN\n  x;\nEND;", "BEGIN y; END;"}},
	} {
		if got := schema.Split(tc.dialect, tc.text); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%s, %q) = %q, want %q", tc.dialect, tc.text, got, tc.want)
		}
	}
}

func TestStatementsReplaceTable(t *testing.T) {
	for _, d := range []string{"postgres", "mysql", "sqlite", "oracle"} {
		stmts, err := schema.Statements(d, "MY_INBOX")
		if err != nil {
			t.Fatal(err)
		}
		if len(stmts) == 0 {
			t.Errorf("%s: %d statements", d, len(stmts))
		}
		named := 0
		for _, s := range stmts {
			if strings.Contains(s, schema.TableName) {
				t.Errorf("%s: %q", d, s)
			}
			if strings.Contains(s, "MY_INBOX") {
				named++
			}
		}
		if named == 0 {
			t.Errorf("%s: no statement names MY_INBOX", d)
		}
	}
	if _, err := schema.Statements("db2", "X"); err == nil {
		t.Error("unknown dialect accepted")
	}
}

func FuzzSplit(f *testing.F) {
	f.Add("postgres", "CREATE TABLE a (x INT);\n-- c\nCREATE INDEX i ON a (x);")
	f.Add("oracle", "BEGIN\nx;\nEND;\n/\n")
	f.Fuzz(func(t *testing.T, dialect, text string) {
		for _, s := range schema.Split(dialect, text) {
			if strings.TrimSpace(s) == "" {
				t.Fatalf("empty statement from %q", text)
			}
		}
	})
}
