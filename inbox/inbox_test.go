package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// decided is a handler error carrying a decision (package classify provides
// the real ones; the inbox reads only inboxkit.Decider).
type decided struct {
	d   inboxkit.Decision
	msg string
}

func (e decided) Error() string                    { return e.msg }
func (e decided) InboxDecision() inboxkit.Decision { return e.d }

func reject(code string) error {
	return decided{inboxkit.Decision{Class: inboxkit.ClassBusiness, Reason: code}, "rejected: " + code}
}

func poison(code string) error {
	return decided{inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: code}, "poison: " + code}
}

type bundle struct {
	db    *dbtest.DB
	clock *clock
}

const consumerName = "invoice-consumer"

func setup(t *testing.T, db *dbtest.DB, cfg inbox.Config) (*inbox.Store, *bundle) {
	t.Helper()
	d, err := inbox.DialectByName(db.Backend)
	dbtest.Must(t, err, "dialect")
	c := newClock()
	cfg.Clock = c
	s, err := inbox.New(db.DB, d, cfg)
	dbtest.Must(t, err, "new store")
	ctx := context.Background()
	dbtest.Must(t, s.Migrate(ctx), "migrate")
	_, err = db.ExecContext(ctx, `CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
	dbtest.Must(t, err, "create business table")
	return s, &bundle{db: db, clock: c}
}

func (b *bundle) businessRows(t *testing.T, eventID string) int {
	t.Helper()
	var n int
	q := inbox.Postgres.Rebind(`SELECT COUNT(*) FROM business WHERE event_id = ?`)
	if b.db.Backend != dbtest.Postgres {
		q = `SELECT COUNT(*) FROM business WHERE event_id = ?`
	}
	dbtest.Must(t, b.db.QueryRow(q, eventID).Scan(&n), "count business rows")
	return n
}

func (b *bundle) allBusinessRows(t *testing.T) int {
	t.Helper()
	var n int
	dbtest.Must(t, b.db.QueryRow(`SELECT COUNT(*) FROM business`).Scan(&n), "count business rows")
	return n
}

// insertBusiness is the handler's business write.
func insertBusiness(db *dbtest.DB, eventID, note string) inbox.Handler {
	q := `INSERT INTO business (event_id, note) VALUES (?, ?)`
	if db.Backend == dbtest.Postgres {
		q = inbox.Postgres.Rebind(q)
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, eventID, note)
		return err
	}
}

func entry(id string) inbox.Entry {
	return inbox.Entry{EventID: id, ConsumerName: consumerName, CorrelationID: "corr-" + id, PayloadHash: "hash-" + id}
}

func redelivered(id string) inbox.Entry {
	e := entry(id)
	e.Redelivered = true
	return e
}

func mustProcess(t *testing.T, s *inbox.Store, e inbox.Entry, h inbox.Handler) inbox.Result {
	t.Helper()
	res, err := s.Process(context.Background(), e, h)
	if err != nil {
		t.Fatalf("Process(%s): %v", e.EventID, err)
	}
	return res
}

func wantOutcome(t *testing.T, res inbox.Result, outcome inboxkit.Outcome, status inboxkit.Status) {
	t.Helper()
	if res.Outcome != outcome || res.Status != status {
		t.Fatalf("result = %+v, want outcome %s status %s", res, outcome, status)
	}
}

func get(t *testing.T, s *inbox.Store, id string) inbox.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id, consumerName)
	dbtest.Must(t, err, "get %s", id)
	return r
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		dbtest.Must(t, s.Migrate(context.Background()), "second migrate")
		dbtest.Must(t, s.Migrate(context.Background()), "third migrate")
	})
}

func TestProcessedThenDuplicate(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		res := mustProcess(t, s, entry("E-1"), insertBusiness(db, "E-1", "letter"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if res.Attempts != 1 {
			t.Errorf("attempts = %d, want 1", res.Attempts)
		}
		// Crash between commit and acknowledgement: the broker delivers again.
		calls := 0
		res = mustProcess(t, s, redelivered("E-1"), func(ctx context.Context, tx *sql.Tx) error { calls++; return nil })
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		// A producer resend (not flagged as redelivery) is a duplicate too.
		res = mustProcess(t, s, entry("E-1"), func(ctx context.Context, tx *sql.Tx) error { calls++; return nil })
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		if calls != 0 {
			t.Errorf("handler ran %d times for duplicates", calls)
		}
		if n := b.businessRows(t, "E-1"); n != 1 {
			t.Errorf("business rows = %d, want 1", n)
		}
		r := get(t, s, "E-1")
		if r.Status != inboxkit.StatusProcessed || r.Attempts != 1 || r.CorrelationID != "corr-E-1" || r.PayloadHash != "hash-E-1" || r.ProcessedAt == nil {
			t.Errorf("row = %+v", r)
		}
		if !r.ProcessedAt.Equal(b.clock.Now()) {
			t.Errorf("processed at %v, want %v", r.ProcessedAt, b.clock.Now())
		}
	})
}

func TestBusinessRejectRollsBackAndIsNotRetried(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		h := func(ctx context.Context, tx *sql.Tx) error {
			if err := insertBusiness(db, "E-2", "half-done")(ctx, tx); err != nil {
				return err
			}
			return fmt.Errorf("customer 77 unknown: %w", reject("CUSTOMER_UNKNOWN"))
		}
		res := mustProcess(t, s, entry("E-2"), h)
		wantOutcome(t, res, inboxkit.OutcomeRejected, inboxkit.StatusRejected)
		if res.Reason != "CUSTOMER_UNKNOWN" || res.Class != inboxkit.ClassBusiness || res.Err == nil {
			t.Errorf("result = %+v", res)
		}
		if n := b.businessRows(t, "E-2"); n != 0 {
			t.Errorf("business rows = %d, want 0 (rolled back)", n)
		}
		r := get(t, s, "E-2")
		if r.Status != inboxkit.StatusRejected || r.ReasonCode != "CUSTOMER_UNKNOWN" || r.ErrorClass != "BUSINESS" || r.ProcessedAt == nil {
			t.Errorf("row = %+v", r)
		}
		calls := 0
		res = mustProcess(t, s, redelivered("E-2"), func(context.Context, *sql.Tx) error { calls++; return nil })
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusRejected)
		if calls != 0 {
			t.Errorf("a rejected event ran again")
		}
	})
}

func TestTechnicalFailureSurvivesRollbackThenProcessed(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		long := strings.Repeat("ü", 800) // 1600 bytes: truncated at a rune boundary
		h := func(ctx context.Context, tx *sql.Tx) error {
			if err := insertBusiness(db, "E-3", "half-done")(ctx, tx); err != nil {
				return err
			}
			return errors.New("letter service timeout " + long)
		}
		res := mustProcess(t, s, entry("E-3"), h)
		wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		if res.Attempts != 1 || res.Class != inboxkit.ClassTechnical {
			t.Errorf("result = %+v", res)
		}
		if n := b.businessRows(t, "E-3"); n != 0 {
			t.Errorf("business rows = %d after technical failure, want 0", n)
		}
		r := get(t, s, "E-3")
		if r.Status != inboxkit.StatusTechnicalFailure || r.Attempts != 1 || !strings.HasPrefix(r.LastError, "letter service timeout") || len(r.LastError) > 1000 || r.FirstFailedAt == nil {
			t.Errorf("row = %+v (last error %d bytes)", r.Status, len(r.LastError))
		}
		b.clock.Add(time.Minute)
		res = mustProcess(t, s, redelivered("E-3"), insertBusiness(db, "E-3", "letter"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if res.Attempts != 2 {
			t.Errorf("attempts = %d, want 2", res.Attempts)
		}
		if n := b.businessRows(t, "E-3"); n != 1 {
			t.Errorf("business rows = %d, want 1", n)
		}
		r = get(t, s, "E-3")
		if r.Status != inboxkit.StatusProcessed || r.ReasonCode != "" || r.ProcessedAt == nil || !r.ProcessedAt.Equal(b.clock.Now()) {
			t.Errorf("row = %+v", r)
		}
	})
}

func TestResendWithoutRedeliveryFlagRetriesFailure(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		res := mustProcess(t, s, entry("E-4"), func(context.Context, *sql.Tx) error { return errors.New("db hiccup") })
		wantOutcome(t, res, inboxkit.OutcomeRetry, inboxkit.StatusTechnicalFailure)
		res = mustProcess(t, s, entry("E-4"), func(context.Context, *sql.Tx) error { return errors.New("db hiccup") })
		if res.Attempts != 2 {
			t.Fatalf("attempts = %d, want 2", res.Attempts)
		}
		res = mustProcess(t, s, entry("E-4"), insertBusiness(db, "E-4", "ok"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if res.Attempts != 3 || b.businessRows(t, "E-4") != 1 {
			t.Errorf("attempts %d, business rows %d", res.Attempts, b.businessRows(t, "E-4"))
		}
	})
}

func TestBackoutThresholdDeadLetters(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
		calls := 0
		failing := func(context.Context, *sql.Tx) error { calls++; return errors.New("downstream 503") }
		e := entry("E-5")
		var res inbox.Result
		for i := 1; i <= 3; i++ {
			res = mustProcess(t, s, e, failing)
			e.Redelivered = true
			if res.Attempts != i {
				t.Fatalf("delivery %d: attempts = %d", i, res.Attempts)
			}
		}
		wantOutcome(t, res, inboxkit.OutcomeDeadLetter, inboxkit.StatusTechnicalFailure)
		if res.Reason != inboxkit.ReasonMaxAttemptsExceeded || calls != 3 {
			t.Fatalf("result %+v after %d calls", res, calls)
		}
		st, err := s.MarkDeadLettered(context.Background(), inbox.DeadLetter{Entry: e, Class: res.Class, Reason: res.Reason, Err: res.Err})
		dbtest.Must(t, err, "mark dead-lettered")
		if st != inboxkit.StatusDeadLettered {
			t.Fatalf("status = %s", st)
		}
		r := get(t, s, "E-5")
		if r.Status != inboxkit.StatusDeadLettered || r.ReasonCode != inboxkit.ReasonMaxAttemptsExceeded || r.LastError != "downstream 503" || r.Attempts != 3 {
			t.Errorf("row = %+v", r)
		}
		res = mustProcess(t, s, e, failing)
		wantOutcome(t, res, inboxkit.OutcomeDuplicate, inboxkit.StatusDeadLettered)
		if calls != 3 || b.allBusinessRows(t) != 0 {
			t.Errorf("calls = %d", calls)
		}
	})
}

// A handler that kills the process leaves no failure record. The attempt is
// counted by a marker committed before the handler runs, so the message is
// dead-lettered after MaxAttempts deliveries, whatever the broker tells.
func TestPoisonByCrashReachesDeadLetter(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 4}})
		calls := 0
		crash := func(ctx context.Context, tx *sql.Tx) error {
			calls++
			if err := insertBusiness(db, "E-6", "half-done")(ctx, tx); err != nil {
				return err
			}
			panic("simulated crash: process dies inside the handler")
		}
		deliver := func(e inbox.Entry) (res inbox.Result, crashed bool) {
			defer func() {
				if recover() != nil {
					crashed = true
				}
			}()
			return mustProcess(t, s, e, crash), false
		}
		e := entry("E-6")
		for i := 1; i <= 4; i++ {
			if _, crashed := deliver(e); !crashed {
				t.Fatalf("delivery %d did not reach the handler", i)
			}
			// No redelivery flag on purpose: the inbox's marker counts.
		}
		res, crashed := deliver(e)
		if crashed {
			t.Fatalf("handler ran a 5th time with MaxAttempts 4")
		}
		wantOutcome(t, res, inboxkit.OutcomeDeadLetter, inboxkit.StatusTechnicalFailure)
		if res.Reason != inboxkit.ReasonMaxAttemptsExceeded || res.Attempts != 4 || calls != 4 || res.Err == nil {
			t.Errorf("result %+v, calls %d", res, calls)
		}
		if r := get(t, s, "E-6"); r.Attempts != 4 || !strings.Contains(r.LastError, "recorded no outcome") {
			t.Errorf("row attempts %d, last error %q", r.Attempts, r.LastError)
		}
		if n := b.businessRows(t, "E-6"); n != 0 {
			t.Errorf("business rows = %d, want 0", n)
		}
	})
}

// The broker's delivery count also counts deliveries that never reached the
// handler (handed back while the database was down): it is not an attempt
// count (issue 11, item 1).
func TestBrokerDeliveryCountIsNoAttemptCount(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 5}})
		e := entry("E-7")
		e.Redelivered, e.DeliveryCount = true, 17
		calls := 0
		res := mustProcess(t, s, e, func(context.Context, *sql.Tx) error { calls++; return nil })
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if calls != 1 || res.Attempts != 1 {
			t.Errorf("calls %d, result %+v", calls, res)
		}
	})
}

func TestPoisonFromHandler(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		h := func(ctx context.Context, tx *sql.Tx) error {
			_ = insertBusiness(db, "E-8", "x")(ctx, tx)
			return fmt.Errorf("decode: %w", poison("MALFORMED_PAYLOAD"))
		}
		res := mustProcess(t, s, entry("E-8"), h)
		if res.Outcome != inboxkit.OutcomeDeadLetter || res.Class != inboxkit.ClassPoison || res.Reason != "MALFORMED_PAYLOAD" {
			t.Fatalf("result = %+v", res)
		}
		if r := get(t, s, "E-8"); r.Status != inboxkit.StatusTechnicalFailure || r.Attempts != 1 || res.Attempts != 1 {
			t.Fatalf("before the dead letter is published: row %s attempts %d (result %d), want the attempt marker TECHNICAL_FAILURE 1", r.Status, r.Attempts, res.Attempts)
		}
		st, err := s.MarkDeadLettered(context.Background(), inbox.DeadLetter{Entry: entry("E-8"), Class: res.Class, Reason: res.Reason, Err: res.Err})
		dbtest.Must(t, err, "mark")
		r := get(t, s, "E-8")
		if st != inboxkit.StatusDeadLettered || r.Status != st || r.ReasonCode != "MALFORMED_PAYLOAD" || r.ErrorClass != "POISON" || b.businessRows(t, "E-8") != 0 {
			t.Errorf("row = %+v", r)
		}
	})
}

func TestMissingOrLongEventID(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		never := func(context.Context, *sql.Tx) error { t.Error("handler ran"); return nil }
		res := mustProcess(t, s, entry(""), never)
		if res.Outcome != inboxkit.OutcomeDeadLetter || res.Reason != inboxkit.ReasonMissingEventID || res.Class != inboxkit.ClassPoison {
			t.Errorf("missing id: %+v", res)
		}
		res = mustProcess(t, s, entry(strings.Repeat("x", 121)), never)
		if res.Outcome != inboxkit.OutcomeDeadLetter || res.Reason != inboxkit.ReasonEventIDTooLong {
			t.Errorf("long id: %+v", res)
		}
		res = mustProcess(t, s, entry(strings.Repeat("y", 120)), insertBusiness(db, "y", "ok"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		if _, err := s.Process(context.Background(), inbox.Entry{EventID: "a"}, never); !errors.Is(err, inbox.ErrInvalidEntry) {
			t.Errorf("empty consumer name: err = %v", err)
		}
		_ = b
	})
}

func TestNoAttemptFailuresDoNotCount(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2}})
		open := decided{inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: "CIRCUIT_OPEN", NoAttempt: true}, "circuit open"}
		e := entry("E-9")
		for i := 0; i < 5; i++ {
			res := mustProcess(t, s, e, func(context.Context, *sql.Tx) error { return open })
			e.Redelivered = true
			if res.Outcome != inboxkit.OutcomeRetry || res.Attempts != 0 || res.Reason != "CIRCUIT_OPEN" {
				t.Fatalf("delivery %d: %+v", i+1, res)
			}
		}
		res := mustProcess(t, s, e, insertBusiness(db, "E-9", "ok"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
	})
}

func TestAuditByCorrelation(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		for i, id := range []string{"C-3", "C-1", "C-2"} {
			e := entry(id)
			e.CorrelationID = "case-42"
			if i == 1 {
				mustProcess(t, s, e, func(context.Context, *sql.Tx) error { return reject("INVALID_AMOUNT") })
			} else {
				mustProcess(t, s, e, insertBusiness(db, id, ""))
			}
			b.clock.Add(time.Second)
		}
		mustProcess(t, s, entry("other"), insertBusiness(db, "other", ""))
		rows, err := s.ByCorrelation(context.Background(), "case-42")
		dbtest.Must(t, err, "audit")
		var got []string
		for _, r := range rows {
			got = append(got, r.EventID+":"+string(r.Status)+":"+r.ReasonCode)
		}
		want := "C-3:PROCESSED:,C-1:REJECTED:INVALID_AMOUNT,C-2:PROCESSED:"
		if strings.Join(got, ",") != want {
			t.Errorf("audit = %v, want %s", got, want)
		}
	})
}

func TestReplayResetsDeadLetteredRow(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 1}})
		res := mustProcess(t, s, entry("E-10"), func(context.Context, *sql.Tx) error { return errors.New("down") })
		if res.Outcome != inboxkit.OutcomeDeadLetter {
			t.Fatalf("result %+v", res)
		}
		_, err := s.MarkDeadLettered(context.Background(), inbox.DeadLetter{Entry: entry("E-10"), Reason: res.Reason, Err: res.Err})
		dbtest.Must(t, err, "mark")
		ok, err := s.ResetForReplay(context.Background(), "E-10", consumerName)
		dbtest.Must(t, err, "reset")
		if !ok {
			t.Fatal("reset found no dead-lettered row")
		}
		res = mustProcess(t, s, entry("E-10"), insertBusiness(db, "E-10", "replayed"))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		r := get(t, s, "E-10")
		if r.ReplayCount != 1 || b.businessRows(t, "E-10") != 1 {
			t.Errorf("row %+v", r)
		}
		ok, err = s.ResetForReplay(context.Background(), "E-10", consumerName)
		dbtest.Must(t, err, "reset again")
		if ok {
			t.Error("a PROCESSED row was reset for replay")
		}
	})
}

// 32 goroutines deliver the same event at once: the primary key lets exactly
// one through.
func TestConcurrentSameEvent(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		db.SetMaxOpenConns(40)
		const n = 32
		var processed, duplicates atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.Process(context.Background(), entry("SAME"), insertBusiness(db, "SAME", "x"))
				if err != nil {
					t.Error(err)
					return
				}
				switch res.Outcome {
				case inboxkit.OutcomeProcessed:
					processed.Add(1)
				case inboxkit.OutcomeDuplicate:
					duplicates.Add(1)
				default:
					t.Errorf("unexpected %+v", res)
				}
			}()
		}
		close(start)
		wg.Wait()
		t.Logf("%s: %d processed, %d duplicates, %d business rows", db.Backend, processed.Load(), duplicates.Load(), b.businessRows(t, "SAME"))
		if processed.Load() != 1 || duplicates.Load() != n-1 || b.businessRows(t, "SAME") != 1 {
			t.Errorf("processed %d, duplicates %d, business rows %d; want 1, %d, 1", processed.Load(), duplicates.Load(), b.businessRows(t, "SAME"), n-1)
		}
	})
}

// Two pools ("instances") race over 50 events, each delivered 4 times by each.
func TestTwoInstancesRace(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s1, b := setup(t, db, inbox.Config{})
		d, _ := inbox.DialectByName(db.Backend)
		s2, err := inbox.New(db.Open(t), d, inbox.Config{Clock: b.clock})
		dbtest.Must(t, err, "second store")
		const events, copies = 50, 4
		var processed, duplicates atomic.Int32
		var wg sync.WaitGroup
		for _, s := range []*inbox.Store{s1, s2} {
			for c := 0; c < copies; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < events; i++ {
						id := fmt.Sprintf("R-%d", i)
						res, err := s.Process(context.Background(), entry(id), insertBusiness(db, id, "x"))
						if err != nil {
							t.Error(err)
							return
						}
						switch res.Outcome {
						case inboxkit.OutcomeProcessed:
							processed.Add(1)
						case inboxkit.OutcomeDuplicate:
							duplicates.Add(1)
						default:
							t.Errorf("event %s: %+v", id, res)
						}
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("%s: %d processed, %d duplicates, %d business rows", db.Backend, processed.Load(), duplicates.Load(), b.allBusinessRows(t))
		if processed.Load() != events || duplicates.Load() != events*(2*copies-1) || b.allBusinessRows(t) != events {
			t.Errorf("processed %d duplicates %d business %d", processed.Load(), duplicates.Load(), b.allBusinessRows(t))
		}
	})
}

func TestValidateTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"INBOX_EVENT_PROCESSING", true},
		{"inbox", true},
		{"a1_b2", true},
		{"", false},
		{"1inbox", false},
		{"_inbox", false},
		{"inbox; DROP TABLE x", false},
		{"inbox--", false},
		{"schema.inbox", false},
		{`"quoted"`, false},
		{"inbox table", false},
		{strings.Repeat("a", 26), false},
		{"inböx", false},
	} {
		err := inbox.ValidateTable(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateTable(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, inbox.ErrBadTableName) {
			t.Errorf("error %v does not wrap ErrBadTableName", err)
		}
		_, nerr := inbox.New(&sql.DB{}, inbox.SQLite, inbox.Config{Table: tc.name})
		if tc.name != "" && (nerr == nil) != tc.ok {
			t.Errorf("New with table %q: %v", tc.name, nerr)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := inbox.New(&sql.DB{}, inbox.SQLite, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: -1}})
	if err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Errorf("negative MaxAttempts: %v", err)
	}
	_, err = inbox.New(nil, inbox.SQLite, inbox.Config{})
	if err == nil {
		t.Error("nil db accepted")
	}
	_, err = inbox.New(&sql.DB{}, inbox.Dialect{}, inbox.Config{})
	if err == nil {
		t.Error("empty dialect accepted")
	}
	if _, err := inbox.DialectByName("db2"); !errors.Is(err, inbox.ErrUnknownDialect) {
		t.Errorf("unknown dialect: %v", err)
	}
}

func TestCustomTableName(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Table: "letters_inbox"})
		res := mustProcess(t, s, entry("T-1"), insertBusiness(db, "T-1", ""))
		wantOutcome(t, res, inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		var n int
		dbtest.Must(t, b.db.QueryRow(`SELECT COUNT(*) FROM letters_inbox`).Scan(&n), "count")
		if n != 1 {
			t.Errorf("rows in letters_inbox = %d", n)
		}
	})
}
