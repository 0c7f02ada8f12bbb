package inbox_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Tests of the store-then-process variant: Receive, Worker.

// deadLetters is a Publisher that records the dead letters published to
// it ("event/class/reason"); failNext makes the next publishes fail.
type deadLetters struct {
	mu       sync.Mutex
	calls    []string // "event/class/reason"
	failNext int
}

func (d *deadLetters) Publish(_ context.Context, _ string, headers map[string]string, body []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failNext > 0 {
		d.failNext--
		return errors.New("dlq broker unavailable")
	}
	env, err := dlq.Parse(headers, body)
	if err != nil {
		return err
	}
	d.calls = append(d.calls, env.EventID+"/"+env.Class+"/"+env.Reason)
	return nil
}

// ports are the store's ports with d as the dead-letter publisher.
func (d *deadLetters) ports() inbox.Ports {
	return inbox.Ports{DeadLetters: d, DeadLetterQueue: "DLQ.test"}
}

func (d *deadLetters) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// businessHandler inserts one business row (event id, note) per message.
func businessHandler(db *dbtest.DB, note string) inbox.MessageHandler {
	q := `INSERT INTO business (event_id, note) VALUES (?, ?)`
	if db.Backend == dbtest.Postgres {
		q = inbox.Postgres.Rebind(q)
	}
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		_, err := tx.ExecContext(ctx, q, m.ID, note)
		return err
	}
}

func newWorker(t *testing.T, s *inbox.Store, cfg inbox.WorkerConfig, ports ...inbox.Ports) *inbox.Worker {
	t.Helper()
	if cfg.ConsumerName == "" {
		cfg.ConsumerName = consumerName
	}
	if len(ports) == 0 {
		ports = append(ports, (&deadLetters{}).ports())
	}
	s, err := s.WithPorts(ports[0])
	dbtest.Must(t, err, "ports")
	w, err := s.NewWorker(cfg)
	dbtest.Must(t, err, "new worker")
	return w
}

func receive(t testing.TB, s *inbox.Store, id string) (bool, inboxkit.Status) {
	t.Helper()
	e := inbox.Entry{EventID: id, ConsumerName: consumerName, CorrelationID: "corr-" + id}
	inserted, st, err := s.Receive(context.Background(), e, map[string]string{"event-id": id, "type": "InvoiceCreated"}, []byte("payload of "+id))
	if err != nil {
		t.Fatalf("Receive(%s): %v", id, err)
	}
	return inserted, st
}

// waitCounts polls the store's rows by status until done holds, and fails
// the test after within.
func waitCounts(t *testing.T, s *inbox.Store, within time.Duration, done func(map[inboxkit.Status]int) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		counts, err := s.CountByStatus(context.Background())
		dbtest.Must(t, err, "count")
		if done(counts) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows by status after %s: %v", within, counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func claimOne(t *testing.T, w *inbox.Worker) inbox.Claimed {
	t.Helper()
	cs, err := w.Claim(context.Background(), 1)
	dbtest.Must(t, err, "claim")
	if len(cs) != 1 {
		t.Fatalf("claimed %d entries, want 1", len(cs))
	}
	return cs[0]
}

func claimNone(t *testing.T, w *inbox.Worker) {
	t.Helper()
	cs, err := w.Claim(context.Background(), 10)
	dbtest.Must(t, err, "claim")
	if len(cs) != 0 {
		t.Fatalf("claimed %d entries (first %s, status before claim?), want none", len(cs), cs[0].Message.ID)
	}
}

