package rabbitmq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/consumer"
)

// frames is an amqp.Acknowledger that records the frames instead of
// sending them.
type frames struct {
	mu   sync.Mutex
	sent []string
}

func (f *frames) add(s string) error {
	f.mu.Lock()
	f.sent = append(f.sent, s)
	f.mu.Unlock()
	return nil
}

func (f *frames) Ack(tag uint64, multiple bool) error {
	return f.add(fmt.Sprintf("ack %d multiple=%v", tag, multiple))
}

func (f *frames) Nack(tag uint64, multiple, requeue bool) error {
	return f.add(fmt.Sprintf("nack %d multiple=%v", tag, multiple))
}

func (f *frames) Reject(tag uint64, requeue bool) error { return f.add(fmt.Sprintf("reject %d", tag)) }

func (f *frames) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sent
	f.sent = nil
	return s
}

// channelOf returns n deliveries with tags 1..n of one channel whose
// frames f records.
func channelOf(n int) ([]*delivery, *frames) {
	f, a := &frames{}, newAcks()
	ds := make([]*delivery, n)
	for i := range ds {
		ds[i] = newDelivery("q", false, amqp.Delivery{Acknowledger: f, DeliveryTag: uint64(i + 1)}, a)
	}
	return ds, f
}

func ackBatch(t *testing.T, ds ...*delivery) {
	t.Helper()
	cds := make([]consumer.Delivery, len(ds))
	for i, d := range ds {
		cds[i] = d
	}
	for i, err := range (&Adapter{}).AckBatch(context.Background(), cds) {
		if err != nil {
			t.Fatalf("AckBatch: delivery %d: %v", i, err)
		}
	}
}

func want(t *testing.T, f *frames, frames ...string) {
	t.Helper()
	if got := f.take(); !slices.Equal(got, frames) {
		t.Fatalf("frames sent = %q, want %q", got, frames)
	}
}

// TestAckBatchMultipleOnlyOverSettled: a batch goes out as one multiple
// acknowledgement only up to the first delivery of the channel that is
// neither in the batch nor settled (held by another goroutine, or waiting
// for its delayed requeue), because the broker's multiple flag would
// acknowledge that one too.
func TestAckBatchMultipleOnlyOverSettled(t *testing.T) {
	t.Run("whole batch", func(t *testing.T) {
		ds, f := channelOf(4)
		ackBatch(t, ds[2], ds[0], ds[1], ds[3]) // any order
		want(t, f, "ack 4 multiple=true")
	})
	t.Run("middle requeued later", func(t *testing.T) {
		ds, f := channelOf(5)
		if err := ds[2].Requeue(context.Background(), time.Hour); err != nil { // tag 3 held for its delay
			t.Fatal(err)
		}
		ackBatch(t, ds[0], ds[1], ds[3], ds[4])
		want(t, f, "ack 2 multiple=true", "ack 4 multiple=false", "ack 5 multiple=false")
	})
	t.Run("middle requeued before", func(t *testing.T) {
		ds, f := channelOf(5)
		if err := ds[2].Requeue(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		ackBatch(t, ds[0], ds[1], ds[3], ds[4])
		want(t, f, "nack 3 multiple=false", "ack 5 multiple=true")
	})
	t.Run("lower tag held elsewhere", func(t *testing.T) {
		ds, f := channelOf(6)
		ackBatch(t, ds[1], ds[2]) // tag 1 is in another goroutine's batch
		want(t, f, "ack 2 multiple=false", "ack 3 multiple=false")
		ackBatch(t, ds[4], ds[5]) // tag 4 not settled yet
		want(t, f, "ack 5 multiple=false", "ack 6 multiple=false")
		if err := ds[0].Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		want(t, f, "ack 1 multiple=false")
	})
	t.Run("after others settled", func(t *testing.T) {
		ds, f := channelOf(8)
		ackBatch(t, ds[1], ds[3]) // 1 and 3 held
		want(t, f, "ack 2 multiple=false", "ack 4 multiple=false")
		if err := ds[0].Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := ds[2].Requeue(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, f, "ack 1 multiple=false", "nack 3 multiple=false")
		ackBatch(t, ds[4], ds[5], ds[7]) // every tag below 7 settled or in the batch; 7 held
		want(t, f, "ack 6 multiple=true", "ack 8 multiple=false")
	})
	t.Run("settled twice", func(t *testing.T) {
		ds, f := channelOf(2)
		ackBatch(t, ds[0], ds[1])
		want(t, f, "ack 2 multiple=true")
		errs := (&Adapter{}).AckBatch(context.Background(), []consumer.Delivery{ds[0]})
		if len(errs) != 1 || errs[0] != ErrSettled {
			t.Fatalf("AckBatch of an acknowledged delivery = %v, want ErrSettled", errs)
		}
	})
}

// TestAcksBounded: a delivery never settled does not make the settled
// tags above it pile up without end: past maxSettledAhead the channel only
// sends single acknowledgements.
func TestAcksBounded(t *testing.T) {
	a := newAcks()
	for tag := uint64(2); tag <= maxSettledAhead+2; tag++ { // tag 1 held
		a.record(tag)
	}
	if !a.single || a.ahead != nil {
		t.Fatalf("after %d settled above a held tag: single = %v, %d remembered", maxSettledAhead+1, a.single, len(a.ahead))
	}
	if n := a.upTo([]uint64{1, maxSettledAhead + 3}); n != 0 {
		t.Fatalf("upTo = %d, want 0 (single acknowledgements only)", n)
	}
}

// TestAckBatchKeepsRequeuedMiddle runs a batch whose middle delivery waits
// for its delayed requeue against the broker: the batch's acknowledgement
// must leave it unacknowledged, so that it comes back, and the delivery
// after the batch (still held) must stay settleable on its channel.
func TestAckBatchKeepsRequeuedMiddle(t *testing.T) {
	q, _ := testQueue(t)
	a := open(t, Config{Queue: q, Prefetch: 10})
	for i := 1; i <= 5; i++ {
		publish(t, a, q, map[string]string{"n": fmt.Sprint(i)}, fmt.Sprint(i))
	}
	ds := make([]consumer.Delivery, 5)
	for i := range ds {
		ds[i] = receive(t, a, 5*time.Second)
		if got := string(ds[i].Message().Body); got != fmt.Sprint(i+1) {
			t.Fatalf("delivery %d is message %s", i+1, got)
		}
	}
	ctx := context.Background()
	if err := ds[2].Requeue(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i, err := range a.AckBatch(ctx, []consumer.Delivery{ds[0], ds[1], ds[3]}) {
		if err != nil {
			t.Fatalf("AckBatch: %d: %v", i, err)
		}
	}
	back := receive(t, a, 10*time.Second)
	if got := string(back.Message().Body); got != "3" || !back.Message().Redelivered {
		t.Fatalf("after the batch: message %s (redelivered %v) came back, want 3 redelivered", got, back.Message().Redelivered)
	}
	for _, d := range []consumer.Delivery{back, ds[4]} {
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack of message %s: %v", d.Message().Body, err)
		}
	}
	expectNothing(t, a, 300*time.Millisecond)
	if n, err := a.Depth(ctx, q); err != nil || n != 0 {
		t.Fatalf("Depth = %d, %v; want 0", n, err)
	}
}
