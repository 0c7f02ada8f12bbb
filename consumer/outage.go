package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
)

// gate stops intake while the inbox's database or the dead-letter queue is
// unreachable, and starts it again by itself.
//
// An outage begins with the first delivery handed back because the runtime
// failed (the inbox could not record it, a dead-letter or reject publish
// failed): the receives in flight are cancelled and no goroutine takes a
// new delivery, so the deliveries in hand are handed back once each and
// the rest stay on the broker. Meanwhile the prober waits the store's
// Retry.Redelivery backoff (growing with every failed probe), then asks
// the database (Ping) and the publishers that are Readiers (Ready). When
// they answer, one goroutine takes one trial delivery (a batch with
// BatchSize above 1); when it is settled without a runtime error intake
// resumes on every goroutine, else the outage goes on with the next delay.
type gate struct {
	mu    sync.Mutex
	run   context.Context // Run's; nil before Run
	down  bool
	level int // failed probes and trials of this outage
	// rx is the context of receives while intake is open; stopRx cancels
	// it when an outage begins.
	rx     context.Context
	stopRx context.CancelFunc
	// trialOpen: the prober allows one trial delivery; trialOut: a
	// goroutine took it and has not settled it yet.
	trialOpen, trialOut bool
	// wake is closed (and replaced) at every change of the state above.
	wake chan struct{}
}

// start readies the gate for Run's ctx.
func (g *gate) start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.run, g.down, g.level, g.trialOpen, g.trialOut = ctx, false, 0, false, false
	g.rx, g.stopRx = context.WithCancel(ctx)
	g.wake = make(chan struct{})
}

// changed wakes every waiter; g.mu is held.
func (g *gate) changed() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// admit waits until the calling goroutine may receive: at once while
// intake is open, during an outage only for the trial. It returns the
// context to receive with, whether the delivery is the trial (the caller
// then reports it with trialDone), and false once ctx is done.
func (g *gate) admit(ctx context.Context) (rx context.Context, trial, ok bool) {
	g.mu.Lock()
	for {
		switch {
		case !g.down:
			rx := g.rx
			g.mu.Unlock()
			return rx, false, true
		case g.trialOpen:
			g.trialOpen, g.trialOut = false, true
			g.mu.Unlock()
			return ctx, true, true
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false, false
		case <-wake:
		}
		g.mu.Lock()
	}
}

// failed begins an outage, unless one lasts already.
func (g *gate) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down || g.run == nil {
		return
	}
	g.down, g.level = true, 0
	g.stopRx()
	g.changed()
}

// trialDone reports the trial's settlement: ok ends the outage.
func (g *gate) trialDone(ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trialOut = false
	if ok {
		g.down = false
		g.rx, g.stopRx = context.WithCancel(g.run)
	} else {
		g.level++
	}
	g.changed()
}

// probe runs until ctx is done: during an outage it waits the backoff,
// asks probe, and opens a trial when probe returns nil (else it tells
// failed).
func (g *gate) probe(ctx context.Context, delay func(n int) time.Duration, probe func(context.Context) error, failed func(error)) {
	for {
		g.mu.Lock()
		for !g.down || g.trialOpen || g.trialOut {
			wake := g.wake
			g.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			g.mu.Lock()
		}
		level := g.level
		g.mu.Unlock()
		if !sleep(ctx, delay(level+1)) {
			return
		}
		err := probe(ctx)
		if err != nil && ctx.Err() == nil {
			failed(err)
		}
		g.mu.Lock()
		if g.down {
			if err != nil {
				g.level++
			} else {
				g.trialOpen = true
				g.changed()
			}
		}
		g.mu.Unlock()
	}
}

// probeTimeout bounds one probe of the database or a publisher.
const probeTimeout = 5 * time.Second

// probe asks the inbox's database and the publishers that know their
// connection (Readier) whether they answer.
func (c *Consumer) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := c.cfg.Store.DB().PingContext(ctx); err != nil {
		return fmt.Errorf("consumer: database: %w", err)
	}
	for _, p := range []any{c.cfg.DeadLetter, c.cfg.Rejects} {
		if r, ok := p.(Readier); ok {
			if err := r.Ready(ctx); err != nil {
				return fmt.Errorf("consumer: publisher: %w", err)
			}
		}
	}
	return nil
}

// handedBack reports whether s is a delivery handed back because the
// runtime failed (the inbox, a publish): what begins an outage.
func handedBack(s Settled) bool { return s.Err != nil && s.Action == inboxkit.ActionRequeue }
