package stomp_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
)

// TestMessageGroupsPinAndMove: ActiveMQ message groups over STOMP, what
// per-key order across processes rests on (docs/order.md). Messages
// published with JMSXGroupID (8 groups, a sequence number per group) to a
// queue with two consumers: every group stays on one consumer; then one
// consumer closes with deliveries unacknowledged, and its groups move to
// the other, which gets them from the first unacknowledged one on, in
// order. The log of acknowledgements shows every group's sequence once
// and rising. The received messages carry JMSXGroupID (HeaderGroup).
func TestMessageGroupsPinAndMove(t *testing.T) {
	b := setup(t)
	ctx := testCtx(t)
	cfg := b.cfg
	cfg.Prefetch = 4
	a1, a2 := newSource(t, cfg), newSource(t, cfg)
	const groups, perPhase = 8, 10
	next := make([]int, groups)
	publish := func() {
		for range perPhase {
			for g := range groups {
				next[g]++
				h := map[string]string{stomp.HeaderJMSXGroupID: fmt.Sprintf("grp-%d", g), "eventId": fmt.Sprintf("g%d-%d", g, next[g]), "seq": strconv.Itoa(next[g])}
				if err := b.pub.Publish(ctx, cfg.Queue, h, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type entry struct {
		consumer int
		group    string
		seq      int
	}
	var mu sync.Mutex
	var log []entry
	acked := func() int { mu.Lock(); defer mu.Unlock(); return len(log) }
	// consume acknowledges what c receives until stop; with holdAfter > 0
	// it keeps the first delivery past that sequence unacknowledged and
	// returns.
	consume := func(c int, s *stomp.Adapter, stop <-chan struct{}, holdAfter int) {
		for {
			rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			d, err := s.Receive(rctx)
			cancel()
			select {
			case <-stop:
				return
			default:
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			if err != nil {
				return // closed
			}
			m := d.Message()
			seq, _ := strconv.Atoi(m.Header("seq"))
			if m.Header(stomp.HeaderJMSXGroupID) == "" {
				t.Errorf("message %s arrived without JMSXGroupID", m.Header("eventId"))
			}
			if holdAfter > 0 && seq > holdAfter {
				return // held: not acknowledged, the consumer closes
			}
			if err := d.Ack(ctx); err != nil {
				t.Errorf("ack: %v", err)
				return
			}
			mu.Lock()
			log = append(log, entry{c, m.Header(stomp.HeaderJMSXGroupID), seq})
			mu.Unlock()
		}
	}
	wait := func(n int) {
		deadline := time.Now().Add(15 * time.Second)
		for acked() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages acknowledged after 15s", acked(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Phase 1: both consumers; every group on one of them.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); consume(1, a1, stop, 0) }()
	go func() { defer wg.Done(); consume(2, a2, stop, 0) }()
	publish()
	wait(groups * perPhase)
	close(stop)
	wg.Wait()
	owner := map[string]int{}
	for _, e := range log {
		if o, ok := owner[e.group]; ok && o != e.consumer {
			t.Errorf("group %s on consumer %d and %d", e.group, o, e.consumer)
		}
		owner[e.group] = e.consumer
	}
	var on1 []string
	for g, o := range owner {
		if o == 1 {
			on1 = append(on1, g)
		}
	}
	if len(on1) == 0 || len(on1) == groups {
		t.Fatalf("groups by consumer %v: the broker gave all groups to one consumer, the move cannot be seen", owner)
	}

	// Phase 2: consumer 1 takes a delivery of phase 2 and closes without
	// acknowledging it (and what it prefetched); its groups move to 2.
	publish()
	done1 := make(chan struct{})
	go func() { defer close(done1); consume(1, a1, nil, perPhase) }()
	<-done1
	a1.Close()
	stop = make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); consume(2, a2, stop, 0) }()
	wait(2 * groups * perPhase)
	close(stop)
	wg.Wait()

	last := map[string]int{}
	for i, e := range log {
		if e.seq != last[e.group]+1 {
			t.Errorf("log[%d]: %s #%d after #%d", i, e.group, e.seq, last[e.group])
		}
		last[e.group] = e.seq
		if i >= groups*perPhase && e.consumer != 2 {
			t.Errorf("log[%d]: %s #%d acknowledged by consumer %d after it closed", i, e.group, e.seq, e.consumer)
		}
	}
	t.Logf("groups on consumer 1 before it closed: %v; all %d messages in order per group", on1, len(log))
}

// A requeued copy stays in its message group: Requeue sends the copy with
// JMSXGroupID (read back from HeaderGroup), so a JMSXGroupID order key
// reads it again and ActiveMQ keeps it with its group.
func TestRequeueKeepsGroup(t *testing.T) {
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{stomp.HeaderJMSXGroupID: "grp-r", "eventId": "r-1"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, b.cfg)
	d := receive(t, s, 10*time.Second)
	if got := d.Message().Header(stomp.HeaderJMSXGroupID); got != "grp-r" {
		t.Fatalf("JMSXGroupID = %q, want grp-r", got)
	}
	if err := d.Requeue(ctx, 0); err != nil {
		t.Fatal(err)
	}
	d = receive(t, s, 10*time.Second)
	m := d.Message()
	if m.Header(stomp.HeaderJMSXGroupID) != "grp-r" || m.Header(stomp.HeaderGroup) != "grp-r" || !m.Redelivered {
		t.Fatalf("copy: JMSXGroupID %q, %s %q, redelivered %v", m.Header(stomp.HeaderJMSXGroupID), stomp.HeaderGroup, m.Header(stomp.HeaderGroup), m.Redelivered)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}