func TestReceive(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()

		inserted, st := receive(t, s, "E-1")
		if !inserted || st != inboxkit.StatusReceived {
			t.Fatalf("first Receive = %v %s, want inserted RECEIVED", inserted, st)
		}
		inserted, st = receive(t, s, "E-1")
		if inserted || st != inboxkit.StatusReceived {
			t.Fatalf("duplicate Receive = %v %s, want not inserted, RECEIVED", inserted, st)
		}
		r := get(t, s, "E-1")
		sum := sha256.Sum256([]byte("payload of E-1"))
		if r.Status != inboxkit.StatusReceived || r.Attempts != 0 || r.CorrelationID != "corr-E-1" || r.PayloadHash != hex.EncodeToString(sum[:]) {
			t.Fatalf("row = %+v", r)
		}

		// The message comes back whole from the claim.
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: businessHandler(db, "x")})
		c := claimOne(t, w)
		m := c.Message
		if m.ID != "E-1" || m.CorrelationID != "corr-E-1" || string(m.Body) != "payload of E-1" ||
			m.Header("type") != "InvoiceCreated" || len(m.Headers) != 2 || m.Redelivered || c.Attempts != 1 || c.Owner != w.Owner() {
			t.Fatalf("claimed = %+v", c)
		}

		// A duplicate of a transactional-variant row (PROCESSED) is reported too.
		mustProcess(t, s, entry("E-2"), insertBusiness(db, "E-2", "tx"))
		inserted, st = receive(t, s, "E-2")
		if inserted || st != inboxkit.StatusProcessed {
			t.Fatalf("Receive of processed = %v %s", inserted, st)
		}

		// Unstorable messages: a typed poison error with the reason code.
		for _, tc := range []struct{ id, reason string }{{"", inboxkit.ReasonMissingEventID}, {strings.Repeat("x", 121), inboxkit.ReasonEventIDTooLong}} {
			_, _, err := s.Receive(ctx, inbox.Entry{EventID: tc.id, ConsumerName: consumerName}, nil, []byte("p"))
			var re *inbox.ReceiveError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, inbox.ErrUnstorable) {
				t.Fatalf("Receive(%q) error = %v, want ReceiveError %s", tc.id, err, tc.reason)
			}
			if d := inboxkit.DecisionOf(err); d.Class != inboxkit.ClassPoison || d.Reason != tc.reason {
				t.Fatalf("decision = %+v", d)
			}
		}
		if _, _, err := s.Receive(ctx, inbox.Entry{EventID: "E-3"}, nil, nil); !errors.Is(err, inbox.ErrInvalidEntry) {
			t.Fatalf("empty consumer: %v", err)
		}
		// Nil headers and payload are stored as NULL and come back empty.
		if _, _, err := s.Receive(ctx, inbox.Entry{EventID: "E-4", ConsumerName: consumerName}, nil, nil); err != nil {
			t.Fatal(err)
		}
		c = claimOne(t, w)
		if c.Message.ID != "E-4" || c.Message.Headers != nil || len(c.Message.Body) != 0 {
			t.Fatalf("claimed = %+v", c)
		}
	})
}

