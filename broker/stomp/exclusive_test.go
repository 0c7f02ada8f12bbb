package stomp_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
			if !tc.exclusive {
				competing(t, ctx, first, other, n, seqOf)
				return
			}
			// Whichever subscribed first is active.
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			d, err := first.Receive(rctx)
			cancel()
			if err != nil {
				first, other = other, first
				d = receive(t, first, 5*time.Second)
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

// competing receives from both sources at once until the n deliveries
// are in: each must come once, and each source must get some. Which
// source gets #1 is the broker's choice (ActiveMQ does not promise it to
// the source whose SUBSCRIBE it confirmed first), so no order is asked
// for.
func competing(t *testing.T, ctx context.Context, a, b *stomp.Adapter, n int, seqOf func(consumer.Delivery) int) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[int]int{}
		per  [2]int
		wg   sync.WaitGroup
	)
	for i, s := range []*stomp.Adapter{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := s.Receive(rctx)
				if err != nil {
					return
				}
				if err := d.Ack(ctx); err != nil {
					t.Errorf("ack: %v", err)
				}
				mu.Lock()
				seen[seqOf(d)]++
				per[i]++
				all := len(seen) == n
				mu.Unlock()
				if all {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("competing consumers: %d of %d deliveries came in 15 s", len(seen), n)
	}
	for seq, k := range seen {
		if k != 1 {
			t.Errorf("competing consumers: #%d came %d times", seq, k)
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("competing consumers: one source got everything (%d and %d)", per[0], per[1])
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
