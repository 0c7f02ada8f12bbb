package main

import (
	"strings"
	"testing"

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
