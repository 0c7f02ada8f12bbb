package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// maxPublishBody is the largest message body publish sends without
// --allow-invalid: the STOMP client's default frame body limit, which a
// consumer could not receive.
const maxPublishBody = 4 << 20

// eventIDCheck is how publish finds a message's event id, as the consumer
// will: the eventId header, or the --event-id-from chain the consumer runs
// with.
type eventIDCheck struct {
	spec string               // --event-id-from; "" for the eventId header
	fn   consumer.EventIDFunc // nil without spec
	any  bool                 // the chain ends in message-id: every message gets an id
}

func newEventIDCheck(spec string) (eventIDCheck, error) {
	if spec == "" {
		return eventIDCheck{}, nil
	}
	fn, sources, err := consumer.ParseEventIDChain(spec)
	if err != nil {
		return eventIDCheck{}, usageErr("--event-id-from: %v", err)
	}
	c := eventIDCheck{spec: spec, fn: fn}
	for _, s := range sources {
		if s.Name == "message-id" || s.Name == "header:JMSMessageID" {
			c.any = true // the broker gives every message one
		}
	}
	return c, nil
}

// eventProblems returns what is wrong with one message for a consumer:
// no event id (none of the sources the consumer reads holds one), an
// over-long or invalid-UTF-8 event id, an over-size body.
func eventProblems(h map[string]string, body []byte, ids eventIDCheck) []string {
	var out []string
	if ids.fn == nil {
		id, ok := h["eventId"]
		switch {
		case !ok || strings.TrimSpace(id) == "":
			out = append(out, `no "eventId" header: a consumer reading the eventId header would dead-letter it as MISSING_EVENT_ID (a consumer that derives the id: give publish the same --event-id-from)`)
		case !utf8.ValidString(id):
			out = append(out, fmt.Sprintf("eventId %q is not valid UTF-8", id))
		case len(id) > inbox.MaxEventIDLength:
			out = append(out, fmt.Sprintf("eventId is %d bytes, at most %d fit EVENT_ID", len(id), inbox.MaxEventIDLength))
		}
	} else {
		id, source := ids.fn(inboxkit.Message{Headers: h, Body: body})
		switch {
		case id == "" && !ids.any:
			out = append(out, fmt.Sprintf("no event id: none of --event-id-from %s holds one, so a consumer run with it would dead-letter it as MISSING_EVENT_ID", ids.spec))
		case !utf8.ValidString(id):
			out = append(out, fmt.Sprintf("the event id %q from %s is not valid UTF-8", id, source))
		}
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
