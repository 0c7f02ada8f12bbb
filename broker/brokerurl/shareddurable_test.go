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
	// A held delivery does not come back during the test.
	b, ctx, first := threeOrders(t, 10*time.Minute, 0)
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

// With MaxAckPending 1 the durable hands out one delivery at a time across
// its sources: while a (killed) process holds the first, no other gets a
// later one, so the queue's order survives the crash (the outbox torture
// scenario's receivers on JetStream: docs/torture.md).
func TestJetStreamMaxAckPendingOneKeepsTheOrder(t *testing.T) {
	b, ctx, first := threeOrders(t, 2*time.Second, 1)
	d, err := first.Receive(ctx) // held, never settled: its process "died"
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Message().Header("eventId"); got != "e0" {
		t.Fatalf("first delivery %s, want e0", got)
	}
	second, err := b.Source(ctx, "orders", "worker", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Within AckWait nothing; after it e0 again, never e1 first.
	for _, want := range []string{"e0", "e1", "e2"} {
		d, err := second.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Message().Header("eventId"); got != want {
			t.Fatalf("second source received %s, want %s: a later message passed the one the first source held", got, want)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// threeOrders opens an embedded JetStream with the durable's AckWait and
// MaxAckPending, a first source of consumer "worker" on "orders", and
// publishes e0, e1, e2 there.
func threeOrders(t *testing.T, ackWait time.Duration, maxAckPending int) (*brokerurl.Broker, context.Context, brokerurl.Adapter) {
	t.Helper()
	b, err := brokerurl.Open("embedded:"+filepath.Join(t.TempDir(), "js"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	b.AckWait, b.MaxAckPending = ackWait, maxAckPending
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
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
	return b, ctx, first
}
