package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/classify/breaker"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Every class of error leaves its decision in the row (STATUS, REASON_CODE,
// ERROR_CLASS) and in the result.
func TestClassifyDecisionsInRow(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{ClassifyFunc: classify.Of, Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		ctx := context.Background()
		uniqueViolation := func(ctx context.Context, tx *sql.Tx) error {
			// A constraint violation in a business table: technical, reason
			// CONSTRAINT_VIOLATION, never a duplicate of the inbox.
			if db.Backend != dbtest.MySQL {
				if _, err := tx.ExecContext(ctx, `CREATE TABLE uniq (k INTEGER PRIMARY KEY)`); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO uniq (k) VALUES (1)`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO uniq (k) VALUES (1)`)
			return err
		}
		if db.Backend == dbtest.MySQL { // any DDL commits implicitly on MariaDB (the inbox row too): create it first
			_, err := db.Exec(`CREATE TABLE uniq (k INTEGER PRIMARY KEY)`)
			dbtest.Must(t, err, "create uniq")
		}
		for _, tc := range []struct {
			id      string
			err     func(context.Context, *sql.Tx) error
			outcome inboxkit.Outcome
			status  inboxkit.Status // after MarkDeadLettered for dead letters
			reason  string
			class   inboxkit.Class
		}{
			{"reject", func(context.Context, *sql.Tx) error {
				return classify.Reject("CUSTOMER_UNKNOWN", errors.New("customer 4711 unknown"))
			}, inboxkit.OutcomeRejected, inboxkit.StatusRejected, "CUSTOMER_UNKNOWN", inboxkit.ClassBusiness},
			{"poison", func(context.Context, *sql.Tx) error {
				return fmt.Errorf("decode: %w", classify.Poison("MALFORMED_PAYLOAD", errors.New("invalid character 'x'")))
			}, inboxkit.OutcomeDeadLetter, inboxkit.StatusDeadLettered, "MALFORMED_PAYLOAD", inboxkit.ClassPoison},
			{"retry", func(context.Context, *sql.Tx) error {
				return classify.RetryAfter(3*time.Second, errors.New("letter service 503"))
			}, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure, "TRANSIENT", inboxkit.ClassTechnical},
			{"unknown", func(context.Context, *sql.Tx) error {
				return errors.New("nil pointer somewhere")
			}, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure, "", inboxkit.ClassTechnical},
			{"constraint", uniqueViolation, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure, "CONSTRAINT_VIOLATION", inboxkit.ClassTechnical},
		} {
			res := mustProcess(t, s, entry(tc.id), tc.err)
			if res.Outcome != tc.outcome || res.Reason != tc.reason || res.Class != tc.class {
				t.Errorf("%s: result %+v, want %s %q %s", tc.id, res, tc.outcome, tc.reason, tc.class)
				continue
			}
			if res.Outcome == inboxkit.OutcomeDeadLetter {
				_, err := s.MarkDeadLettered(ctx, inbox.DeadLetter{Entry: entry(tc.id), Class: res.Class, Reason: res.Reason, Err: res.Err})
				dbtest.Must(t, err, "mark")
			}
			if tc.id == "retry" && res.RetryAfter != 3*time.Second {
				t.Errorf("retry: RetryAfter %s", res.RetryAfter)
			}
			r := get(t, s, tc.id)
			if r.Status != tc.status || r.ReasonCode != tc.reason || r.ErrorClass != string(tc.class) {
				t.Errorf("%s: row %s %q %s, want %s %q %s", tc.id, r.Status, r.ReasonCode, r.ErrorClass, tc.status, tc.reason, tc.class)
			}
		}
	})
}

