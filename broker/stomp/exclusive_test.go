package stomp_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
)

// TestExclusiveConsumer: ActiveMQ's exclusive consumer over STOMP
// (?exclusive=true), what per-key order across processes can rest on
// instead of message groups (docs/order.md). Two sources on one queue:
// one gets every delivery, the other nothing while the first is there;
// when the first goes with a delivery unacknowledged (closed, or killed:
// its connection breaks without a DISCONNECT, and it comes back as a
// standby), the other takes over from that delivery on, in queue order.
// Without the option the two compete.
func TestExclusiveConsumer(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		exclusive   bool
		kill        bool
	}{{"closed", "?exclusive=true", true, false}, {"killed", "?exclusive=true", true, true}, {"competing", "", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			ctx := testCtx(t)
			cfg := b.cfg
			cfg.URL, cfg.Prefetch = "stomp://"+cfg.Addr+tc.query, 4
			first, other := newSource(t, cfg), newSource(t, cfg)
			const n = 20
			for i := 1; i <= n; i++ {
				if err := b.pub.Publish(ctx, cfg.Queue, map[string]string{"eventId": fmt.Sprintf("ex-%02d", i), "seq": strconv.Itoa(i)}, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			seqOf := func(d consumer.Delivery) int {
				s, _ := strconv.Atoi(d.Message().Header("seq"))
				return s
			}
			ack := func(d consumer.Delivery) {
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Whichever subscribed first is active.
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			d, err := first.Receive(rctx)
			cancel()
			if err != nil {
				first, other = other, first
				d = receive(t, first, 5*time.Second)
			}
			if !tc.exclusive {
				// Competing: which one gets #1 is the broker's choice
				// (not always the first to subscribe); the other must
				// get deliveries too.
				ack(d)
				if _, err := other.Receive(ctx); err != nil {
					t.Fatalf("competing consumers: the second got nothing (%v)", err)
				}
				return
			}
			if got := seqOf(d); got != 1 {
				t.Fatalf("first delivery #%d, want #1", got)
			}
			ack(d)
			if d2 := receive(t, first, 5*time.Second); seqOf(d2) != 2 { // #2, left unacknowledged
				t.Fatalf("second delivery #%d, want #2", seqOf(d2))
			}
			rctx, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
			od, err := other.Receive(rctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the standby got a delivery (#%d) while the exclusive consumer was there", seqOf(od))
			}
			if tc.kill {
				old := first.Conn()
				_ = old.NetConn().Close() // as kill -9: no DISCONNECT, no UNSUBSCRIBE
				<-old.Done()
			} else {
				_ = first.Close()
			}
			for want := 2; want <= n; want++ {
				d := receive(t, other, 10*time.Second)
				if got := seqOf(d); got != want {
					t.Fatalf("after the takeover: #%d, want #%d", got, want)
				}
				ack(d)
			}
			if tc.kill {
				// The killed one reconnected as a standby: nothing for it.
				if err := b.pub.Publish(ctx, cfg.Queue, map[string]string{"eventId": "ex-last", "seq": strconv.Itoa(n + 1)}, []byte("x")); err != nil {
					t.Fatal(err)
				}
				if d := receive(t, other, 10*time.Second); seqOf(d) != n+1 {
					t.Fatalf("after the takeover: #%d, want #%d", seqOf(d), n+1)
				} else {
					ack(d)
				}
				rctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
				if d, err := first.Receive(rctx); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("the restarted consumer got a delivery (%v, %v) while the other one is exclusive", d, err)
				}
			}
		})
	}
}

// A value of exclusive other than true or false is refused, naming the
// choices.
func TestExclusiveBadValue(t *testing.T) {
	_, err := stomp.Open(context.Background(), stomp.Config{URL: "stomp://127.0.0.1:61613?exclusive=yes", Queue: "q"})
	if err == nil || !strings.Contains(err.Error(), "use true or false") {
		t.Fatalf("Open = %v, want an error naming true or false", err)
	}
}
