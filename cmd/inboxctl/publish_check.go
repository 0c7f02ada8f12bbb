package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit/inbox"
)

// maxPublishBody is the largest message body publish sends without
// --allow-invalid: the STOMP client's default frame body limit, which a
// consumer could not receive.
const maxPublishBody = 4 << 20

// exitInterrupted is the exit code of a command stopped by SIGINT/SIGTERM.
const exitInterrupted = 130

// eventProblems returns what is wrong with one message for a consumer:
// a missing, over-long or invalid-UTF-8 event id, an over-size body.
func eventProblems(h map[string]string, body []byte) []string {
	var out []string
	id, ok := h["eventId"]
	switch {
	case !ok || strings.TrimSpace(id) == "":
		out = append(out, `no "eventId" header: the consumer would dead-letter it as MISSING_EVENT_ID`)
	case !utf8.ValidString(id):
		out = append(out, fmt.Sprintf("eventId %q is not valid UTF-8", id))
	case len(id) > inbox.MaxEventIDLength:
		out = append(out, fmt.Sprintf("eventId is %d bytes, at most %d fit EVENT_ID", len(id), inbox.MaxEventIDLength))
	}
	if len(body) > maxPublishBody {
		out = append(out, fmt.Sprintf("body is %d bytes, over the %d-byte frame limit a consumer accepts by default", len(body), maxPublishBody))
	}
	return out
}

// progress draws "published i/n" in place on a terminal.
type progress struct {
	w    io.Writer
	n    int
	last int
}

func (p *progress) set(i int) {
	if p == nil || p.n < 100 {
		return
	}
	pct := i * 100 / p.n
	if pct == p.last && i != p.n {
		return
	}
	p.last = pct
	const width = 30
	fill := width * i / p.n
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d confirmed", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), i, p.n)
	if i == p.n {
		fmt.Fprintln(p.w)
	}
}
