package brokerurl_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
)

// Every process of one consumer name (every `inboxctl run` with the same
// --name) shares JetStream's durable consumer. One process holding its
// prefetch unacknowledged, as a killed process does until AckWait, must not
// stop the others: the torture rig's NATS run stalled for AckWait after
// every death while the durable's MaxAckPending was one process's prefetch.
func TestJetStreamSourcesShareTheDurable(t *testing.T) {
	b, err := brokerurl.Open("embedded:"+filepath.Join(t.TempDir(), "js"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.AckWait = 10 * time.Minute // a held delivery does not come back during the test
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	first, err := b.Source(ctx, "orders", "worker", 1)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := b.Publisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := pub.Publish(ctx, "orders", map[string]string{"eventId": fmt.Sprint("e", i)}, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := first.Receive(ctx); err != nil { // held, never settled
		t.Fatal(err)
	}
	second, err := b.Source(ctx, "orders", "worker", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Far less than AckWait: only a blocked durable waits this long.
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if _, err := second.Receive(rctx); err != nil {
		t.Fatalf("a second source of the consumer received nothing while the first held its one delivery: %v\n\t(the durable's MaxAckPending must leave room for the group, not be one process's prefetch)", err)
	}
}