// TestWorkerExactlyOnce: 4 workers, 2,000 entries, 20% duplicate deliveries
// while the entries are IN_PROGRESS (and more at random moments): every
// entry is processed exactly once and no duplicate changes a row.
func TestWorkerExactlyOnce(t *testing.T) {
	t.Parallel()
	const entries, workers = 2000, 4
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		start := time.Now()
		s, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		id := func(i int) string { return fmt.Sprintf("E-%04d", i) }
		isDup := func(id string) bool { var n int; fmt.Sscanf(id, "E-%d", &n); return n%5 == 0 }

		// Receive concurrently, like several listener threads.
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := g; i < entries; i += workers {
					e := inbox.Entry{EventID: id(i), ConsumerName: consumerName, CorrelationID: "corr"}
					if ok, _, err := s.Receive(ctx, e, map[string]string{"n": id(i)}, []byte(id(i))); !ok || err != nil {
						t.Errorf("first Receive of %s: inserted=%v err=%v", id(i), ok, err)
					}
				}
			})
		}
		wg.Wait()
		received := time.Since(start)

		var handled [entries]atomic.Int32
		var processed, dupsInProgress atomic.Int32
		handler := businessHandler(db, "w")
		done := make(chan struct{})
		var storm sync.WaitGroup
		// Duplicate storm: a second listener redelivers the 20% at random
		// moments, whatever their status.
		storm.Go(func() {
			for i := 0; i < entries; i += 5 {
				inserted, st, err := s.Receive(ctx, inbox.Entry{EventID: id(i), ConsumerName: consumerName}, nil, []byte("dup"))
				if err != nil || inserted || st == "" {
					t.Errorf("storm duplicate %s: inserted=%v status=%s err=%v", id(i), inserted, st, err)
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
		for g := range workers {
			w := newWorker(t, s, inbox.WorkerConfig{
				Owner:     fmt.Sprintf("worker-%d", g),
				ClaimSize: 20,
				HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
					var n int
					fmt.Sscanf(m.ID, "E-%d", &n)
					handled[n].Add(1)
					return handler(ctx, tx, m)
				},
			})
			wg.Go(func() {
				for processed.Load() < entries && !t.Failed() {
					batch, err := w.Claim(ctx, 0)
					if err != nil {
						t.Errorf("%s: claim: %v", w.Owner(), err)
						return
					}
					if len(batch) == 0 {
						time.Sleep(2 * time.Millisecond)
						continue
					}
					for _, c := range batch {
						if isDup(c.Message.ID) {
							// The broker redelivers while the entry is IN_PROGRESS.
							inserted, st, err := s.Receive(ctx, inbox.Entry{EventID: c.Message.ID, ConsumerName: consumerName}, nil, []byte("dup"))
							if err != nil || inserted || st != inboxkit.StatusInProgress {
								t.Errorf("duplicate of %s in progress: inserted=%v status=%s err=%v", c.Message.ID, inserted, st, err)
							}
							r, err := s.Get(ctx, c.Message.ID, consumerName)
							if err != nil || r.Status != inboxkit.StatusInProgress || r.LeaseOwner != w.Owner() || r.Attempts != 1 || r.ProcessedAt != nil {
								t.Errorf("after duplicate, row = %+v (%v)", r, err)
							}
							dupsInProgress.Add(1)
						}
						res, err := w.Process(ctx, c)
						if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
							t.Errorf("%s: process %s: %+v %v", w.Owner(), c.Message.ID, res, err)
						}
						processed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(done)
		storm.Wait()

		counts, err := s.CountByStatus(ctx)
		dbtest.Must(t, err, "count")
		if len(counts) != 1 || counts[inboxkit.StatusProcessed] != entries {
			t.Fatalf("statuses = %v, want %d PROCESSED", counts, entries)
		}
		if n := b.allBusinessRows(t); n != entries {
			t.Fatalf("business rows = %d, want %d", n, entries)
		}
		var distinct int
		dbtest.Must(t, db.QueryRow(`SELECT COUNT(DISTINCT event_id) FROM business`).Scan(&distinct), "distinct")
		if distinct != entries {
			t.Fatalf("distinct business events = %d, want %d", distinct, entries)
		}
		for i := range handled {
			if n := handled[i].Load(); n != 1 {
				t.Fatalf("%s handled %d times", id(i), n)
			}
		}
		if dupsInProgress.Load() != entries/5 {
			t.Fatalf("duplicates delivered in progress = %d, want %d", dupsInProgress.Load(), entries/5)
		}
		t.Logf("%d entries: received in %s, processed by %d workers in %s (%d duplicates while IN_PROGRESS)",
			entries, received.Round(time.Millisecond), workers, (time.Since(start) - received).Round(time.Millisecond), dupsInProgress.Load())
	})
}

// TestWorkerLeaseExpiry: a worker that stalls past its lease loses the
// entry to another worker; its late commit is refused and rolled back.
func TestWorkerLeaseExpiry(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		stalled := newWorker(t, s, inbox.WorkerConfig{Owner: "stalled", HandleFunc: businessHandler(db, "stalled")})
		other := newWorker(t, s, inbox.WorkerConfig{Owner: "other", HandleFunc: businessHandler(db, "other")})

		// Stalled between claim and processing (GC pause, slow start).
		receive(t, s, "E-1")
		late := claimOne(t, stalled)
		claimNone(t, other) // the lease holds
		b.clock.Add(30 * time.Second)
		took := claimOne(t, other)
		if took.Message.ID != "E-1" || took.Attempts != 2 || !took.Message.Redelivered {
			t.Fatalf("takeover claim = %+v", took)
		}
		// The late worker finishes while the other one holds the entry: refused.
		if _, err := stalled.Process(ctx, late); !errors.Is(err, inbox.ErrLeaseLost) {
			t.Fatalf("late Process error = %v, want ErrLeaseLost", err)
		}
		if n := b.businessRows(t, "E-1"); n != 0 {
			t.Fatalf("late worker's business rows = %d, want 0 (rolled back)", n)
		}
		if r := get(t, s, "E-1"); r.Status != inboxkit.StatusInProgress || r.LeaseOwner != "other" {
			t.Fatalf("row after refused commit = %+v", r)
		}
		res, err := other.Process(ctx, took)
		if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("takeover Process = %+v %v", res, err)
		}
		// And once more after the entry is done: still refused.
		if _, err := stalled.Process(ctx, late); !errors.Is(err, inbox.ErrLeaseLost) {
			t.Fatalf("late Process after done = %v, want ErrLeaseLost", err)
		}
		if n := b.businessRows(t, "E-1"); n != 1 {
			t.Fatalf("business rows = %d, want 1", n)
		}

		if db.Backend == dbtest.SQLite {
			// SQLite has one writer at a time: a worker stalled inside its
			// transaction blocks every other writer, so no takeover can
			// happen until it commits or its connection dies.
			return
		}
		// Stalled inside the handler, its business row written but not committed.
		receive(t, s, "E-2")
		inHandler, release := make(chan struct{}), make(chan struct{})
		slow := newWorker(t, s, inbox.WorkerConfig{Owner: "slow", HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			err := businessHandler(db, "slow")(ctx, tx, m)
			close(inHandler)
			<-release
			return err
		}})
		c := claimOne(t, slow)
		errc := make(chan error, 1)
		go func() { _, err := slow.Process(ctx, c); errc <- err }()
		<-inHandler
		b.clock.Add(31 * time.Second)
		took = claimOne(t, other)
		if res, err := other.Process(ctx, took); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("takeover Process = %+v %v", res, err)
		}
		close(release)
		if err := <-errc; !errors.Is(err, inbox.ErrLeaseLost) {
			t.Fatalf("stalled handler's commit = %v, want ErrLeaseLost", err)
		}
		var note string
		q := inbox.MySQL.Rebind(`SELECT note FROM business WHERE event_id = ?`)
		if db.Backend == dbtest.Postgres {
			q = inbox.Postgres.Rebind(q)
		}
		dbtest.Must(t, db.QueryRow(q, "E-2").Scan(&note), "business row of E-2")
		if note != "other" || b.businessRows(t, "E-2") != 1 {
			t.Fatalf("business row of E-2 = %q (%d rows), want the other worker's only", note, b.businessRows(t, "E-2"))
		}
		if r := get(t, s, "E-2"); r.Status != inboxkit.StatusProcessed || r.Attempts != 2 {
			t.Fatalf("row = %+v", r)
		}
	})
}

