package failpoint

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(" after-commit-before-ack:0.01, mid-handler:1,,after-dlq-publish-before-mark:0 ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{AfterCommitBeforeAck: 0.01, MidHandler: 1, AfterDLQPublishBeforeMark: 0}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	for _, tt := range []struct{ spec, err string }{
		{"mid-handler", "has no probability"},
		{"nowhere:0.5", "unknown point"},
		{"mid-handler:1.5", "from 0 to 1"},
		{"mid-handler:NaN", "from 0 to 1"},
		{"mid-handler:x", "from 0 to 1"},
		{"mid-handler:0.1,mid-handler:0.2", "given twice"},
	} {
		if _, err := Parse(tt.spec); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.spec, err, tt.err)
		}
	}
	if p, err := Parse(""); err != nil || len(p) != 0 {
		t.Errorf("Parse(\"\") = %v, %v; want no points", p, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("after-commit-before-ack:0.01,mid-handler:0.01,after-dlq-publish-before-mark:0.05")
	f.Add("mid-handler:1")
	f.Add(":,")
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := Parse(spec)
		if err != nil {
			return
		}
		for name, v := range p {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("%q: %s has probability %v", spec, name, v)
			}
		}
	})
}
