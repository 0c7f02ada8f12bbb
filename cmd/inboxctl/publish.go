package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

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
	var brokerURL, queue, file string
	c := &cobra.Command{
		Use:   "publish --broker URL --queue NAME --file FILE",
		Short: "Publish events from a JSON-lines file ('-' for stdin)",
		Long: `publish sends one message per line of a JSON-lines file:

  {"headers": {"eventId": "ev-1", "correlationId": "order-1"}, "body": {"invoiceNo": "INV-1", ...}}

The body is a JSON object (sent as compact JSON) or a string (sent as it is, to
send malformed payloads). Empty lines are skipped. The whole file is checked
before anything is sent: a bad line is an error naming its line number (exit 2).
Each message is confirmed by the broker before the next is sent.`,
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
			var msgs []msg
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 8<<20)
			for n := 1; sc.Scan(); n++ {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				h, body, err := parseEventLine(line)
				if err != nil {
					return usageErr("%s line %d: %v (nothing was published)", name, n, err)
				}
				msgs = append(msgs, msg{h, body})
			}
			if err := sc.Err(); err != nil {
				return usageErr("read %s: %v (nothing was published)", name, err)
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
			for i, m := range msgs {
				if err := pub.Publish(ctx, queue, m.h, m.body); err != nil {
					return fmt.Errorf("published %d of %d message(s) to %s; message %d failed: %w", i, len(msgs), queue, i+1, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %d message(s) to %s on %s\n", len(msgs), queue, b.t.Display)
			return nil
		},
	}
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL: stomp://, amqp://, nats:// (default $"+envBroker+")")
	c.Flags().StringVar(&queue, "queue", "", "queue (or subject) to publish to (required)")
	c.Flags().StringVar(&file, "file", "", "JSON-lines file, '-' for stdin (required)")
	return c
}
