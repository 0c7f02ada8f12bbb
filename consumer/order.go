package consumer

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
)

// orderer is Run's scheduler when Config.OrderKeyFunc is set: one receiver
// takes deliveries in, Config.Concurrency workers run them. Its invariants:
//
//   - The deliveries of one key form a line in arrival order; only the
//     line's head is ever in a worker's hands, so a key's deliveries run
//     one at a time, in arrival order, and a batch holds at most one
//     delivery of a key.
//   - The head leaves its line only once it is settled for good (processed,
//     duplicate, rejected, dead-lettered). When the runtime settles it with
//     a requeue (a technical failure, or an outcome the inbox could not
//     record), the requeue does not reach the broker: the head stays in
//     hand, unacknowledged, and is run again after the requeue's delay,
//     while the key's later deliveries wait in their line, unacknowledged.
//     Its attempts are counted by the inbox as for a broker redelivery, so
//     the backout threshold dead-letters it and the key goes on.
//   - With Config.OnPoison OnPoisonParkKey, a keyed head is run only when
//     its key is not parked (inbox.Store.KeyParked, asked with the head in
//     a worker's hands, every earlier delivery of the key in this process
//     settled); otherwise it is dead-lettered with reason KEY_PARKED, so a
//     parked key's line goes to the dead-letter queue in arrival order
//     (see parked).
//   - Deliveries without a key run as soon as a worker is free.
//   - At most limit deliveries are held; the receiver waits for room.
//   - When Run's ctx is done, the workers finish the deliveries in their
//     hands, and every delivery still in a line is handed back to the
//     broker (Requeue without delay), each key's in arrival order; a
//     PlaceKeeper is left unsettled instead, for Run's Source.Close.
type orderer struct {
	c     *Consumer
	limit int

	mu      sync.Mutex
	lines   map[string]*line
	n       int           // deliveries held
	seq     uint64        // arrival number of the last delivery taken in
	changed chan struct{} // closed and replaced at every change
}

// line is the deliveries of one key in arrival order; q[0] is the head.
type line struct {
	q    []*held
	busy bool      // the head is in a worker's hands
	due  time.Time // the head runs again not before due (after a requeue)
}

// held is one delivery the orderer holds.
type held struct {
	d     Delivery         // the broker's
	m     inboxkit.Message // Consumer.Message of d, made at its arrival
	key   string           // its line's: "k" + the order key, or "u" + seq without one (a line of its own)
	keyed bool             // it has an order key
	seq   uint64
	id    uint64 // Consumer.hold's
	trial bool   // the outage's trial, reported at its first settlement
	tries int    // times handled so far
	// requeue is set when the runtime settled the delivery with a
	// requeue (see heldDelivery.Requeue), with its delay.
	requeue bool
	delay   time.Duration
}

// OrderHeld is the number of deliveries Run holds at most with
// Config.OrderKeyFunc set, running or waiting for their key: 4 ×
// concurrency × batchSize, at least 16. Set the broker's prefetch to it:
// with less, the waiting deliveries of a key whose head is retried can
// fill the prefetch and stop the intake of the other keys.
func OrderHeld(concurrency, batchSize int) int {
	return max(4*concurrency*batchSize, 16)
}

func newOrderer(c *Consumer) *orderer {
	return &orderer{
		c: c, limit: OrderHeld(c.cfg.Concurrency, c.cfg.BatchSize),
		lines: map[string]*line{}, changed: make(chan struct{}),
	}
}

// signal wakes every waiter; o.mu is held.
func (o *orderer) signal() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// run is Run's intake and workers in ordered mode: it returns once ctx is
// done (or the source failed: its error) and the workers finished, after
// handing back what is still held.
func (o *orderer) run(ctx, work context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range o.c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.work(ctx, work)
		}()
	}
	err := o.receive(ctx)
	cancel() // a receive error stops the workers too
	wg.Wait()
	o.handBack(context.WithoutCancel(work))
	return err
}

// receive takes deliveries in while there is room, until ctx is done.
func (o *orderer) receive(ctx context.Context) error {
	for {
		if !o.room(ctx) {
			return nil
		}
		d, _, trial, err := o.c.next(ctx)
		if d == nil {
			return err
		}
		m := o.c.Message(d)
		h := &held{d: d, m: m, key: "k" + m.OrderKey, keyed: m.OrderKey != "", trial: trial, id: o.c.hold(m)}
		o.mu.Lock()
		o.seq++
		h.seq = o.seq
		if !h.keyed {
			h.key = fmt.Sprintf("u%d", h.seq)
		}
		l := o.lines[h.key]
		if l == nil {
			l = &line{}
			o.lines[h.key] = l
		}
		l.q = append(l.q, h)
		o.n++
		o.signal()
		o.mu.Unlock()
	}
}

