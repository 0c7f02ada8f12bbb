package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSingleActiveConsumer: with ?single-active-consumer=true the queue the
// adapter creates delivers to one consumer at a time; a second consumer
// gets nothing while the first is open, and when the first closes with
// deliveries unacknowledged, the second takes over with those first, in
// queue order, then the rest: no inversion across the takeover. Without
// the option the second consumer gets messages at once (the control that
// makes the test able to fail).
func TestSingleActiveConsumer(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		single      bool
	}{{"single-active", "?single-active-consumer=true", true}, {"quorum single-active", "?queue-type=quorum&single-active-consumer=true", true}, {"competing", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := testQueue(t)
			cfg := Config{URL: testURL + tc.query, Queue: q, Prefetch: 4}
			a := open(t, cfg)
			b := open(t, cfg)
			if got := a.cfg.SingleActiveConsumer; got != tc.single {
				t.Fatalf("SingleActiveConsumer = %v from %q", got, tc.query)
			}
			const n = 20
			for i := 1; i <= n; i++ {
				publish(t, a, q, map[string]string{"eventId": fmt.Sprintf("sac-%02d", i), "seq": strconv.Itoa(i)}, "x")
			}
			// Whichever is active takes the first deliveries; the other
			// gets nothing while it is open.
			first, other := a, b
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			d, err := a.Receive(ctx)
			cancel()
			if err != nil {
				first, other = b, a
				d = receive(t, b, 5*time.Second)
			}
			seqOf := func(m interface{ Header(string) string }) int {
				s, _ := strconv.Atoi(m.Header("seq"))
				return s
			}
			ack := func(dd interface{ Ack(context.Context) error }) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := dd.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.single {
				// Competing: which one gets #1 is the broker's choice;
				// the other must get deliveries too.
				ack(d)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := other.Receive(ctx); err != nil {
					t.Fatalf("competing consumers: the second got nothing (%v)", err)
				}
				return
			}
			if got := seqOf(d.Message()); got != 1 {
				t.Fatalf("first delivery #%d, want #1", got)
			}
			ack(d)
			d2 := receive(t, first, 5*time.Second) // #2, left unacknowledged
			if got := seqOf(d2.Message()); got != 2 {
				t.Fatalf("second delivery #%d, want #2", got)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
			od, err := other.Receive(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the standby got a delivery (#%d) while the active consumer was open", seqOf(od.Message()))
			}
			// The active one goes without acknowledging #2 (and what it
			// prefetched); the standby takes over from #2 in order.
			_ = first.Close()
			for want := 2; want <= n; want++ {
				d := receive(t, other, 10*time.Second)
				if got := seqOf(d.Message()); got != want {
					t.Fatalf("after the takeover: #%d, want #%d", got, want)
				}
				ack(d)
			}
		})
	}
}

// A value of single-active-consumer other than true or false is refused,
// naming the choices.
func TestSingleActiveConsumerBadValue(t *testing.T) {
	cfg := Config{URL: testURL + "?single-active-consumer=yes"}
	err := cfg.validate()
	if err == nil || !strings.Contains(err.Error(), "use true or false") {
		t.Fatalf("validate = %v, want an error naming true or false", err)
	}
}
