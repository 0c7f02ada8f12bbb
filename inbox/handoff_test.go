package inbox_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// workerReceive is Worker.Receive of a test entry.
func workerReceive(t *testing.T, w *inbox.Worker, id string) (inboxkit.Status, *inbox.Claimed) {
	t.Helper()
	e := inbox.Entry{EventID: id, ConsumerName: consumerName, CorrelationID: "corr-" + id}
	inserted, st, c, err := w.Receive(context.Background(), e, map[string]string{"event-id": id}, []byte("payload of "+id))
	if err != nil || !inserted {
		t.Fatalf("Worker.Receive(%s) = %v, %v", id, inserted, err)
	}
	return st, c
}

// TestWorkerHandOff: while Run runs, Worker.Receive stores a new entry
// claimed by the worker (the lease written by the insert) and Hand gives
// it to Run, which processes it without a claim or a poll (the poll
// interval is an hour here). A claim never handed over (the process died
// between the store and the hand-off) is taken by another worker once
// its lease expires; claims handed and not begun when Run stops are
// released.
func TestWorkerHandOff(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		inHandler, unblock := make(chan struct{}), make(chan struct{})
		handler := businessHandler(db, "handed")
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", PollInterval: time.Hour, HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			if m.ID == "H-block" {
				close(inHandler)
				<-unblock
			}
			return handler(ctx, tx, m)
		}})
		other := newWorker(t, s, inbox.WorkerConfig{Owner: "other", HandleFunc: businessHandler(db, "other")})

		// Not running: stored RECEIVED, nothing to hand.
		if st, c := workerReceive(t, w, "H-0"); st != inboxkit.StatusReceived || c != nil {
			t.Fatalf("Receive before Run = %s, claim %v; want RECEIVED, none", st, c)
		}
		if w.Hand(ctx) {
			t.Fatal("Hand before Run = true")
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		// Run's first poll takes H-0; the next is an hour away.
		waitCounts(t, s, 30*time.Second, func(c map[inboxkit.Status]int) bool { return c[inboxkit.StatusProcessed] == 1 })

		st, c := workerReceive(t, w, "H-1")
		if st != inboxkit.StatusInProgress || c == nil || c.Attempts != 1 || c.Owner != "w" || c.Message.Body == nil {
			t.Fatalf("Receive while running = %s, claim %+v", st, c)
		}
		if r := get(t, s, "H-1"); r.Status != inboxkit.StatusInProgress || r.LeaseOwner != "w" || r.Attempts != 1 {
			t.Fatalf("stored row = %+v", r)
		}
		if !w.Hand(ctx, *c) {
			t.Fatal("Hand while running = false")
		}
		waitCounts(t, s, 30*time.Second, func(c map[inboxkit.Status]int) bool { return c[inboxkit.StatusProcessed] == 2 })
		if r := get(t, s, "H-1"); r.Attempts != 1 || b.businessRows(t, "H-1") != 1 {
			t.Fatalf("handed entry = %+v, %d business rows", r, b.businessRows(t, "H-1"))
		}

		// Stored and claimed, never handed: the lease holds, then expires.
		if _, c := workerReceive(t, w, "H-2"); c == nil {
			t.Fatal("no claim for H-2")
		}
		claimNone(t, other)
		b.clock.Add(31 * time.Second)
		took := claimOne(t, other)
		if took.Message.ID != "H-2" || took.Attempts != 2 {
			t.Fatalf("takeover = %+v", took)
		}
		if res, err := other.Process(context.Background(), took); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("takeover Process = %+v %v", res, err)
		}

		// Handed and not begun when Run stops: released.
		_, block := workerReceive(t, w, "H-block")
		_, rest := workerReceive(t, w, "H-3")
		if !w.Hand(ctx, *block, *rest) {
			t.Fatal("Hand = false")
		}
		<-inHandler
		cancel()
		close(unblock)
		wg.Wait()
		if w.Hand(context.Background(), *rest) {
			t.Fatal("Hand after Run = true")
		}
		if r := get(t, s, "H-block"); r.Status != inboxkit.StatusProcessed {
			t.Fatalf("entry in hand at the stop = %+v, want PROCESSED", r)
		}
		if r := get(t, s, "H-3"); r.Status != inboxkit.StatusInProgress || r.LeaseOwner != "" {
			t.Fatalf("entry handed and not begun = %+v, want released", r)
		}
		if c := claimOne(t, other); c.Message.ID != "H-3" {
			t.Fatalf("claim after the release = %+v", c)
		}
	})
}