// TestWorkerTechnicalFailure: failures back off (not claimed before
// NEXT_ATTEMPT_AT) and are retried; at the threshold the entry is
// dead-lettered, and a failing dead-letter publish keeps it.
func TestWorkerTechnicalFailure(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		// A backoff without jitter (Backoff.Delay's is tested on its own),
		// so that the injected clock can step to the due time.
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3, Redelivery: inboxkit.Backoff{Initial: time.Second, Jitter: -1}}})
		ctx := context.Background()
		dl := &deadLetters{}
		var calls atomic.Int32
		failFor := map[string]int{"E-1": 100, "E-2": 1} // failures before success
		ok := businessHandler(db, "ok")
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			calls.Add(1)
			if err := ok(ctx, tx, m); err != nil {
				return err
			}
			if failFor[m.ID] > 0 {
				failFor[m.ID]--
				return errors.New("downstream timeout")
			}
			return nil
		}}, dl.ports())

		// E-2 fails once, then succeeds.
		receive(t, s, "E-2")
		res, err := w.Process(ctx, claimOne(t, w))
		if err != nil || res.Outcome != inboxkit.OutcomeRetry || res.Status != inboxkit.StatusTechnicalFailure || res.RetryAfter != time.Second {
			t.Fatalf("first attempt = %+v %v", res, err)
		}
		r := get(t, s, "E-2")
		if r.NextAttempt == nil || !r.NextAttempt.Equal(b.clock.Now().Add(time.Second)) || r.LeaseOwner != "" || r.LeaseUntil != nil ||
			r.LastError != "downstream timeout" || r.Attempts != 1 || b.businessRows(t, "E-2") != 0 {
			t.Fatalf("after failure row = %+v", r)
		}
		claimNone(t, w)
		b.clock.Add(999 * time.Millisecond)
		claimNone(t, w)
		b.clock.Add(time.Millisecond)
		c := claimOne(t, w)
		if c.Attempts != 2 || c.LastError != "downstream timeout" {
			t.Fatalf("retry claim = %+v", c)
		}
		if res, err := w.Process(ctx, c); err != nil || res.Outcome != inboxkit.OutcomeProcessed || res.Attempts != 2 {
			t.Fatalf("retry = %+v %v", res, err)
		}
		if r := get(t, s, "E-2"); r.Status != inboxkit.StatusProcessed || r.NextAttempt != nil || b.businessRows(t, "E-2") != 1 {
			t.Fatalf("row = %+v", r)
		}

		// E-1 always fails: attempts 1 and 2 back off 1s and 2s; attempt 3
		// reaches the threshold; the first dead-letter publish fails.
		receive(t, s, "E-1")
		for attempt := 1; attempt <= 2; attempt++ {
			res, err := w.Process(ctx, claimOne(t, w))
			want := time.Duration(attempt) * time.Second
			if err != nil || res.Outcome != inboxkit.OutcomeRetry || res.Attempts != attempt || res.RetryAfter != want {
				t.Fatalf("attempt %d = %+v %v", attempt, res, err)
			}
			b.clock.Add(want - time.Millisecond)
			claimNone(t, w)
			b.clock.Add(time.Millisecond)
		}
		dl.failNext = 1
		res, err = w.Process(ctx, claimOne(t, w))
		if err != nil || res.Outcome != inboxkit.OutcomeRetry || res.Status != inboxkit.StatusTechnicalFailure || res.Attempts != 3 {
			t.Fatalf("threshold with failing DLQ = %+v %v", res, err)
		}
		r = get(t, s, "E-1")
		if r.Status != inboxkit.StatusTechnicalFailure || r.ReasonCode != inboxkit.ReasonMaxAttemptsExceeded || !strings.Contains(r.LastError, "dlq broker unavailable") {
			t.Fatalf("row kept after failed DLQ = %+v", r)
		}
		if len(dl.list()) != 0 {
			t.Fatalf("dead letters = %v", dl.list())
		}
		// Next claim: past the threshold; dead-lettered without running the handler.
		b.clock.Add(4 * time.Second)
		before := calls.Load()
		c = claimOne(t, w)
		res, err = w.Process(ctx, c)
		if err != nil || res.Outcome != inboxkit.OutcomeDeadLetter || res.Status != inboxkit.StatusDeadLettered || res.Reason != inboxkit.ReasonMaxAttemptsExceeded {
			t.Fatalf("dead letter = %+v %v", res, err)
		}
		if calls.Load() != before {
			t.Fatalf("handler ran past the threshold")
		}
		if got := dl.list(); len(got) != 1 || got[0] != "E-1/TECHNICAL/MAX_ATTEMPTS_EXCEEDED" {
			t.Fatalf("dead letters = %v", got)
		}
		r = get(t, s, "E-1")
		if r.Status != inboxkit.StatusDeadLettered || r.Attempts != 4 || r.ProcessedAt == nil || r.LeaseOwner != "" || b.businessRows(t, "E-1") != 0 {
			t.Fatalf("dead-lettered row = %+v", r)
		}
		b.clock.Add(time.Hour)
		claimNone(t, w)

		// A replay from the dead-letter destination: the worker takes the
		// stored entry again at once.
		ok2, err := s.ResetForReplay(ctx, "E-1", consumerName)
		if err != nil || !ok2 {
			t.Fatalf("ResetForReplay = %v %v", ok2, err)
		}
		if c := claimOne(t, w); c.Attempts != 1 || string(c.Message.Body) != "payload of E-1" {
			t.Fatalf("claim after replay = %+v", c)
		}
	})
}

