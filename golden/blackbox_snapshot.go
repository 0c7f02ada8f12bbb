package golden

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
)

func (r *bbRun) queues() []string {
	return []string{r.queue, "DLQ." + r.queue, r.queue + ".REJECTED"}
}

// final writes the snapshot: calls, tables, inbox, queues.
func (r *bbRun) final(ctx context.Context) error {
	r.mu.Lock()
	calls := slices.Clone(r.svc.calls)
	unused, during := r.svc.unused()
	unused = append(unused, during...)
	r.mu.Unlock()
	r.out.calls(calls)
	for _, t := range r.bb.Tables {
		q := fmt.Sprintf("SELECT %s FROM %s", strings.Join(t.Columns, ", "), t.Name)
		if err := r.out.query(ctx, r.db, "table "+t.Name, t.Name, t.Columns, q, r.normalize); err != nil {
			return err
		}
	}
	cols, err := r.inboxColumns(ctx)
	if err != nil {
		return fmt.Errorf("golden: inbox columns: %w", err)
	}
	if len(cols) > 0 {
		q := fmt.Sprintf("SELECT %s FROM INBOX_EVENT_PROCESSING", strings.Join(cols, ", "))
		if err := r.out.query(ctx, r.db, "inbox INBOX_EVENT_PROCESSING", "inbox", cols, q, r.normalize); err != nil {
			return err
		}
	} else {
		r.out.section("inbox")
		r.out.item("(none: the consumer created no INBOX_EVENT_PROCESSING table)")
	}
	if ok, err := r.hasOutbox(ctx); err != nil {
		return fmt.Errorf("golden: look for the outbox table: %w", err)
	} else if ok {
		q := fmt.Sprintf("SELECT %s FROM %s", strings.Join(outboxShown, ", "), outboxTable)
		if err := r.out.query(ctx, r.db, "outbox "+outboxTable, "outbox", outboxShown, q, r.normalize); err != nil {
			return err
		}
	}
	for i, q := range r.queues() {
		name := strings.ReplaceAll(q, r.queue, r.sc.Queue)
		title := "queue " + name
		if i == 0 {
			title += " (left on the broker)"
		}
		msgs, err := stomp.Browse(ctx, r.stompCfg, q, 0)
		if err != nil {
			return fmt.Errorf("golden: browse %s: %w", q, err)
		}
		shown := make([]Published, len(msgs))
		for j, m := range msgs {
			hdr := map[string]string{}
			for k, v := range m.Headers {
				if keepHeader(k) {
					hdr[k] = r.normalizeHeader(k, v)
				}
			}
			shown[j] = Published{Destination: name, Headers: hdr, Body: string(m.Body)}
			if i > 0 {
				r.out.tr.Published = append(r.out.tr.Published, shown[j])
				if i == 1 && hdr["inboxkit-dlq-reason"] == "" {
					r.out.tr.BrokerDeadLetters = append(r.out.tr.BrokerDeadLetters, r.messageName(hdr["eventId"], string(m.Body)))
				}
			}
		}
		r.out.section(title)
		r.out.messages(shown)
	}
	r.out.unused(unused)
	r.out.done(r.normalize)
	return nil
}

// normalize replaces what differs between recordings: the unique queue name,
// the service's URL with the instance in its path (its port; its host
// alone, as an outbox relay's errors name it), ids and times.
func (r *bbRun) normalize(text string) string {
	text = strings.ReplaceAll(text, r.queue, r.sc.Queue)
	// The instance in the URL's path goes too: an outbox row keeps the URL
	// of the instance that wrote it, whichever won a race.
	text = r.serviceRe.ReplaceAllString(text, "<"+r.bb.Service+" URL>")
	text = strings.ReplaceAll(text, strings.TrimSuffix(r.serviceURL, "/"+r.bb.Service+"/"), "<"+r.bb.Service+" host>")
	return scrubBlackBox(text)
}

// keepHeader selects the message headers the transcript shows: the
// scenario's own, inboxkit's dead-letter envelope, and ActiveMQ's
// dead-letter cause; never the broker's ids, times and flags.
func keepHeader(k string) bool {
	switch k {
	case "eventId", "correlationId", "dlqDeliveryFailureCause", "original-destination":
		return true
	case "inboxkit-dlq-first-failure", "inboxkit-dlq-last-failure", "inboxkit-dlq-time", "inboxkit-dlq-error":
		return false
	}
	return strings.HasPrefix(k, "inboxkit-dlq-")
}

var deliveryRe = regexp.MustCompile(`Delivery\[\d+\] exceeds redelivery policy limit`)

func (r *bbRun) normalizeHeader(k, v string) string {
	v = strings.ReplaceAll(v, r.queue, r.sc.Queue)
	if k == "dlqDeliveryFailureCause" {
		// "java.lang.Throwable: Delivery[5] exceeds redelivery policy limit:RedeliveryPolicy {...}, cause:..."
		if m := deliveryRe.FindString(v); m != "" {
			return m
		}
		return "(other cause)"
	}
	return v
}

// messageName finds the scenario message with this event id (or body).
func (r *bbRun) messageName(eventID, body string) string {
	for _, m := range r.sc.Messages {
		if eventID != "" && header(m, "eventId") == eventID || eventID == "" && m.Body == body {
			return m.Name
		}
	}
	return "(unknown message)"
}

var blackBoxIDRe = regexp.MustCompile(`\b(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})\b`)

// scrubBlackBox normalizes what a process makes up: random ids (UUIDs, 32
// hex digits) become <id> and times <time>, unnumbered, because their order
// and equality depend on timing the recorder does not control.
func scrubBlackBox(text string) string {
	text = blackBoxIDRe.ReplaceAllString(text, "<id>")
	return timeRe.ReplaceAllString(text, "<time>")
}

// drainQueues empties the recording's queues (they are unique to it).
func (r *bbRun) drainQueues() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := stomp.Dial(ctx, r.stompCfg.Addr, stomp.ConnOptions{HeartBeat: -1, Login: r.stompCfg.Login, Passcode: r.stompCfg.Passcode})
	if err != nil {
		return
	}
	defer c.Disconnect(ctx) //nolint:errcheck // cleanup
	for _, q := range r.queues() {
		sub, err := c.Subscribe(ctx, stomp.QueueDestination(q), stomp.SubscribeOptions{Ack: "auto", Prefetch: 100})
		if err != nil {
			return
		}
		for {
			nctx, ncancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := sub.Next(nctx)
			ncancel()
			if err != nil {
				break
			}
		}
		_ = sub.Unsubscribe(ctx)
	}
}