// room waits until fewer than limit deliveries are held; false once ctx
// is done.
func (o *orderer) room(ctx context.Context) bool {
	for {
		o.mu.Lock()
		ok, ch := o.n < o.limit, o.changed
		o.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// work runs the heads it takes until ctx is done; deliveries in its hands
// finish with work's context.
func (o *orderer) work(ctx, work context.Context) {
	c := o.c
	for {
		hs := o.take(ctx)
		if len(hs) == 0 {
			return
		}
		ss := make([]Settled, len(hs))
		var run []int // the heads that run: hs[run[k]]
		var ds []Delivery
		var ms []inboxkit.Message
		for i, h := range hs {
			d := o.delivery(h)
			if s, ok := o.parked(work, d); ok {
				ss[i] = s
				continue
			}
			run, ds, ms = append(run, i), append(ds, d), append(ms, message(h, d))
		}
		switch {
		case len(ds) == 0:
		case c.eng.batches():
			for k, s := range c.eng.handleBatch(work, ds, ms) {
				ss[run[k]] = s
			}
		default:
			ss[run[0]] = c.handle(work, ds[0], ms[0])
		}
		o.settled(hs, ss)
	}
}

// take waits for ready heads (oldest arrival first) and marks their lines
// busy: one head, or up to BatchSize within BatchWait after the first when
// batches are on. It returns none once ctx is done.
func (o *orderer) take(ctx context.Context) []*held {
	want := 1
	if o.c.eng.batches() {
		want = o.c.cfg.BatchSize
	}
	var out []*held
	var batchEnd time.Time // set by the first head taken
	for {
		o.mu.Lock()
		now := time.Now()
		var next time.Time // the earliest due head after now
		for len(out) < want {
			h := o.ready(now, &next)
			if h == nil {
				break
			}
			o.lines[h.key].busy = true
			out = append(out, h)
		}
		ch := o.changed
		o.mu.Unlock()
		if len(out) > 0 && batchEnd.IsZero() {
			batchEnd = now.Add(o.c.cfg.BatchWait)
		}
		if len(out) == want || (len(out) > 0 && !now.Before(batchEnd)) {
			return out
		}
		if len(out) > 0 && (next.IsZero() || batchEnd.Before(next)) {
			next = batchEnd
		}
		var wake <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(next.Sub(now))
			wake = t.C
		}
		select {
		case <-ctx.Done():
			o.untake(out)
			out = nil
		case <-ch:
		case <-wake:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// untake gives taken heads back to their lines; ctx is done.
func (o *orderer) untake(hs []*held) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range hs {
		o.lines[h.key].busy = false
	}
}

// ready returns the oldest head that may run now, or nil; next is lowered
// to the due time of a head that may run later. o.mu is held.
func (o *orderer) ready(now time.Time, next *time.Time) *held {
	var best *held
	for _, l := range o.lines {
		if l.busy || len(l.q) == 0 {
			continue
		}
		if l.due.After(now) {
			if next.IsZero() || l.due.Before(*next) {
				*next = l.due
			}
			continue
		}
		if best == nil || l.q[0].seq < best.seq {
			best = l.q[0]
		}
	}
	return best
}

// settled records what the runtime did with the heads hs: a head settled
// for good leaves its line; a requeued one stays its line's head, due
// again after the requeue's delay (handed back with the rest if Run ends
// first).
//
// A head handed back because the runtime failed (an outage) waits the
// store's Retry.Redelivery backoff for its number of tries instead of the
// requeue's delay (that of a first attempt), so that a long outage is not
// retried at the first delay throughout; its attempts are not counted.
func (o *orderer) settled(hs []*held, ss []Settled) {
	for i, h := range hs {
		if h.trial {
			h.trial = false
			o.c.gate.trialDone(!handedBack(ss[i]))
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for i, h := range hs {
		l := o.lines[h.key]
		l.busy = false
		h.tries++
		if h.requeue {
			h.requeue = false
			if handedBack(ss[i]) {
				h.delay = o.c.requeueDelay(h.tries)
			}
			l.due = now.Add(h.delay)
			continue
		}
		l.q, l.due = l.q[1:], time.Time{}
		if len(l.q) == 0 {
			delete(o.lines, h.key)
		}
		o.n--
		o.c.release(h.id)
	}
	o.signal()
}

// handBack hands every delivery still held back to the broker, each key's
// in arrival order, after the workers stopped: by Requeue, or for a
// PlaceKeeper by leaving it to Run's Source.Close.
func (o *orderer) handBack(ctx context.Context) {
	o.mu.Lock()
	var all []*held
	for _, l := range o.lines {
		all = append(all, l.q...)
	}
	o.lines, o.n = map[string]*line{}, 0
	o.signal()
	o.mu.Unlock()
	slices.SortFunc(all, func(a, b *held) int { return cmp.Compare(a.seq, b.seq) })
	left := 0
	for _, h := range all {
		if pk, ok := h.d.(PlaceKeeper); ok && pk.ReturnsOnClose() {
			left++ // Run's Source.Close hands it back, at its place
			o.c.release(h.id)
			continue
		}
		if err := h.d.Requeue(ctx, 0); err != nil {
			o.c.cfg.Logger.Warn("order: handing back a held delivery failed (the broker delivers it again)",
				"consumer", o.c.cfg.Name, "event_id", h.m.ID, "error", err)
		}
		o.c.release(h.id)
	}
	if len(all) > 0 {
		o.c.cfg.Logger.Info(fmt.Sprintf("order: handed back %d deliveries held for their key (%d of them unacknowledged, by closing the source)", len(all), left), "consumer", o.c.cfg.Name)
	}
}

// delivery is what the runtime settles for h: the broker's delivery when
// it has no key or is oversize (dead-lettered by the broker, never
// requeued), else a heldDelivery.
func (o *orderer) delivery(h *held) Delivery {
	if ov, ok := h.d.(OversizeDelivery); ok {
		if size, _ := ov.Oversize(); size > 0 {
			return h.d
		}
	}
	if !h.keyed {
		return h.d
	}
	return heldDelivery{h}
}

// message is Consumer.Message of d, h's delivery as o.delivery gives it:
// h's message, and for a keyed delivery run again in process neither a
// broker redelivery nor a first delivery (see heldDelivery.Message).
func message(h *held, d Delivery) inboxkit.Message {
	m := h.m
	if _, ok := d.(heldDelivery); ok && h.tries > 0 {
		m.Redelivered, m.DeliveryCount, m.FirstDelivery = false, 0, false
	}
	return m
}

// parked settles d when its key is parked (Config.OnPoison is
// OnPoisonParkKey): ok reports that it did, and s is its settlement. Only a
// keyed delivery is asked about (a heldDelivery: not an oversize one, which
// the broker dead-letters). It is called for a head in a worker's hands, so
// every earlier delivery of its key in this process is settled: one that
// was dead-lettered has its row committed (rule 3: the commit before the
// acknowledgement), and the check sees it. K's line therefore goes to the
// dead-letter queue one head at a time, in arrival order.
func (o *orderer) parked(ctx context.Context, d Delivery) (Settled, bool) {
	if o.c.cfg.OnPoison != OnPoisonParkKey {
		return Settled{}, false
	}
	if _, ok := d.(heldDelivery); !ok {
		return Settled{}, false
	}
	return o.c.park(ctx, d)
}

// heldDelivery is a keyed delivery as the orderer hands it to the runtime:
// Ack acknowledges it; Requeue keeps it in hand (see orderer).
type heldDelivery struct{ h *held }

// Message is the broker's message; a delivery run again in process is no
// broker redelivery (nothing to pre-count) and no first delivery.
func (d heldDelivery) Message() inboxkit.Message {
	m := d.h.d.Message()
	if d.h.tries > 0 {
		m.Redelivered, m.DeliveryCount, m.FirstDelivery = false, 0, false
	}
	return m
}

func (d heldDelivery) Ack(ctx context.Context) error { return d.h.d.Ack(ctx) }

func (d heldDelivery) Requeue(_ context.Context, delay time.Duration) error {
	d.h.requeue, d.h.delay = true, delay
	return nil
}

// unwrap returns the broker's delivery of d (for a BatchAcker).
func unwrap(d Delivery) Delivery {
	if hd, ok := d.(heldDelivery); ok {
		return hd.h.d
	}
	return d
}
