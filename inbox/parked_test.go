package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// The parked state of a key (consumer.OnPoisonParkKey) on every database:
// KeyParked holds a new message back behind a head and behind the messages
// parked after it, a replay behind a head only; a reset head (a replay in
// flight) holds new messages back; an archived dead letter parks nothing;
// ParkedKeys and KeyEvents list what a stats and a replay --key see.
func TestKeyParked(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		keyed := func(id, key string) inbox.Entry {
			e := entry(id)
			e.OrderKey = key
			return e
		}
		dead := func(id, reason string) {
			t.Helper()
			st, err := s.MarkDeadLettered(ctx, inbox.DeadLetter{Entry: keyed(id, "K"), Class: inboxkit.ClassTechnical, Reason: reason})
			dbtest.Must(t, err, "dead-letter %s", id)
			if st != inboxkit.StatusDeadLettered {
				t.Fatalf("dead-letter %s: %s", id, st)
			}
		}
		parked := func(key, ev string, replayed, want bool) {
			t.Helper()
			got, err := s.KeyParked(ctx, inbox.ParkCheck{ConsumerName: consumerName, OrderKey: key, EventID: ev, Replayed: replayed})
			dbtest.Must(t, err, "key parked")
			if got != want {
				t.Errorf("KeyParked(%s, %s, replayed %v) = %v, want %v", key, ev, replayed, got, want)
			}
		}
		ok := func(context.Context, *sql.Tx) error { return nil }
		mustProcess(t, s, keyed("other-1", "L"), ok)
		parked("K", "new", false, false)
		dead("head", inboxkit.ReasonMaxAttemptsExceeded)
		dead("p2", inboxkit.ReasonKeyParked)

		parked("K", "new", false, true)  // behind the head
		parked("K", "head", true, false) // the replayed head: its own row does not count, p2 does not hold a replay
		parked("K", "p2", true, true)    // a replay of p2 before the head's: behind the head
		parked("L", "other-2", false, false)
		parked("", "unkeyed", false, false)
		ks, err := s.ParkedKeys(ctx, "", 0)
		dbtest.Must(t, err, "parked keys")
		if len(ks) != 1 || ks[0].OrderKey != "K" || ks[0].DeadLetters != 2 || ks[0].Parked != 1 || ks[0].Head != "head" || ks[0].Since.IsZero() {
			t.Errorf("ParkedKeys = %+v, want K with 2 dead letters, 1 parked, head head", ks)
		}
		evs, err := s.KeyEvents(ctx, consumerName, "K")
		dbtest.Must(t, err, "key events")
		if len(evs) != 2 {
			t.Errorf("KeyEvents = %v, want head and p2", evs)
		}

		// The replay resets the head: new messages wait for it, the
		// replayed p2 does not.
		reset, err := s.ResetForReplay(ctx, "head", consumerName)
		dbtest.Must(t, err, "reset")
		if !reset {
			t.Fatal("head not reset")
		}
		parked("K", "p2", true, false)
		parked("K", "new", false, true)
		mustProcess(t, s, keyed("head", "K"), ok)
		parked("K", "new", false, true) // p2 is still parked

		// p2 given up (dropped, archived): K is free.
		done, err := s.ArchiveEvents(ctx, []inbox.EventKey{{EventID: "p2", ConsumerName: consumerName}, {EventID: "head", ConsumerName: consumerName}})
		dbtest.Must(t, err, "archive")
		if len(done) != 1 || done[0].EventID != "p2" {
			t.Errorf("ArchiveEvents archived %v, want p2 only (head is PROCESSED)", done)
		}
		parked("K", "new", false, false)
		ks, err = s.ParkedKeys(ctx, consumerName, 0)
		dbtest.Must(t, err, "parked keys")
		if len(ks) != 0 {
			t.Errorf("ParkedKeys after the release = %+v, want none", ks)
		}
	})
}
