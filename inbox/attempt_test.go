package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Tests of the history of attempts (inbox.AttemptTable): one row per
// failure verdict, written with it, on every path that records one; none
// for a success or a duplicate.

// undoStep10 takes a migrated database back to before migration step 10:
// no attempt table, no ORDER_KEY index, no version row 10.
func undoStep10(t *testing.T, db *dbtest.DB) {
	t.Helper()
	drop := `DROP INDEX ` + inbox.DefaultTable + `_OKEY`
	if db.Backend == dbtest.MySQL {
		drop += ` ON ` + inbox.DefaultTable
	}
	for _, q := range []string{drop, `DROP TABLE ` + inbox.AttemptTable, fmt.Sprintf(`DELETE FROM %s WHERE VERSION = 10`, inbox.VersionTable)} {
		_, err := db.ExecContext(context.Background(), q)
		dbtest.Must(t, err, "%s", q)
	}
}

// history is the event's attempts as "attempt/replays/status/class/reason/error" lines.
func history(t *testing.T, s *inbox.Store, id string) []string {
	t.Helper()
	as, err := s.Attempts(context.Background(), id, consumerName)
	dbtest.Must(t, err, "attempts of %s", id)
	out := []string{}
	for _, a := range as {
		if a.EventID != id || a.ConsumerName != consumerName || a.At.IsZero() {
			t.Errorf("attempt of %s: %+v", id, a)
		}
		out = append(out, fmt.Sprintf("%d/%d/%s/%s/%s/%s", a.Attempt, a.ReplayCount, a.Status, a.Class, a.Reason, a.Error))
	}
	return out
}

func wantHistory(t *testing.T, s *inbox.Store, id string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := history(t, s, id); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("attempts of %s:\n%s\nwant:\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var errTimeout = errors.New("letter service timeout")

func failing() inbox.Handler {
	return func(context.Context, *sql.Tx) error { return errTimeout }
}

func returning(err error) inbox.Handler {
	return func(context.Context, *sql.Tx) error { return err }
}

// The transactional engine alone: two technical failures then a success
// (no row for the success), a rejection, poison, a first delivery's
// failure, the threshold (its failure, then its dead letter), a replay
// (counted apart), a duplicate (nothing); without ports,
// MarkDeadLettered.
func TestAttemptsProcess(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		dl := &deadLetters{}
		s, err := s.WithPorts(dl.ports())
		dbtest.Must(t, err, "ports")
		timeout := "letter service timeout"

		mustProcess(t, s, entry("retried"), failing())
		wantHistory(t, s, "retried", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout)
		mustProcess(t, s, redelivered("retried"), returning(nil))
		mustProcess(t, s, redelivered("retried"), returning(nil)) // a duplicate
		wantHistory(t, s, "retried", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout)

		mustProcess(t, s, entry("ok"), returning(nil))
		mustProcess(t, s, redelivered("ok"), returning(nil))
		wantHistory(t, s, "ok")

		mustProcess(t, s, entry("rejected"), returning(reject("CUSTOMER_UNKNOWN")))
		wantHistory(t, s, "rejected", "1/0/REJECTED/BUSINESS/CUSTOMER_UNKNOWN/rejected: CUSTOMER_UNKNOWN")

		mustProcess(t, s, entry("poison"), returning(poison("MALFORMED_PAYLOAD")))
		wantHistory(t, s, "poison", "1/0/DEAD_LETTERED/POISON/MALFORMED_PAYLOAD/poison: MALFORMED_PAYLOAD")

		first := entry("first")
		first.FirstDelivery = true
		mustProcess(t, s, first, failing())
		wantHistory(t, s, "first", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout)
		res := mustProcess(t, s, redelivered("first"), failing())
		wantOutcome(t, res, inboxkit.OutcomeDeadLetter, inboxkit.StatusDeadLettered)
		wantHistory(t, s, "first", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout, "2/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout,
			"2/0/DEAD_LETTERED/TECHNICAL/MAX_ATTEMPTS_EXCEEDED/"+timeout)

		ok, err := s.ResetForReplay(context.Background(), "first", consumerName)
		if err != nil || !ok {
			t.Fatalf("replay: %v %v", ok, err)
		}
		mustProcess(t, s, redelivered("first"), returning(reject("STILL_UNKNOWN")))
		wantHistory(t, s, "first", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout, "2/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout,
			"2/0/DEAD_LETTERED/TECHNICAL/MAX_ATTEMPTS_EXCEEDED/"+timeout, "1/1/REJECTED/BUSINESS/STILL_UNKNOWN/rejected: STILL_UNKNOWN")

		// Without ports the caller publishes and marks the row.
		plain, _ := setup(t, dbtest.New(t, db.Backend), inbox.Config{})
		mustProcess(t, plain, entry("marked"), failing())
		st, err := plain.MarkDeadLettered(context.Background(), inbox.DeadLetter{Entry: entry("marked"), Class: inboxkit.ClassTechnical, Reason: "OPERATOR", Err: errTimeout})
		if err != nil || st != inboxkit.StatusDeadLettered {
			t.Fatalf("mark dead-lettered: %s %v", st, err)
		}
		wantHistory(t, plain, "marked", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout, "1/0/DEAD_LETTERED/TECHNICAL/OPERATOR/"+timeout)
	})
}