// TestWorkerRejectAndPoison: a business rejection is REJECTED and never
// retried; poison is dead-lettered at once.
func TestWorkerRejectAndPoison(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		dl := &deadLetters{}
		ins := businessHandler(db, "x")
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			if err := ins(ctx, tx, m); err != nil {
				return err
			}
			switch m.ID {
			case "R-1":
				return reject("CUSTOMER_UNKNOWN")
			case "P-1":
				return poison("MALFORMED_PAYLOAD")
			}
			return nil
		}}, dl.ports())
		receive(t, s, "R-1")
		res, err := w.Process(ctx, claimOne(t, w))
		if err != nil || res.Outcome != inboxkit.OutcomeRejected || res.Status != inboxkit.StatusRejected || res.Reason != "CUSTOMER_UNKNOWN" {
			t.Fatalf("reject = %+v %v", res, err)
		}
		r := get(t, s, "R-1")
		if r.Status != inboxkit.StatusRejected || r.ReasonCode != "CUSTOMER_UNKNOWN" || r.ErrorClass != "BUSINESS" || r.ProcessedAt == nil || r.LeaseOwner != "" {
			t.Fatalf("rejected row = %+v", r)
		}
		if n := b.businessRows(t, "R-1"); n != 0 {
			t.Fatalf("rejected business rows = %d, want 0", n)
		}

		receive(t, s, "P-1")
		res, err = w.Process(ctx, claimOne(t, w))
		if err != nil || res.Outcome != inboxkit.OutcomeDeadLetter || res.Status != inboxkit.StatusDeadLettered || res.Class != inboxkit.ClassPoison {
			t.Fatalf("poison = %+v %v", res, err)
		}
		if got := dl.list(); len(got) != 1 || got[0] != "P-1/POISON/MALFORMED_PAYLOAD" {
			t.Fatalf("dead letters = %v", got)
		}
		if r := get(t, s, "P-1"); r.Status != inboxkit.StatusDeadLettered || r.Attempts != 1 || b.businessRows(t, "P-1") != 0 {
			t.Fatalf("poison row = %+v", r)
		}
		b.clock.Add(24 * time.Hour)
		claimNone(t, w)
		if inserted, st := receive(t, s, "R-1"); inserted || st != inboxkit.StatusRejected {
			t.Fatalf("redelivery of rejected = %v %s", inserted, st)
		}
	})
}

