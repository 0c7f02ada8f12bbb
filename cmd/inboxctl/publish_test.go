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

// publish checks every line before it sends anything: problems are listed
// with line numbers (the broker is not even contacted) unless
// --allow-invalid; --skip resumes; -o json reports the counts.
func TestPublishValidation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 121)
	input := strings.Join([]string{
		`{"headers":{"eventId":"ok-1"},"body":{}}`,
		`{"headers":{"correlationId":"c"},"body":{}}`,
		`{"headers":{"eventId":"` + long + `"},"body":{}}`,
		"{\"headers\":{\"eventId\":\"bad-\xff\"},\"body\":{}}",
		`{"headers":{"eventId":"ok-2"},"body":{}}`,
	}, "\n") + "\n"
	unreachable := []string{"publish", "--broker", "stomp://127.0.0.1:1", "--queue", "q", "--file", "-"}
	wantCode(t, inboxctl(t, input, unreachable...), 2,
		"stdin line 2: no \"eventId\" header", "stdin line 3: eventId is 121 bytes", "stdin line 4: not valid UTF-8",
		"3 problem(s); nothing was published", "--allow-invalid")
	js := "embedded:" + t.TempDir()
	r := inboxctl(t, input, "publish", "--broker", js, "--queue", "q", "--file", "-", "--allow-invalid", "--skip", "2", "-o", "json")
	wantCode(t, r, 0, `"published": 3`, `"skipped": 2`, `"total": 5`)
	wantCode(t, inboxctl(t, input, "publish", "--broker", js, "--queue", "q", "--file", "-", "--allow-invalid", "--skip", "6"), 2, "has only 5 message(s)")
}
