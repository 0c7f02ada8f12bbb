package rabbitmq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/inboxkit/inboxkit/consumer"
)

var _ consumer.BatchAcker = (*Adapter)(nil)

// maxSettledAhead bounds the settled tags an acks keeps above its first
// unsettled one (a delivery held for long, e.g. by a handler that does not
// return). Beyond it the channel stops sending multiple acknowledgements
// instead of growing without end.
const maxSettledAhead = 1 << 14

// acks settles the deliveries of one consuming channel. It lets a batch go
// out as one basic.ack with the multiple flag, which acknowledges every
// unacknowledged delivery of the channel up to its tag, only where that
// acknowledges nothing but the batch: every tag up to it is in the batch or
// already settled. A delivery another goroutine still holds, or one whose
// requeue waits for its delay, is outside both and stops the multiple
// acknowledgement before it.
//
// RabbitMQ numbers the deliveries of a channel 1, 2, 3, ... An acks counts
// on that: a tag it has not seen settled is taken to be held, so were the
// numbers ever not consecutive, it would only send single acknowledgements.
//
// Every frame that settles a delivery of the channel is sent under mu, in
// the order the decisions are made: a multiple acknowledgement decided
// after a requeue of a tag below it must reach the broker after that
// requeue's nack, or it would acknowledge the requeued message.
type acks struct {
	mu sync.Mutex
	// done: every tag up to it is settled.
	done uint64
	// ahead: settled tags above done.
	ahead map[uint64]bool
	// single: ahead grew past maxSettledAhead; only single frames.
	single bool
}

func newAcks() *acks { return &acks{ahead: map[uint64]bool{}} }

// settle sends the frame that settles tag alone (an ack or a nack) and
// records the tag as settled.
func (a *acks) settle(tag uint64, send func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := send()
	a.record(tag)
	return err
}

// record notes tag as settled; a.mu is held.
func (a *acks) record(tag uint64) {
	if a.single {
		return
	}
	if tag != a.done+1 {
		a.ahead[tag] = true
		if len(a.ahead) > maxSettledAhead {
			a.single, a.ahead = true, nil
		}
		return
	}
	a.done = tag
	for a.ahead[a.done+1] {
		delete(a.ahead, a.done+1)
		a.done++
	}
}

// upTo returns how many of tags (sorted, unsettled) one multiple
// acknowledgement carrying tags[n-1] may settle: the first n, when every
// tag below tags[n-1] is one of them or settled. a.mu is held.
func (a *acks) upTo(tags []uint64) (n int) {
	if a.single {
		return 0
	}
	for t := a.done + 1; n < len(tags); t++ {
		switch {
		case tags[n] == t:
			n++
		case !a.ahead[t]:
			return n // t is held elsewhere, or waits for its requeue
		}
	}
	return n
}

// ackAll acknowledges ds, deliveries of this channel that nobody settled
// yet: the longest run of them that may go in one multiple acknowledgement
// does, the rest one by one. errs[i] is the error for ds[i].
func (a *acks) ackAll(ds []*delivery) []error {
	errs := make([]error, len(ds))
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		return cmp.Compare(ds[x].d.DeliveryTag, ds[y].d.DeliveryTag)
	})
	tags := make([]uint64, len(ds))
	for k, i := range order {
		tags[k] = ds[i].d.DeliveryTag
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := a.upTo(tags); n >= 2 {
		err := ds[order[n-1]].d.Ack(true) // every tag up to tags[n-1]
		for _, i := range order[:n] {
			errs[i] = ds[i].ackErr(err)
			a.record(ds[i].d.DeliveryTag)
		}
		order = order[n:]
	}
	for _, i := range order {
		errs[i] = ds[i].ackErr(ds[i].d.Ack(false))
		a.record(ds[i].d.DeliveryTag)
	}
	return errs
}

// AckBatch acknowledges ds as Ack on each would, with one basic.ack
// carrying the multiple flag for the deliveries of one channel where
// that acknowledges nothing else (see consumer.BatchAcker): a delivery
// held by another goroutine or waiting for its delayed requeue is never
// acknowledged by it. Deliveries of other sources are acknowledged by
// their own Ack. errs[i] is the error of ds[i].
func (a *Adapter) AckBatch(ctx context.Context, ds []consumer.Delivery) []error {
	errs := make([]error, len(ds))
	groups := map[*acks][]int{}
	var order []*acks
	for i, cd := range ds {
		d, ok := cd.(*delivery)
		if !ok {
			errs[i] = cd.Ack(ctx)
			continue
		}
		if !d.settled.CompareAndSwap(false, true) {
			errs[i] = ErrSettled
			continue
		}
		if _, seen := groups[d.acks]; !seen {
			order = append(order, d.acks)
		}
		groups[d.acks] = append(groups[d.acks], i)
	}
	for _, g := range order {
		idx := groups[g]
		own := make([]*delivery, len(idx))
		for k, i := range idx {
			own[k] = ds[i].(*delivery)
		}
		for k, err := range g.ackAll(own) {
			errs[idx[k]] = err
		}
	}
	return errs
}

// ackErr is the error Ack returns for err from the channel.
func (d *delivery) ackErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rabbitmq: ack delivery of %s: %w", d.msg.Destination, err)
}
