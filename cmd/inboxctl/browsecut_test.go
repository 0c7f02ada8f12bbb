package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
)

// TestNoteBrowseCut: a browse that stopped where the broker stops a
// browse, not where --limit asked, says the queue may hold more.
func TestNoteBrowseCut(t *testing.T) {
	stomp := &broker{t: target.Broker{Kind: target.STOMP}}
	rabbit := &broker{t: target.Broker{Kind: target.AMQP}}
	for _, c := range []struct {
		name     string
		b        *broker
		n, limit int
		want     string // "" for no note
	}{
		{"ActiveMQ page, no limit", stomp, 400, 0, "maxBrowsePageSize"},
		{"ActiveMQ page under --limit", stomp, 400, 1000, "maxBrowsePageSize"},
		{"ActiveMQ, --limit reached", stomp, 400, 400, ""},
		{"ActiveMQ, fewer than a page", stomp, 399, 0, ""},
		{"RabbitMQ, all it is handed", rabbit, brokerurl.BrowseAll, 0, "the most a browse is handed"},
		{"RabbitMQ, all it is handed, under --limit", rabbit, brokerurl.BrowseAll, brokerurl.BrowseAll + 1, "the most a browse is handed"},
		{"RabbitMQ, --limit reached", rabbit, brokerurl.BrowseAll, brokerurl.BrowseAll, ""},
		{"RabbitMQ 1000, once its cut", rabbit, 1000, 0, ""},
		{"RabbitMQ 400", rabbit, 400, 0, ""},
	} {
		var w strings.Builder
		c.b.noteBrowseCut(&w, "DLQ.q", c.n, c.limit)
		if got := w.String(); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: note %q, want one with %q", c.name, got, c.want)
		}
	}
}

// TestBrowseNotesTheBrokersCut: every command's browse (broker.Browse)
// says when a list may have been cut by the broker, not only dlq list's.
// A queue of exactly 400 messages on ActiveMQ looks like a default
// browse page to it; a limit of 400 asked for that many.
func TestBrowseNotesTheBrokersCut(t *testing.T) {
	if testing.Short() {
		t.Skip("400 messages on ActiveMQ; skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := openBroker("stomp://"+stompAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	queue := fmt.Sprintf("inboxctl.browsecut.%d", time.Now().UnixNano())
	pub, err := b.Publisher(ctx)
	if err != nil {
		t.Fatalf("ActiveMQ not reachable at %s (scripts/activemq start): %v", stompAddr, err)
	}
	for i := range activeMQBrowsePage {
		if err := pub.Publish(ctx, queue, map[string]string{"eventId": fmt.Sprint("e-", i)}, []byte("dead")); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { drainSTOMP(t, b, queue) })
	for _, c := range []struct {
		limit int
		want  string
	}{{0, "maxBrowsePageSize"}, {activeMQBrowsePage, ""}} {
		var w strings.Builder
		b.notes = &w
		ms, err := b.Browse(ctx, queue, c.limit)
		if err != nil || len(ms) != activeMQBrowsePage {
			t.Fatalf("Browse(limit %d) = %d messages, %v; want %d", c.limit, len(ms), err, activeMQBrowsePage)
		}
		if got := w.String(); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Browse(limit %d) noted %q, want a note with %q", c.limit, got, c.want)
		}
	}
}

// drainSTOMP takes every message off an ActiveMQ queue (a queue cannot be
// deleted over STOMP).
func drainSTOMP(t *testing.T, b *broker, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := b.Broker.Source(ctx, queue, "drain", 100)
	if err != nil {
		t.Logf("drain %s: %v", queue, err)
		return
	}
	defer src.Close()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		d, err := src.Receive(rctx)
		rcancel()
		if err != nil {
			return
		}
		_ = d.Ack(ctx)
	}
}
