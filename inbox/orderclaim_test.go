package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Store-then-process workers claim an entry with an order key only while
// it is the oldest open entry of its key.

func receiveKeyed(t testing.TB, s *inbox.Store, id, key string) {
	t.Helper()
	e := inbox.Entry{EventID: id, ConsumerName: consumerName, OrderKey: key}
	if ok, _, err := s.Receive(context.Background(), e, map[string]string{"key": key}, []byte(id)); !ok || err != nil {
		t.Fatalf("Receive(%s, key %s): inserted %v, %v", id, key, ok, err)
	}
}

func wantClaimed(t *testing.T, w *inbox.Worker, want ...string) []inbox.Claimed {
	t.Helper()
	cs, err := w.Claim(context.Background(), 10)
	dbtest.Must(t, err, "claim")
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Message.ID)
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("claimed %v, want %v", ids, want)
	}
	return cs
}

// TestWorkerClaimsKeyHead: with the clock standing still (every entry
// received in the same microsecond), a key's entries are claimed one at a
// time in arrival order, through a failure waiting for its next attempt,
// an expired lease and a dead letter; entries without a key and other keys
// are not held up.
func TestWorkerClaimsKeyHead(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 2, Redelivery: inboxkit.Backoff{Initial: time.Second, Jitter: -1}}})
		ctx := context.Background()
		// Event ids against arrival: the id order is not the key's order.
		for _, r := range [][2]string{{"k-9", "K"}, {"k-5", "K"}, {"k-7", "K"}, {"k-1", "K"}, {"l-2", "L"}, {"l-1", "L"}} {
			receiveKeyed(t, s, r[0], r[1])
		}
		receive(t, s, "free-1")
		receive(t, s, "free-2")
		fail := map[string]bool{"k-5": true, "k-7": true}
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", LeaseDuration: 10 * time.Second, HandleFunc: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			if fail[m.ID] {
				return errors.New("downstream timeout")
			}
			return businessHandler(db, "w")(ctx, tx, m)
		}})
		other := newWorker(t, s, inbox.WorkerConfig{Owner: "other", LeaseDuration: 10 * time.Second, HandleFunc: businessHandler(db, "other")})
		process := func(c inbox.Claimed, want inboxkit.Outcome) {
			t.Helper()
			res, err := w.Process(ctx, c)
			if err != nil || res.Outcome != want {
				t.Fatalf("Process(%s) = %+v, %v; want %s", c.Message.ID, res, err, want)
			}
		}

		first := wantClaimed(t, w, "k-9", "l-2", "free-1", "free-2")
		wantClaimed(t, other) // every key's head is leased
		for _, c := range first {
			process(c, inboxkit.OutcomeProcessed)
		}
		second := wantClaimed(t, other, "k-5", "l-1")
		// k-5 fails: its key waits for its next attempt.
		for _, c := range second {
			if c.Message.ID == "k-5" {
				process(c, inboxkit.OutcomeRetry)
			} else if res, err := other.Process(ctx, c); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
				t.Fatalf("Process(%s) = %+v, %v", c.Message.ID, res, err)
			}
		}
		wantClaimed(t, other)
		b.clock.Add(time.Second)
		// Claimed again and abandoned (the worker died): its lease expires
		// and it is its key's head still.
		wantClaimed(t, other, "k-5")
		b.clock.Add(5 * time.Second)
		wantClaimed(t, w)
		b.clock.Add(5 * time.Second)
		again := wantClaimed(t, w, "k-5")
		process(again[0], inboxkit.OutcomeDeadLetter) // its third claim, past MaxAttempts 2
		// A dead-lettered head: the key goes on.
		c := wantClaimed(t, w, "k-7")
		process(c[0], inboxkit.OutcomeRetry)
		b.clock.Add(time.Second)
		c = wantClaimed(t, w, "k-7")
		fail["k-7"] = false
		process(c[0], inboxkit.OutcomeProcessed)
		c = wantClaimed(t, w, "k-1")
		process(c[0], inboxkit.OutcomeProcessed)
		wantClaimed(t, w)

		// A key whose every entry is finished starts again with its next
		// delivery.
		receiveKeyed(t, s, "k-0", "K")
		wantClaimed(t, other, "k-0")
	})
}