// A batch records the history of its failures like Process: the
// rejection in the business transaction, the technical failure and the
// dead letter apart; its successes write nothing.
func TestAttemptsProcessBatch(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		s, err := s.WithPorts((&deadLetters{}).ports())
		dbtest.Must(t, err, "ports")
		for _, first := range []bool{false, true} {
			p := fmt.Sprint(first, "-")
			item := func(id string, h inbox.Handler) inbox.BatchItem {
				e := entry(p + id)
				e.FirstDelivery = first
				return inbox.BatchItem{Entry: e, Handler: h}
			}
			res, err := s.ProcessBatch(context.Background(), []inbox.BatchItem{
				item("ok", returning(nil)), item("failed", failing()), item("rejected", returning(reject("CUSTOMER_UNKNOWN"))),
				item("poison", returning(poison("MALFORMED_PAYLOAD"))), item("ok-2", returning(nil)),
			})
			dbtest.Must(t, err, "batch")
			if len(res) != 5 || res[0].Outcome != inboxkit.OutcomeProcessed || res[1].Outcome != inboxkit.OutcomeRetry {
				t.Fatalf("batch (first %v): %+v", first, res)
			}
			wantHistory(t, s, p+"ok")
			wantHistory(t, s, p+"ok-2")
			wantHistory(t, s, p+"failed", "1/0/TECHNICAL_FAILURE/TECHNICAL//letter service timeout")
			wantHistory(t, s, p+"rejected", "1/0/REJECTED/BUSINESS/CUSTOMER_UNKNOWN/rejected: CUSTOMER_UNKNOWN")
			wantHistory(t, s, p+"poison", "1/0/DEAD_LETTERED/POISON/MALFORMED_PAYLOAD/poison: MALFORMED_PAYLOAD")
		}
	})
}

// The store-then-process worker: a technical failure, then the dead
// letter at the threshold (one row: the worker's verdict is the dead
// letter; the transactional engine records the failure, then the letter); a rejection; poison; a success writes nothing.
func TestAttemptsWorker(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		outcome := map[string]error{"failed": errTimeout, "rejected": reject("CUSTOMER_UNKNOWN"), "poison": poison("MALFORMED_PAYLOAD")}
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: func(_ context.Context, _ *sql.Tx, m inboxkit.Message) error { return outcome[m.ID] }})
		for _, id := range []string{"failed", "rejected", "poison", "ok"} {
			receive(t, s, id)
		}
		for range 2 {
			if _, err := w.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			b.clock.Add(time.Hour) // the failed entry is due again
		}
		timeout := "letter service timeout"
		// The claim that exhausts the attempts dead-letters at once: one row.
		wantHistory(t, s, "failed", "1/0/TECHNICAL_FAILURE/TECHNICAL//"+timeout, "2/0/DEAD_LETTERED/TECHNICAL/MAX_ATTEMPTS_EXCEEDED/"+timeout)
		wantHistory(t, s, "rejected", "1/0/REJECTED/BUSINESS/CUSTOMER_UNKNOWN/rejected: CUSTOMER_UNKNOWN")
		wantHistory(t, s, "poison", "1/0/DEAD_LETTERED/POISON/MALFORMED_PAYLOAD/poison: MALFORMED_PAYLOAD")
		wantHistory(t, s, "ok")
		if r := get(t, s, "ok"); r.Status != inboxkit.StatusProcessed {
			t.Errorf("ok: %s", r.Status)
		}
	})
}

