package main

import (
	"strings"
	"testing"
)

func TestParseEventLine(t *testing.T) {
	tests := []struct {
		line, body, err string
	}{
		{`{"headers":{"eventId":"e1"},"body":{"a": 1, "b": "x"}}`, `{"a":1,"b":"x"}`, ""},
		{`{"headers":{"eventId":"e1"},"body":"{not json"}`, `{not json`, ""},
		{`{"headers":{},"body":42}`, "", "body must be a JSON object or a string"},
		{`{"headers":{}}`, "", "no \"body\""},
		{`{"header":{},"body":{}}`, "", "unknown field"},
		{`{"headers":{},"body":{}} {}`, "", "more than one JSON value"},
		{`not json`, "", "not a JSON object"},
	}
	for _, tt := range tests {
		_, body, err := parseEventLine([]byte(tt.line))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.line, err, tt.err)
			}
			continue
		}
		if err != nil || string(body) != tt.body {
			t.Errorf("%s: body %q err %v, want %q", tt.line, body, err, tt.body)
		}
	}
}

func FuzzParseEventLine(f *testing.F) {
	f.Add(`{"headers":{"eventId":"e1"},"body":{"a":1}}`)
	f.Add(`{"headers":{},"body":"raw"}`)
	f.Fuzz(func(t *testing.T, line string) {
		h, body, err := parseEventLine([]byte(line))
		if err == nil && body == nil {
			t.Fatalf("%q: no body and no error (headers %v)", line, h)
		}
	})
}