// TestWorkerKeyHeadUnderConcurrentClaim: while another claim holds the
// lock on a key's head (its transaction not yet committed), a claim
// skips the head and does not take the key's next entry either.
func TestWorkerKeyHeadUnderConcurrentClaim(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		if db.Backend == dbtest.SQLite {
			t.Skip("SQLite serializes its writers: a claim never runs beside another")
		}
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		receiveKeyed(t, s, "k-1", "K")
		receiveKeyed(t, s, "k-2", "K")
		receiveKeyed(t, s, "l-1", "L")
		w := newWorker(t, s, inbox.WorkerConfig{Owner: "w", HandleFunc: businessHandler(db, "w")})

		opts := &sql.TxOptions{}
		if db.Backend == dbtest.MySQL {
			opts.Isolation = sql.LevelReadCommitted
		}
		tx, err := db.BeginTx(ctx, opts)
		dbtest.Must(t, err, "begin")
		defer func() { _ = tx.Rollback() }()
		q := `SELECT EVENT_ID FROM ` + inbox.DefaultTable + ` WHERE EVENT_ID = 'k-1' FOR UPDATE`
		var id string
		dbtest.Must(t, tx.QueryRowContext(ctx, q).Scan(&id), "lock k-1")
		wantClaimed(t, w, "l-1")
		dbtest.Must(t, tx.Rollback(), "rollback")
		wantClaimed(t, w, "k-1")
	})
}

// orderLog is the handler's log: one row per committed handler
// transaction, numbered by the database in commit order of a key (an
// entry of a key runs only after the previous one committed).
func createOrderLog(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	ddl := map[string]string{
		dbtest.Postgres: `CREATE TABLE order_log (n BIGSERIAL PRIMARY KEY, okey VARCHAR(40) NOT NULL, seq INTEGER NOT NULL, owner VARCHAR(80))`,
		dbtest.MySQL:    `CREATE TABLE order_log (n BIGINT AUTO_INCREMENT PRIMARY KEY, okey VARCHAR(40) NOT NULL, seq INTEGER NOT NULL, owner VARCHAR(80))`,
		dbtest.SQLite:   `CREATE TABLE order_log (n INTEGER PRIMARY KEY AUTOINCREMENT, okey VARCHAR(40) NOT NULL, seq INTEGER NOT NULL, owner VARCHAR(80))`,
	}[db.Backend]
	_, err := db.Exec(ddl)
	dbtest.Must(t, err, "create order_log")
	q := `INSERT INTO order_log (okey, seq, owner) VALUES (?, ?, ?)`
	if db.Backend == dbtest.Postgres {
		q = inbox.Postgres.Rebind(q)
	}
	return q
}

// orderEnv sizes TestWorkerKeyOrder: INBOXKIT_ORDER_CLAIM_EVENTS raises
// the number of events (default 1200).
func orderEnv(t *testing.T) int {
	n := 1200
	if v := os.Getenv("INBOXKIT_ORDER_CLAIM_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("INBOXKIT_ORDER_CLAIM_EVENTS=%q: want a number of events, at least 100", v)
		}
	}
	return n
}