// Purge deletes the attempt rows of the rows it deletes, and only those:
// a row still failing keeps its history, as does another table's row of
// the same event id.
func TestAttemptsPurged(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{RedeliveryHorizon: time.Hour})
		other, err := inbox.New(db.DB, s.Dialect(), inbox.Config{Table: "OTHER_INBOX", Clock: b.clock})
		dbtest.Must(t, err, "other store")
		dbtest.Must(t, other.Migrate(context.Background()), "migrate other")
		for i := range 5 {
			id := fmt.Sprint("old-", i)
			mustProcess(t, s, entry(id), failing())
			mustProcess(t, s, redelivered(id), returning(reject("CUSTOMER_UNKNOWN")))
		}
		mustProcess(t, s, entry("failing"), failing())
		mustProcess(t, other, entry("old-0"), failing())
		b.clock.Add(2 * time.Hour)
		n, err := s.Purge(context.Background(), inbox.PurgeOptions{OlderThan: time.Hour, BatchSize: 2})
		if err != nil || n != 5 {
			t.Fatalf("purge: %d %v, want 5", n, err)
		}
		for i := range 5 {
			wantHistory(t, s, fmt.Sprint("old-", i))
		}
		wantHistory(t, s, "failing", "1/0/TECHNICAL_FAILURE/TECHNICAL//letter service timeout")
		wantHistory(t, other, "old-0", "1/0/TECHNICAL_FAILURE/TECHNICAL//letter service timeout")
	})
}

// A table below step 10 (no attempt table): failures are recorded as
// before, without history, and the history starts once it is migrated.
func TestAttemptsBelowStep10(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{RedeliveryHorizon: time.Hour})
		undoStep10(t, db)
		var se *inbox.SchemaError
		if err := s.CheckSchema(context.Background()); !errors.As(err, &se) || se.Current != 9 || len(se.Pending) != 1 || !strings.Contains(se.Pending[0], inbox.AttemptTable) {
			t.Fatalf("CheckSchema at version 9 = %v, want step 10 pending", err)
		}
		res := mustProcess(t, s, entry("before"), failing())
		wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		mustProcess(t, s, redelivered("before"), returning(reject("CUSTOMER_UNKNOWN")))
		wantHistory(t, s, "before")
		b.clock.Add(2 * time.Hour)
		if n, err := s.Purge(context.Background(), inbox.PurgeOptions{OlderThan: time.Hour}); err != nil || n != 1 {
			t.Fatalf("purge below step 10: %d %v", n, err)
		}

		plan, err := s.PlanMigration(context.Background())
		dbtest.Must(t, err, "plan")
		if text := plan.Text(); !strings.Contains(text, "CREATE TABLE") || !strings.Contains(text, inbox.AttemptTable+"_EVENT") || !strings.Contains(text, inbox.DefaultTable+"_OKEY") {
			t.Errorf("plan of step 10:\n%s", text)
		}
		dbtest.Must(t, s.Migrate(context.Background()), "migrate")
		dbtest.Must(t, s.CheckSchema(context.Background()), "check")
		b.clock.Add(time.Minute) // the store looks for the table again
		mustProcess(t, s, entry("after"), failing())
		wantHistory(t, s, "after", "1/0/TECHNICAL_FAILURE/TECHNICAL//letter service timeout")
	})
}