// TestWorkerRun: several Run loops drain the table while messages arrive,
// and stop on cancel; Release hands a claim back at once.
func TestWorkerRun(t *testing.T) {
	t.Parallel()
	const entries = 200
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		// Release first, on its own.
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: businessHandler(db, "run"), PollInterval: 5 * time.Millisecond})
		receive(t, s, "X-1")
		c := claimOne(t, w)
		dbtest.Must(t, w.Release(ctx, c), "release")
		if r := get(t, s, "X-1"); r.Status != inboxkit.StatusInProgress || r.LeaseOwner != "" || r.Attempts != 1 {
			t.Fatalf("released row = %+v", r)
		}
		if c2 := claimOne(t, w); c2.Attempts != 2 {
			t.Fatalf("claim after release = %+v", c2)
		}
		if err := w.Release(ctx, c); !errors.Is(err, inbox.ErrLeaseLost) {
			t.Fatalf("second release of an old claim = %v, want ErrLeaseLost", err)
		}
		b.clock.Add(time.Minute) // the re-claim above expires; Run takes it

		var wg sync.WaitGroup
		for i := range 3 {
			w := newWorker(t, s, inbox.WorkerConfig{Owner: fmt.Sprintf("run-%d", i), HandleFunc: businessHandler(db, "run"), PollInterval: 5 * time.Millisecond, BatchSize: 5})
			wg.Go(func() {
				if err := w.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
			})
		}
		for i := range entries {
			receive(t, s, fmt.Sprintf("R-%03d", i))
		}
		waitCounts(t, s, 60*time.Second, func(c map[inboxkit.Status]int) bool { return c[inboxkit.StatusProcessed] == entries+1 })
		cancel()
		wg.Wait()
		if n := b.allBusinessRows(t); n != entries+1 {
			t.Fatalf("business rows = %d, want %d", n, entries+1)
		}
	})
}

func TestWorkerConfig(t *testing.T) {
	t.Parallel()
	s, err := inbox.New(&sql.DB{}, inbox.SQLite, inbox.Config{})
	dbtest.Must(t, err, "store")
	h := func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
	if _, err := s.NewWorker(inbox.WorkerConfig{ConsumerName: "c", HandleFunc: h}); err == nil || !strings.Contains(err.Error(), "WithPorts") {
		t.Errorf("NewWorker on a store without ports = %v, want an error naming WithPorts", err)
	}
	s, err = s.WithPorts((&deadLetters{}).ports())
	dbtest.Must(t, err, "ports")
	for _, tc := range []struct {
		cfg  inbox.WorkerConfig
		want string
	}{
		{inbox.WorkerConfig{HandleFunc: h}, "ConsumerName"},
		{inbox.WorkerConfig{ConsumerName: "c"}, "HandleFunc"},
		{inbox.WorkerConfig{ConsumerName: "c", HandleFunc: h, LeaseDuration: -1}, "LeaseDuration"},
		{inbox.WorkerConfig{ConsumerName: "c", HandleFunc: h, Owner: strings.Repeat("o", 81)}, "Owner"},
	} {
		if _, err := s.NewWorker(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWorker(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	w, err := s.NewWorker(inbox.WorkerConfig{ConsumerName: "c", HandleFunc: h})
	dbtest.Must(t, err, "worker")
	if w.Owner() == "" || len(w.Owner()) > 80 {
		t.Errorf("default owner = %q", w.Owner())
	}
}