// An open circuit breaker fails fast with CIRCUIT_OPEN; those failures do not
// raise ATTEMPTS, so an outage of the letter service does not dead-letter the
// queue. Real failures still count.
func TestOpenCircuitDoesNotRaiseAttempts(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{ClassifyFunc: classify.Of, Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
		br, err := breaker.New(breaker.Config{Name: "letters", MaxFailures: 2, OpenTimeout: time.Hour})
		dbtest.Must(t, err, "breaker")
		down := errors.New("letter service down")
		send := func(ctx context.Context, tx *sql.Tx) error {
			return br.Do(ctx, func(context.Context) error { return down })
		}
		// Two real failures (counted) open the breaker.
		for i, id := range []string{"L-1", "L-2"} {
			res := mustProcess(t, s, entry(id), send)
			if res.Attempts != 1 || res.Outcome != inboxkit.OutcomeRetry {
				t.Fatalf("failure %d: %+v", i+1, res)
			}
		}
		if !br.Open() {
			t.Fatal("breaker not open after 2 failures")
		}
		// Ten redeliveries of L-1 while open: fail fast, attempts stay 1.
		e := redelivered("L-1")
		for i := 0; i < 10; i++ {
			res := mustProcess(t, s, e, send)
			if res.Outcome != inboxkit.OutcomeRetry || res.Reason != "CIRCUIT_OPEN" || res.Attempts != 1 {
				t.Fatalf("open-circuit delivery %d: %+v", i+1, res)
			}
		}
		r := get(t, s, "L-1")
		if r.Attempts != 1 || r.ReasonCode != "CIRCUIT_OPEN" {
			t.Errorf("row after outage: attempts %d reason %q", r.Attempts, r.ReasonCode)
		}
		_ = b
	})
}

// A business rejection without a reason code is recorded as REJECTED (what
// classify.Reject gives an empty code), in both engines: one reason code,
// defined once in the root package.
func TestEmptyBusinessReasonIsRejected(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		res := mustProcess(t, s, entry("T-1"), func(context.Context, *sql.Tx) error { return reject("") })
		if res.Outcome != inboxkit.OutcomeRejected || res.Reason != inboxkit.ReasonRejected {
			t.Errorf("transactional: result %+v, want REJECTED with reason %s", res, inboxkit.ReasonRejected)
		}
		if r := get(t, s, "T-1"); r.ReasonCode != inboxkit.ReasonRejected {
			t.Errorf("transactional: REASON_CODE %q, want %s", r.ReasonCode, inboxkit.ReasonRejected)
		}

		w := newWorker(t, s, inbox.WorkerConfig{
			HandleFunc: func(context.Context, *sql.Tx, inboxkit.Message) error { return reject("") }})
		receive(t, s, "S-1")
		res, err := w.Process(ctx, claimOne(t, w))
		if err != nil || res.Outcome != inboxkit.OutcomeRejected || res.Reason != inboxkit.ReasonRejected {
			t.Errorf("store-then-process: result %+v %v, want REJECTED with reason %s", res, err, inboxkit.ReasonRejected)
		}
		if r := get(t, s, "S-1"); r.ReasonCode != inboxkit.ReasonRejected {
			t.Errorf("store-then-process: REASON_CODE %q, want %s", r.ReasonCode, inboxkit.ReasonRejected)
		}
	})
}

// Without a ClassifyFunc the store classifies with classify.Of: a condition
// of the database or the network gets its reason code (here CONNECTION),
// where inboxkit.DecisionOf alone would leave the reason empty.
func TestDefaultClassifierIsClassifyOf(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		res := mustProcess(t, s, entry("C-1"), func(context.Context, *sql.Tx) error {
			return fmt.Errorf("letter service: %w", syscall.ECONNREFUSED)
		})
		if res.Outcome != inboxkit.OutcomeRetry || res.Reason != inboxkit.ReasonConnection {
			t.Errorf("result %+v, want RETRY with reason %s", res, inboxkit.ReasonConnection)
		}
		if r := get(t, s, "C-1"); r.ReasonCode != inboxkit.ReasonConnection {
			t.Errorf("REASON_CODE %q, want %s", r.ReasonCode, inboxkit.ReasonConnection)
		}
	})
}
