package consumertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
)

// testOrderParkKey (issue 28, item 4, --on-poison park-key): the head of
// key "poison" fails technically on every attempt and is dead-lettered at
// the backout threshold; with consumer.OnPoisonParkKey its key's three
// later events follow it to the dead-letter queue, in arrival order, with
// reason KEY_PARKED and without running, while the other keys' events
// run. A second consumer (as another process would: a new Consumer on a
// new source, after the first stopped) receives a fourth event of the key
// and parks it too, by the inbox's state alone. The operator then replays
// the key's dead letters (its DEAD_LETTERED rows, as inboxctl dlq replay
// --key selects them): all five run in order, head first, and the key is
// no longer parked.
func testOrderParkKey(t *testing.T, e *env) {
	const others, perOther, key = 4, 5, "poison"
	ev := func(i int) string { return fmt.Sprintf("park-%s-%02d", key, i) }
	e.send(t, ev(1), "corr-poison", Event{Amount: 1}.Body(), orderHeader, key)
	for i := range perOther {
		for k := range others {
			e.send(t, fmt.Sprintf("park-%s-%02d", orderKeyName(k), i+1), "corr-other", Event{Amount: i + 1}.Body(), orderHeader, orderKeyName(k))
		}
	}
	for i := 2; i <= 4; i++ {
		e.send(t, ev(i), "corr-poison", Event{Amount: i}.Body(), orderHeader, key)
	}
	var failing atomic.Bool
	failing.Store(true)
	var mu sync.Mutex
	var log []string // the event ids run to success, in order
	hook := func(ctx context.Context, _ consumer.Source, m inboxkit.Message) error {
		if m.ID == ev(1) && failing.Load() {
			return classify.RetryAfter(50*time.Millisecond, errors.New("consumertest: the head of key poison fails until it is fixed"))
		}
		mu.Lock()
		defer mu.Unlock()
		log = append(log, m.ID)
		return nil
	}
	ran := func(prefix string) []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, id := range log {
			if strings.HasPrefix(id, prefix) {
				out = append(out, id)
			}
		}
		return out
	}
	deadLettered := func(r *run, reason string) []string {
		var out []string
		for _, s := range r.rec.list() {
			if s.Action == inboxkit.ActionDeadLetter && s.Err == nil && s.Result.Reason == reason {
				out = append(out, s.Message.ID)
			}
		}
		return out
	}
	keyFunc, err := consumer.ParseOrderKey("header:" + orderHeader)
	if err != nil {
		t.Fatal(err)
	}
	opts := runOpts{concurrency: 4, hook: hook, orderKey: keyFunc, onPoison: consumer.OnPoisonParkKey}
	r1 := e.start(t, opts)
	e.waitFor(t, "the other keys run and the poison key's 3 later events parked", func() bool {
		return len(ran("park-cust-")) >= others*perOther && len(deadLettered(r1, inboxkit.ReasonKeyParked)) >= 3
	}, func() string { return summary(r1.rec.list()) })
	if err := r1.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := ran("park-" + key); len(got) != 0 {
		t.Errorf("events of the parked key ran: %v", got)
	}
	if got, want := deadLettered(r1, inboxkit.ReasonKeyParked), []string{ev(2), ev(3), ev(4)}; !slices.Equal(got, want) {
		t.Errorf("parked %v, want %v in arrival order", got, want)
	}
	if got := deadLettered(r1, inboxkit.ReasonMaxAttemptsExceeded); !slices.Equal(got, []string{ev(1)}) {
		t.Errorf("dead-lettered for their attempts: %v, want the head %s", got, ev(1))
	}
	checkParked(t, e, key, 4, 3, ev(1))

	// Another process: a fresh consumer gets a later event of the key
	// while it is parked, and an event of another key.
	r2 := e.start(t, opts)
	e.send(t, ev(5), "corr-poison", Event{Amount: 5}.Body(), orderHeader, key)
	e.send(t, "park-after-01", "corr-other", Event{Amount: 1}.Body(), orderHeader, "after")
	e.waitFor(t, "the second consumer parks "+ev(5)+" and runs park-after-01", func() bool {
		return len(deadLettered(r2, inboxkit.ReasonKeyParked)) >= 1 && len(ran("park-after-")) >= 1
	}, func() string { return summary(r2.rec.list()) })
	if got := ran("park-" + key); len(got) != 0 {
		t.Errorf("events of the parked key ran: %v", got)
	}
	checkParked(t, e, key, 5, 4, ev(1))

	// The operator fixes the cause and replays the key's dead letters.
	failing.Store(false)
	keys, err := e.store.KeyEvents(e.ctx, e.name, key)
	if err != nil {
		t.Fatal(err)
	}
	selected := map[string]bool{}
	for _, k := range keys {
		selected[k.EventID] = true
	}
	src := e.b.NewSource(t, e.dlq)
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	rep, err := consumer.Replay(ctx, consumer.ReplayConfig{DLQ: src, Publisher: e.pub, Store: e.store, IdleTimeout: e.b.IdleTimeout,
		SelectFunc: func(env dlq.Envelope) bool { return env.Consumer == e.name && selected[env.EventID] }})
	cancel()
	src.Close()
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	want := []string{ev(1), ev(2), ev(3), ev(4), ev(5)}
	if !slices.Equal(rep.Replayed, want) {
		t.Errorf("replayed %v, want %v (the dead-letter queue's order: the head, then the parked in arrival order)", rep.Replayed, want)
	}
	e.waitFor(t, "the replayed events run", func() bool { return len(ran("park-"+key)) >= len(want) },
		func() string { return summary(r2.rec.list()) })
	if err := r2.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := ran("park-" + key); !slices.Equal(got, want) {
		t.Errorf("the poison key's events ran as %v, want %v", got, want)
	}
	checkParked(t, e, key, 0, 0, "")
	if parked, err := e.store.KeyParked(e.ctx, inbox.ParkCheck{ConsumerName: e.name, OrderKey: key, EventID: "park-poison-06"}); err != nil || parked {
		t.Errorf("KeyParked after the replay: %v, %v; want false", parked, err)
	}
	if c := e.counts(t); c[inboxkit.StatusProcessed] != others*perOther+1+len(want) || c[inboxkit.StatusDeadLettered] != 0 {
		t.Errorf("rows by status %v, want %d PROCESSED and none DEAD_LETTERED", c, others*perOther+1+len(want))
	}
	e.expectEmpty(t, e.dlq)
	e.expectEmpty(t, e.queue)
	t.Logf("%s/%s batch %d: head dead-lettered after %d attempts, 4 later events of its key parked in order (one by a second consumer), %d of other keys ran; replayed, 5 run in order",
		e.b.Name, e.backend, e.batch, maxAttempts, others*perOther+1)
}

// checkParked checks what Store.ParkedKeys says of key: its dead letters,
// the parked ones among them and its head; none at all when deadLetters
// is 0.
func checkParked(t *testing.T, e *env, key string, deadLetters, parked int64, head string) {
	t.Helper()
	ks, err := e.store.ParkedKeys(e.ctx, e.name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if deadLetters == 0 {
		if len(ks) != 0 {
			t.Errorf("parked keys %+v, want none", ks)
		}
		return
	}
	if len(ks) != 1 || ks[0].OrderKey != key || ks[0].DeadLetters != deadLetters || ks[0].Parked != parked || ks[0].Head != head {
		t.Errorf("parked keys %+v, want %s with %d dead letters, %d parked, head %s", ks, key, deadLetters, parked, head)
	}
}
