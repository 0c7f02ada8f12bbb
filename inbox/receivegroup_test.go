package inbox_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// received is one Worker.Receive's answer.
type received struct {
	id       string
	inserted bool
	status   inboxkit.Status
	claim    *inbox.Claimed
	err      error
}

// receiveTogether calls Worker.Receive for es at the same moment: each
// waits behind a statement held by inbox.HoldGroup until all wait, then
// the first stores them in one statement (ran hears of it). The answers
// are in the order of es.
func receiveTogether(t *testing.T, s *inbox.Store, w *inbox.Worker, ran func(int, error), es ...inbox.Entry) []received {
	t.Helper()
	queued, release := inbox.HoldGroup(s, true, ran)
	out := make([]received, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() {
			ins, st, c, err := w.Receive(context.Background(), e, map[string]string{"event-id": e.EventID}, []byte("payload of "+e.EventID))
			out[i] = received{e.EventID, ins, st, c, err}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for queued() < len(es) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d receives wait for the held statement", queued(), len(es))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	return out
}

// Worker.Receive calls at the same moment store their new entries in one
// INSERT (receiveGroup), and each learns what its own INSERT would have
// told it: a new entry is stored claimed by the worker, a resend of a
// stored event is reported with the row's status and changes nothing, and
// the second of two deliveries of one event in the group waits for the
// next statement and finds the first's row. Where the statement fails (a
// correlation id PostgreSQL and MariaDB refuse), every entry runs its own
// INSERT: the refused one is a ReceiveError, the others are stored. While
// no more than GroupAfter entries are being stored, none waits.
func TestReceiveGroup(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", PollInterval: time.Hour, HandleFunc: businessHandler(db, "grouped")})
		var run sync.WaitGroup
		run.Go(func() { _ = w.Run(ctx) })
		defer run.Wait()
		defer cancel()
		for !w.Hand(ctx) { // running: takes handed claims (none here)
			time.Sleep(time.Millisecond)
		}
		if _, c := workerReceive(t, w, "G-old"); c == nil {
			t.Fatal("no claim for G-old")
		}

		var mu sync.Mutex
		var stmts []int
		var stmtErrs []error
		ran := func(rows int, err error) {
			mu.Lock()
			defer mu.Unlock()
			stmts, stmtErrs = append(stmts, rows), append(stmtErrs, err)
		}
		ids := []string{"G-1", "G-2", "G-old", "G-3", "G-1", "G-4"}
		es := make([]inbox.Entry, len(ids))
		for i, id := range ids {
			es[i] = inbox.Entry{EventID: id, ConsumerName: consumerName, CorrelationID: "corr-" + id}
		}
		got := receiveTogether(t, s, w, ran, es...)
		if len(stmts) != 1 || stmts[0] != 5 || stmtErrs[0] != nil {
			t.Fatalf("statements of more than one row: %v (errors %v); want one of 5 rows (G-1 once, G-2, G-3, G-4, G-old)", stmts, stmtErrs)
		}
		claims := map[string]int{}
		for _, r := range got {
			switch {
			case r.err != nil:
				t.Errorf("Receive(%s): %v", r.id, r.err)
			case r.inserted:
				if r.status != inboxkit.StatusInProgress || r.claim == nil || r.claim.Message.ID != r.id || r.claim.Owner != "w" || r.claim.Attempts != 1 || string(r.claim.Message.Body) != "payload of "+r.id {
					t.Errorf("Receive(%s) stored: %s, claim %+v", r.id, r.status, r.claim)
				}
				claims[r.id]++
			case r.status != inboxkit.StatusInProgress || r.claim != nil:
				t.Errorf("Receive(%s) found its row: %s, claim %+v; want IN_PROGRESS, no claim", r.id, r.status, r.claim)
			}
		}
		for _, id := range []string{"G-1", "G-2", "G-3", "G-4"} {
			if claims[id] != 1 {
				t.Errorf("%s stored %d times, want once", id, claims[id])
			}
			if r := get(t, s, id); r.Status != inboxkit.StatusInProgress || r.LeaseOwner != "w" || r.Attempts != 1 || r.CorrelationID != "corr-"+id {
				t.Errorf("stored row of %s = %+v", id, r)
			}
		}
		if claims["G-old"] != 0 {
			t.Errorf("G-old, stored before, claimed again %d times", claims["G-old"])
		}

		// A receive whose context ends while it waits leaves the queue and
		// fails as its own INSERT would; the next statement goes on.
		queued, release := inbox.HoldGroup(s, true, ran)
		gone, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, _, _, err := w.Receive(gone, inbox.Entry{EventID: "G-gone", ConsumerName: consumerName}, nil, []byte("{}"))
			errc <- err
		}()
		for queued() < 1 {
			time.Sleep(time.Millisecond)
		}
		stop()
		if err := <-errc; !errors.Is(err, context.Canceled) || queued() != 0 {
			t.Errorf("Receive whose context ended while it waited: %v, %d still waiting; want context.Canceled, none", err, queued())
		}
		release()
		if _, c := workerReceive(t, w, "G-after"); c == nil {
			t.Error("no claim for G-after, stored after a receive left the queue")
		}

		// Few entries at once do not wait: with a statement running,
		// GroupAfter receives run their own statements.
		queued, release = inbox.HoldGroup(s, false, ran)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var few sync.WaitGroup
			for i := range inbox.GroupAfter {
				few.Go(func() {
					id := "G-few-" + strconv.Itoa(i)
					if ins, _, c, err := w.Receive(ctx, inbox.Entry{EventID: id, ConsumerName: consumerName}, nil, []byte("{}")); err != nil || !ins || c == nil {
						t.Errorf("Receive(%s) beside a running statement = %v, claim %v, %v", id, ins, c, err)
					}
				})
			}
			few.Wait()
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%d receives beside a running statement still wait after 30s (%d queued)", inbox.GroupAfter, queued())
		}
		release()
		<-done

		// A statement the database refuses: each runs its own INSERT.
		stmts, stmtErrs = nil, nil
		bad := inbox.Entry{EventID: "G-bad", ConsumerName: consumerName, CorrelationID: "C-\xff\xfe"}
		good := []inbox.Entry{{EventID: "G-5", ConsumerName: consumerName}, {EventID: "G-6", ConsumerName: consumerName}}
		got = receiveTogether(t, s, w, ran, good[0], bad, good[1])
		if len(stmts) != 1 || stmts[0] != 3 {
			t.Fatalf("statements of more than one row: %v; want one of 3", stmts)
		}
		for _, r := range []received{got[0], got[2]} {
			if r.err != nil || !r.inserted || r.claim == nil {
				t.Errorf("Receive(%s) beside a refused value = %v, claim %v, %v; want stored", r.id, r.inserted, r.claim, r.err)
			}
		}
		var rerr *inbox.ReceiveError
		if db.Backend == dbtest.SQLite {
			if stmtErrs[0] != nil || !got[1].inserted {
				t.Errorf("SQLite stores the bytes as they are: statement %v, Receive(G-bad) = %v, %v", stmtErrs[0], got[1].inserted, got[1].err)
			}
		} else if stmtErrs[0] == nil || !errors.As(got[1].err, &rerr) || rerr.Reason != inboxkit.ReasonInvalidEncoding {
			t.Errorf("statement error %v, Receive(G-bad) = %v; want the statement refused and a ReceiveError %s", stmtErrs[0], got[1].err, inboxkit.ReasonInvalidEncoding)
		}
	})
}
