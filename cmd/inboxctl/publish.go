package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// eventLine is one line of a publish file.
type eventLine struct {
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

// parseEventLine decodes one JSON line: the body is an object (sent as
// its JSON) or a string (sent as it is, to send malformed payloads).
func parseEventLine(line []byte) (map[string]string, []byte, error) {
	var ev eventLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return nil, nil, fmt.Errorf("not a JSON object {\"headers\": {...}, \"body\": ...}: %v", err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("more than one JSON value on the line")
	}
	body := bytes.TrimSpace(ev.Body)
	switch {
	case len(body) == 0 || string(body) == "null":
		return nil, nil, fmt.Errorf("no \"body\": give an object, or a string for a raw payload")
	case body[0] == '"':
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, nil, fmt.Errorf("body: %v", err)
		}
		return ev.Headers, []byte(s), nil
	case body[0] == '{':
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			return nil, nil, fmt.Errorf("body: %v", err)
		}
		return ev.Headers, buf.Bytes(), nil
	}
	return nil, nil, fmt.Errorf("body must be a JSON object or a string, not %s", shorten(string(body), 20))
}

func newPublishCmd() *cobra.Command {
	var brokerURL, queue, file, eventIDFrom string
	var allowInvalid bool
	var o outputFlags
	var skip int
	c := &cobra.Command{
		Use:   "publish --broker URL --queue NAME --file FILE",
		Short: "Publish events from a JSON-lines file ('-' for stdin)",
		Long: `publish sends one message per line of a JSON-lines file:

  {"headers": {"eventId": "ev-1", "correlationId": "order-1"}, "body": {"invoiceNo": "INV-1", ...}}

The body is a JSON object (sent as compact JSON) or a string (sent as it is, to
send malformed payloads). Empty lines are skipped. The whole file is checked
before anything is sent: a bad line, or a message without an "eventId" header, with an
event id over 120 bytes or not valid UTF-8, or a body over 4 MiB, is reported with its
line number and nothing is sent (exit 2); --allow-invalid sends such messages on purpose.
For a consumer that derives the event id (run --event-id-from), give publish the same
--event-id-from: it checks each message with that chain instead of the eventId header.
Each message is confirmed by the broker before the next is sent; a progress bar shows
on a terminal. On JetStream a subject no stream captures gets the stream
INBOXKIT_<SUBJECT> with work-queue retention, as 'run' would create it (a consumer
under any name reads each message once, and an acknowledged message is removed);
publish says when it created one. Interrupted, it says how many were confirmed and exits 130: resume with
--skip N.`,
		Example: `  inboxctl publish --broker stomp://127.0.0.1:61613 --queue invoices --file events.jsonl
  echo '{"headers":{"eventId":"ev-1","correlationId":"order-1"},"body":{"invoiceNo":"INV-1","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}}' \
    | inboxctl publish --broker stomp://127.0.0.1:61613 --queue invoices --file -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if queue == "" {
				return usageErr("publish needs --queue NAME (e.g. invoices)")
			}
			if file == "" {
				return usageErr("publish needs --file FILE (JSON lines; '-' reads stdin)")
			}
			var r io.Reader
			name := file
			if file == "-" {
				r, name = cmd.InOrStdin(), "stdin"
			} else {
				fh, err := os.Open(file)
				if err != nil {
					return usageErr("publish: %v", err)
				}
				defer fh.Close()
				r = fh
			}
			type msg struct {
				h    map[string]string
				body []byte
			}
			if skip < 0 {
				return usageErr("--skip must be 0 or more (got %d)", skip)
			}
			j, err := o.json()
			if err != nil {
				return err
			}
			ids, err := newEventIDCheck(eventIDFrom)
			if err != nil {
				return err
			}
			var msgs []msg
			var problems []string
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 2*maxPublishBody+(64<<10))
			for n := 1; sc.Scan(); n++ {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				h, body, err := parseEventLine(line)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s line %d: %v", name, n, err))
					continue
				}
				if !allowInvalid {
					if !utf8.Valid(line) {
						problems = append(problems, fmt.Sprintf("%s line %d: not valid UTF-8 (its event id or body would arrive altered)", name, n))
					}
					for _, p := range eventProblems(h, body, ids) {
						problems = append(problems, fmt.Sprintf("%s line %d: %s", name, n, p))
					}
				}
				msgs = append(msgs, msg{h, body})
			}
			if err := sc.Err(); err != nil {
				return usageErr("read %s: %v (a line over %d bytes?) (nothing was published)", name, err, 2*maxPublishBody)
			}
			if len(problems) > 0 {
				shown := problems[:min(len(problems), 20)]
				more := ""
				if len(problems) > len(shown) {
					more = fmt.Sprintf("\n\t... and %d more", len(problems)-len(shown))
				}
				return usageErr("%s\n\t(%d problem(s); nothing was published; --allow-invalid sends such messages on purpose)",
					strings.Join(shown, "\n\t")+more, len(problems))
			}
			if skip > len(msgs) {
				return usageErr("--skip %d: %s has only %d message(s)", skip, name, len(msgs))
			}
			ctx := cmd.Context()
			b, err := openLastingBroker(brokerURL, "publish")
			if err != nil {
				return err
			}
			defer b.Close()
			pub, err := b.Publisher(ctx)
			if err != nil {
				return err
			}
			created := b.streamCreated(ctx, queue)
			var bar *progress
			if isTerminal(cmd.ErrOrStderr()) && !j {
				bar = &progress{w: cmd.ErrOrStderr(), n: len(msgs), last: -1}
			}
			for i := skip; i < len(msgs); i++ {
				m := msgs[i]
				if err := pub.Publish(ctx, queue, m.h, m.body); err != nil {
					if ctx.Err() != nil {
						return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: %d of %d message(s) confirmed by the broker (%d skipped); resume with --skip %d", i-skip, len(msgs)-skip, skip, i)}
					}
					return fmt.Errorf("published %d of %d message(s) to %s; message %d failed: %w\n\tresume with --skip %d", i, len(msgs), queue, i+1, err, i)
				}
				bar.set(i + 1)
			}
			stream := created()
			if j {
				rep := map[string]any{"queue": queue, "broker": b.t.Display, "published": len(msgs) - skip, "skipped": skip, "total": len(msgs)}
				if stream != "" {
					rep["createdStream"] = stream
				}
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %d message(s) to %s on %s\n", len(msgs)-skip, queue, b.t.Display)
			if stream != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "created JetStream stream %s for %s: work-queue retention (a message stays until a consumer acknowledges it, then it is removed), file storage\n", stream, queue)
			}
			return nil
		},
	}
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL: stomp://, amqp://, nats:// (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "queue (or subject) to publish to (required)")
	c.Flags().StringVar(&file, "file", "", "JSON-lines file, '-' for stdin (required)")
	c.Flags().StringVar(&eventIDFrom, "event-id-from", "", "check each message's event id with this chain, as 'run --event-id-from' derives it (default: the eventId header)")
	c.Flags().BoolVar(&allowInvalid, "allow-invalid", false, "send messages without event id, with a bad event id or an over-size body (for tests)")
	c.Flags().IntVar(&skip, "skip", 0, "skip the first N messages (resume an interrupted publish)")
	o.register(c)
	return c
}
