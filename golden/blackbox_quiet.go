package golden

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
)

// settle waits until the queue is empty, no outbox message is pending (a
// relay has yet to send it: after a crash, when its lease ends) and
// nothing observable changed for bb.Quiet. It fails when messages wait on the queue with no sign of life
// for bb.Stall while every instance is up (see BlackBox.Stall).
func (r *bbRun) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.bb.Timeout)
	defer cancel()
	var last string
	since := time.Now()
	alive, sent := since, r.proxy.Forwarded()
	for {
		if err := r.exited(); err != nil {
			return err
		}
		fp, queued, err := r.fingerprint(ctx)
		if err != nil {
			return err
		}
		if r.proxy.IsCut() {
			// A consumer that hands messages back while the database is
			// unreachable keeps them moving between the queue and the
			// broker's scheduler: only calls, processes and rows count.
			fp, _, _ = strings.Cut(fp, "|queues|")
			queued = 0
		}
		pending, err := r.outboxPending(ctx)
		if err != nil {
			return fmt.Errorf("golden: count the outbox's pending messages: %w", err)
		}
		if fp != last {
			last, since = fp, time.Now()
			alive = since
		} else if queued == 0 && pending == 0 && time.Since(since) >= r.bb.Quiet {
			return nil
		}
		if n := r.proxy.Forwarded(); n != sent {
			sent, alive = n, time.Now()
		}
		if queued > 0 {
			if up, ok := r.upSince(); ok && time.Since(later(alive, up, r.lastOutput())) >= r.bb.Stall {
				return fmt.Errorf("nothing consumed from queue %s for %s: %d message(s) wait there on the broker %s while every instance is up, with no call, no row, no byte to the database and no output; is the process consuming from another broker? Give the OpenWire address of this one (BlackBox.OpenWire, inboxctl golden --openwire)",
					r.queue, r.bb.Stall, queued, r.bb.Broker)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not quiet after %s (last state: %s)", r.bb.Timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func later(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func (r *bbRun) fingerprint(ctx context.Context) (string, int, error) {
	var b strings.Builder
	r.mu.Lock()
	fmt.Fprintf(&b, "calls=%d changes=%d held=%d;", len(r.svc.calls), r.changes, r.hold)
	r.mu.Unlock()
	tables := append(slices.Clone(r.bb.Tables), Table{Name: "inbox_event_processing"})
	for _, t := range tables {
		var n int
		if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.Name).Scan(&n); err != nil {
			if t.Name == "inbox_event_processing" {
				continue // no inbox (yet)
			}
			return "", 0, fmt.Errorf("golden: count %s: %w", t.Name, err)
		}
		fmt.Fprintf(&b, "%s=%d;", t.Name, n)
	}
	if ok, _ := r.hasOutbox(ctx); ok {
		var n int
		if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+outboxTable+" WHERE STATUS <> 'PENDING'").Scan(&n); err == nil {
			fmt.Fprintf(&b, "outbox settled=%d;", n)
		}
	}
	if cols, _ := r.inboxColumns(ctx); slices.Contains(cols, "STATUS") {
		rows, err := r.db.QueryContext(ctx, "SELECT STATUS FROM INBOX_EVENT_PROCESSING ORDER BY 1")
		if err == nil {
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				b.WriteString(s + ",")
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return "", 0, fmt.Errorf("golden: read the inbox's statuses: %w", err)
			}
		}
	}
	b.WriteString("|queues|")
	queued := 0
	for i, q := range r.queues() {
		msgs, err := stomp.Browse(ctx, r.stompCfg, q, 0)
		if err != nil {
			return "", 0, fmt.Errorf("golden: browse %s: %w", q, err)
		}
		if i == 0 {
			queued = len(msgs)
		}
		fmt.Fprintf(&b, "%s=%d;", q, len(msgs))
	}
	return b.String(), queued, nil
}