// TestWorkerKeyOrder: events over keys, each key's numbered, received
// while the workers run (a coarse clock: many arrive in one tick); six
// workers on two stores (two pools, as two processes), 1 % of the events
// failing once, one poison head, deserters that claim and vanish (their
// leases expire mid-run). The handler's log shows every key in sequence,
// each event once, no two handlers of a key at once, and the poison key's
// later events only after its head was dead-lettered.
func TestWorkerKeyOrder(t *testing.T) {
	t.Parallel()
	total := orderEnv(t)
	const keys = 40
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		d, err := inbox.DialectByName(db.Backend)
		dbtest.Must(t, err, "dialect")
		// Attempts enough for an event that fails once and is deserted and
		// released by both deserters, with room for a slow machine's
		// lost leases.
		retry := inboxkit.RetryPolicy{MaxAttempts: 20, Redelivery: inboxkit.Backoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1}}
		coarse := clockFunc(func() time.Time { return time.Now().Truncate(10 * time.Millisecond) })
		recv, err := inbox.New(db.DB, d, inbox.Config{Clock: coarse, Retry: retry})
		dbtest.Must(t, err, "store")
		ctx := context.Background()
		dbtest.Must(t, recv.Migrate(ctx), "migrate")
		logInsert := createOrderLog(t, db)
		// A second pool on the same database: another process's store.
		second, err := inbox.New(db.Open(t), d, inbox.Config{Retry: retry})
		dbtest.Must(t, err, "second store")
		first, err := inbox.New(db.DB, d, inbox.Config{Retry: retry})
		dbtest.Must(t, err, "first store")

		key := func(k int) string { return fmt.Sprintf("key-%02d", k) }
		// Event ids sort against arrival: only the arrival order is the order.
		eventID := func(k, seq int) string { return fmt.Sprintf("ev-%s-%04d", key(k), 9999-seq) }
		failsOnce := func(id string) bool { h := fnv.New32a(); h.Write([]byte(id)); return h.Sum32()%100 == 0 }
		poisonID := eventID(7, 3)
		statusQuery := `SELECT STATUS FROM ` + inbox.DefaultTable + ` WHERE EVENT_ID = ?`
		if db.Backend == dbtest.Postgres {
			statusQuery = inbox.Postgres.Rebind(statusQuery)
		}

		var (
			running    [keys]atomic.Int32
			overlaps   atomic.Int32
			poisonRuns atomic.Int32
			early      atomic.Int32 // the poison key's later events run before its head was dead-lettered
			processed  atomic.Int32
			failedOnce sync.Map
		)
		handler := func(owner string) inbox.MessageHandler {
			return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
				var k, seq int
				if _, err := fmt.Sscanf(m.ID, "ev-key-%02d-%04d", &k, &seq); err != nil {
					return fmt.Errorf("event id %q: %w", m.ID, err)
				}
				seq = 9999 - seq
				if running[k].Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running[k].Add(-1)
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				if m.ID == poisonID {
					poisonRuns.Add(1)
					return errors.New("poison: fails on every attempt")
				}
				if k == 7 && seq > 3 {
					var st string
					if err := tx.QueryRowContext(ctx, statusQuery, poisonID).Scan(&st); err != nil {
						return err
					}
					if st != string(inboxkit.StatusDeadLettered) {
						early.Add(1)
					}
				}
				if failsOnce(m.ID) {
					if _, loaded := failedOnce.LoadOrStore(m.ID, true); !loaded {
						return errors.New("downstream timeout (once)")
					}
				}
				_, err := tx.ExecContext(ctx, logInsert, key(k), seq, owner)
				return err
			}
		}

		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 6 {
			s := first
			if i%2 == 1 {
				s = second
			}
			owner := fmt.Sprintf("w%d", i)
			w := newWorker(t, s, inbox.WorkerConfig{Owner: owner, HandleFunc: handler(owner), ClaimSize: 4, BatchSize: 1 + i%3,
				LeaseDuration: 5 * time.Second, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			wg.Go(func() { _ = w.Run(runCtx) })
		}
		// Deserters: claim a few entries now and then and never finish them,
		// as a process killed in the handler; their leases expire mid-run.
		// Each deserts an entry once and releases it when it claims it
		// again (running its handler could outlast the short lease, and
		// another worker would run it beside): a slow machine's workers
		// leave a deserted head to the deserters' next claim, and every
		// desertion is an attempt.
		var deserted atomic.Int32
		for i := range 2 {
			s := []*inbox.Store{first, second}[i]
			w := newWorker(t, s, inbox.WorkerConfig{Owner: fmt.Sprintf("deserter-%d", i), HandleFunc: handler("deserter"), LeaseDuration: 150 * time.Millisecond})
			wg.Go(func() {
				left := map[string]bool{}
				for runCtx.Err() == nil {
					time.Sleep(40 * time.Millisecond)
					cs, err := w.Claim(runCtx, 1+rand.IntN(2))
					if err != nil {
						continue
					}
					for _, c := range cs {
						if left[c.Message.ID] {
							_ = w.Release(runCtx, c)
							continue
						}
						left[c.Message.ID] = true
						deserted.Add(1)
					}
				}
			})
		}

		// Receive: each key's events in sequence, keys interleaved at random,
		// four receivers (each key on one of them, as a consumer's order per key).
		perKey := total / keys
		var recvWG sync.WaitGroup
		for r := range 4 {
			recvWG.Go(func() {
				next := map[int]int{}
				var mine []int
				for k := r; k < keys; k += 4 {
					mine = append(mine, k)
				}
				for len(mine) > 0 {
					i := rand.IntN(len(mine))
					k := mine[i]
					next[k]++
					e := inbox.Entry{EventID: eventID(k, next[k]), ConsumerName: consumerName, OrderKey: key(k)}
					if _, _, err := recv.Receive(ctx, e, nil, []byte(e.EventID)); err != nil {
						t.Errorf("receive %s: %v", e.EventID, err)
						return
					}
					if next[k] == perKey {
						mine = slices.Delete(mine, i, i+1)
					}
				}
			})
		}
		recvWG.Wait()
		waitCounts(t, first, 5*time.Minute, func(c map[inboxkit.Status]int) bool {
			return c[inboxkit.StatusProcessed]+c[inboxkit.StatusDeadLettered] == keys*perKey
		})
		stop()
		wg.Wait()

		rows, err := db.QueryContext(ctx, `SELECT okey, seq FROM order_log ORDER BY n`)
		dbtest.Must(t, err, "read the log")
		defer rows.Close()
		last := map[string]int{}
		seen := map[string]int{}
		inversions := 0
		for rows.Next() {
			var k string
			var seq int
			dbtest.Must(t, rows.Scan(&k, &seq), "scan")
			if seq <= last[k] {
				inversions++
				if inversions <= 5 {
					t.Errorf("key %s: #%d after #%d", k, seq, last[k])
				}
			}
			last[k] = seq
			seen[fmt.Sprintf("%s/%d", k, seq)]++
			processed.Add(1)
		}
		dbtest.Must(t, rows.Err(), "read the log")
		for k := range keys {
			for seq := 1; seq <= perKey; seq++ {
				id := eventID(k, seq)
				n := seen[fmt.Sprintf("%s/%d", key(k), seq)]
				if id == poisonID && n != 0 || id != poisonID && n != 1 {
					r := get(t, first, id)
					t.Errorf("%s logged %d times (%s after %d attempts)", id, n, r.Status, r.Attempts)
				}
			}
		}
		var failed int
		failedOnce.Range(func(any, any) bool { failed++; return true })
		if r := get(t, first, poisonID); r.Status != inboxkit.StatusDeadLettered {
			t.Errorf("poison head %s is %s, want DEAD_LETTERED", poisonID, r.Status)
		}
		if inversions > 0 || overlaps.Load() > 0 || early.Load() > 0 || poisonRuns.Load() == 0 {
			t.Errorf("%d per-key inversions, %d handlers of a key at once, %d events of the poison key before its dead letter, poison run %d times",
				inversions, overlaps.Load(), early.Load(), poisonRuns.Load())
		}
		if deserted.Load() == 0 {
			t.Errorf("no lease expired: the deserters claimed nothing")
		}
		t.Logf("%s: %d events over %d keys, %d logged, %d failed once, %d claims deserted (leases expired): %d inversions",
			db.Backend, keys*perKey, keys, processed.Load(), failed, deserted.Load(), inversions)
	})
}

// clockFunc is an inboxkit.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
