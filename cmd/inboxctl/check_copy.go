package main

import (
	"context"
	"fmt"

	"github.com/inboxkit/inboxkit/inbox"
)

// maxCopyMessages bounds the messages copyQueueCheck browses.
const maxCopyMessages = 100000

// copyQueueCheck browses queue (a copy of the consumer's messages kept
// outside the database: a second queue the producer also feeds, a DLQ) on
// broker and reports the events among them that have no inbox row for the
// consumer. After a database failover with asynchronous replication these
// are the events whose commit, acknowledged to the broker, never reached
// the promoted standby: their inbox row and business row are gone
// together, so no other check sees them. The messages stay on the queue.
func copyQueueCheck(ctx context.Context, st *inbox.Store, consumer, brokerURL, queue string) (finding, error) {
	f := finding{Check: "missing-from-database", Meaning: fmt.Sprintf(
		"messages on the copy queue %s whose event has no inbox row: lost with a commit that never reached the database in use (a failover with asynchronous replication), or not consumed yet", queue)}
	b, err := openBroker(brokerURL, nil)
	if err != nil {
		return f, err
	}
	defer b.Close()
	ms, err := b.Browse(ctx, queue, maxCopyMessages)
	if err != nil {
		return f, fmt.Errorf("check: browse the copy queue %s: %w", queue, err)
	}
	q := st.Dialect().Rebind(`SELECT COUNT(*) FROM ` + st.Config().Table + ` WHERE EVENT_ID = ? AND CONSUMER_NAME = ?`)
	seen := map[string]bool{}
	var missing []string
	for _, m := range ms {
		id := m.Header("eventId")
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		var n int
		if err := st.DB().QueryRowContext(ctx, q, id, consumer).Scan(&n); err != nil {
			return f, fmt.Errorf("check: inbox row of %s: %w", id, err)
		}
		if n == 0 {
			missing = append(missing, id)
		}
	}
	f.Count, f.Samples = len(missing), sample(missing)
	return f, nil
}
