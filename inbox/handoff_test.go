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

// A resend that meets its event's row writes nothing, through Receive and
// through a running worker's Receive: on PostgreSQL and SQLite the INSERT
// skips the row (ON CONFLICT DO NOTHING) instead of failing on its key,
// which on PostgreSQL leaves a dead tuple in the table and aborts a
// transaction. Seen there by the slot of the next row stored: the second
// line of the table's first page, not the fourth.
func TestReceiveResendWritesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", PollInterval: time.Hour, HandleFunc: businessHandler(db, "x")})
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		wg.Go(func() { _ = w.Run(ctx) })
		for !w.Hand(ctx) { // running: Receive stores claimed entries
			time.Sleep(5 * time.Millisecond)
		}
		if st, c := workerReceive(t, w, "R-1"); st != inboxkit.StatusInProgress || c == nil {
			t.Fatalf("Worker.Receive(R-1) = %s, claim %v; want IN_PROGRESS, a claim", st, c)
		}
		e := inbox.Entry{EventID: "R-1", ConsumerName: consumerName}
		inserted, st, c, err := w.Receive(ctx, e, nil, []byte("payload of R-1"))
		if err != nil || inserted || st != inboxkit.StatusInProgress || c != nil {
			t.Fatalf("Worker.Receive of its resend = %v %s, claim %v, %v; want not inserted, IN_PROGRESS", inserted, st, c, err)
		}
		inserted, st, err = s.Receive(ctx, e, nil, []byte("payload of R-1"))
		if err != nil || inserted || st != inboxkit.StatusInProgress {
			t.Fatalf("Receive of its resend = %v %s, %v; want not inserted, IN_PROGRESS", inserted, st, err)
		}
		if r := get(t, s, "R-1"); r.Attempts != 1 || r.LeaseOwner != "w" {
			t.Fatalf("row after the resends = %+v", r)
		}
		if db.Backend != dbtest.Postgres {
			return
		}
		if inserted, _, err := s.Receive(ctx, inbox.Entry{EventID: "R-2", ConsumerName: consumerName}, nil, nil); err != nil || !inserted {
			t.Fatalf("Receive(R-2) = %v, %v", inserted, err)
		}
		var slot string
		dbtest.Must(t, db.QueryRowContext(ctx, `SELECT ctid::text FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = 'R-2'`).Scan(&slot), "ctid of R-2")
		if slot != "(0,2)" {
			t.Fatalf("R-2 stored at %s, want (0,2): the resends wrote tuples", slot)
		}
	})
}
