package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/outbox"
)

// TestSeveralRelaysKeepEachKeysCommitOrder races four relays, each on a
// pool of its own (four processes), over 12 keys that four writers fill
// meanwhile. A writer numbers a key's messages in its transaction under a
// row lock of its own (the business's sequence), so a key's numbers are its
// commit order. The destination must see every message of a key once, in
// that order.
func TestSeveralRelaysKeepEachKeysCommitOrder(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, db := setup(t, backend)
			ctx := context.Background()
			if _, err := st.DB().ExecContext(ctx, `CREATE TABLE seqs (k VARCHAR(10) PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			const keys, perWriter, writers = 12, 60, 4
			for k := 0; k < keys; k++ {
				if _, err := st.DB().ExecContext(ctx, st.Dialect().Rebind(`INSERT INTO seqs (k, n) VALUES (?, 0)`), fmt.Sprintf("K%02d", k)); err != nil {
					t.Fatal(err)
				}
			}
			dst := &recorder{fail: func(outbox.Outgoing) error {
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // let the relays interleave
				return nil
			}}
			var relays []*outbox.Relay
			for i := 0; i < 4; i++ {
				d := st.Dialect()
				other, err := outbox.New(db.Open(t), d, outbox.Config{})
				if err != nil {
					t.Fatal(err)
				}
				relays = append(relays, newRelay(t, other, outbox.RelayConfig{SendFunc: dst.send, PerKey: 3, Concurrency: 4}))
			}
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < perWriter; i++ {
						key := fmt.Sprintf("K%02d", rand.IntN(keys))
						err := inTx(ctx, st.DB(), func(tx *sql.Tx) error {
							if _, err := tx.ExecContext(ctx, st.Dialect().Rebind(`UPDATE seqs SET n = n + 1 WHERE k = ?`), key); err != nil {
								return err
							}
							var n int
							if err := tx.QueryRowContext(ctx, st.Dialect().Rebind(`SELECT n FROM seqs WHERE k = ?`), key).Scan(&n); err != nil {
								return err
							}
							_, err := st.Add(ctx, tx, outbox.Message{Destination: "q", Key: key, Body: []byte(fmt.Sprint(n))})
							return err
						})
						if err != nil {
							t.Errorf("writer %d: %v", w, err)
							return
						}
					}
				}(w)
			}
			writing := make(chan struct{})
			go func() { wg.Wait(); close(writing) }()
			runRelays(t, func() bool {
				select {
				case <-writing:
					return countStatus(t, st, outbox.StatusSent) == writers*perWriter
				default:
					return false
				}
			}, relays...)
			seen := map[string]bool{}
			last := map[string]int{}
			for _, m := range dst.sent() {
				if seen[m.ID] {
					// No relay died and no lease ended: a key is held by one
					// claim at a time, so nothing is sent twice.
					t.Errorf("message %s of key %s sent twice", m.Body, m.Key)
					continue
				}
				seen[m.ID] = true
				var n int
				fmt.Sscan(string(m.Body), &n)
				if n != last[m.Key]+1 {
					t.Errorf("key %s: message %d arrived after %d", m.Key, n, last[m.Key])
				}
				last[m.Key] = n
			}
			if len(seen) != writers*perWriter {
				t.Errorf("%d distinct messages arrived, want %d", len(seen), writers*perWriter)
			}
		})
	}
}

// TestTransactionsCommittingOutOfOrderLoseNothing: a transaction that wrote
// first and commits last still has its message sent (a relay reading "ids
// above the last one seen" skips it); and two transactions writing one key
// take turns, so their messages leave in commit order. SQLite is left out:
// it has one writer at a time.
func TestTransactionsCommittingOutOfOrderLoseNothing(t *testing.T) {
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t, backend)
			ctx := context.Background()
			dst := &recorder{}
			relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send})
			sent := func(n int) func() bool { return func() bool { return countStatus(t, st, outbox.StatusSent) == n } }

			early, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer early.Rollback()
			earlyID, err := st.Add(ctx, early, outbox.Message{Destination: "q", Body: []byte("written first")})
			if err != nil {
				t.Fatal(err)
			}
			lateID := add(t, ctx, st, outbox.Message{Destination: "q", Body: []byte("written second, committed first")})[0]
			if lateID <= earlyID {
				t.Fatalf("ids %s, %s: the second id is not the larger one", earlyID, lateID)
			}
			runRelays(t, sent(1), relay)
			if err := early.Commit(); err != nil {
				t.Fatal(err)
			}
			runRelays(t, sent(2), relay)
			if got := dst.sent(); len(got) != 2 || got[0].ID != lateID || got[1].ID != earlyID {
				t.Fatalf("sent %v, want the later id then the earlier one", got)
			}

			// One key: the second transaction waits at Add for the first, whose
			// INSERT holds the key's row until its commit.
			first, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback()
			if _, err := st.Add(ctx, first, outbox.Message{Destination: "q", Key: "K", Body: []byte("1")}); err != nil {
				t.Fatal(err)
			}
			// A statement after the Add: a driver that holds the Add's
			// INSERT for the transaction's next statement (inboxkit-pgx)
			// sends it now, and the key's row is locked from here on.
			if _, err := first.ExecContext(ctx, `SELECT 1`); err != nil {
				t.Fatal(err)
			}
			added := make(chan error, 1)
			go func() {
				added <- inTx(ctx, st.DB(), func(tx *sql.Tx) error {
					_, err := st.Add(ctx, tx, outbox.Message{Destination: "q", Key: "K", Body: []byte("2")})
					return err
				})
			}()
			if _, err := st.Add(ctx, first, outbox.Message{Destination: "q", Key: "K", Body: []byte("1b")}); err != nil {
				t.Fatal(err)
			}
			if err := first.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-added; err != nil {
				t.Fatal(err)
			}
			runRelays(t, sent(5), relay)
			var order []string
			for _, m := range dst.sent()[2:] {
				order = append(order, string(m.Body))
			}
			if strings.Join(order, " ") != "1 1b 2" {
				t.Fatalf("key K sent %v, want the commit order 1 1b 2", order)
			}
		})
	}
}

// TestCrashBetweenConfirmAndMarkSendsAgainWithTheSameID: a relay whose
// destination confirmed a message and that never marked it (it hangs as
// if killed) loses its lease; another relay sends the message again, with
// the same id, before the key's next message.
func TestCrashBetweenConfirmAndMarkSendsAgainWithTheSameID(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t, backend)
			ctx := context.Background()
			ids := add(t, ctx, st, outbox.Message{Destination: "q", Key: "K", Body: []byte("1")}, outbox.Message{Destination: "q", Key: "K", Body: []byte("2")})
			dst := &recorder{}
			hung := make(chan struct{})
			confirmed := make(chan struct{})
			var once sync.Once
			dying := newRelay(t, st, outbox.RelayConfig{Lease: 900 * time.Millisecond, SendTimeout: 100 * time.Millisecond,
				SendFunc: func(ctx context.Context, m outbox.Outgoing) error {
					if err := dst.send(ctx, m); err != nil {
						return err
					}
					once.Do(func() { close(confirmed) })
					<-hung // confirmed, never marked
					return nil
				}})
			dctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = dying.Run(dctx) }()
			<-confirmed
			stop() // the relay is dead: it claims nothing more
			other := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send})
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 2 }, other)
			close(hung)
			<-done
			got := dst.sent()
			if len(got) != 3 || got[0].ID != ids[0] || got[1].ID != ids[0] || got[2].ID != ids[1] {
				t.Fatalf("sent %v: want message 1, message 1 again (same id), message 2", got)
			}
			for _, r := range list(t, st, outbox.ListOptions{Statuses: all}) {
				if r.Status != outbox.StatusSent {
					t.Errorf("row %s is %s after the late relay recorded, want SENT", r.ID, r.Status)
				}
			}
			// The key is settled: a new message goes out.
			add(t, ctx, st, outbox.Message{Destination: "q", Key: "K", Body: []byte("3")})
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 3 }, other)
		})
	}
}

func fastRetry(attempts int) inboxkit.RetryPolicy {
	return inboxkit.RetryPolicy{MaxAttempts: attempts, Redelivery: inboxkit.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}}
}

// TestPoisonParksOnlyItsKey: a message that always fails is tried
// Retry.MaxAttempts times and parked with its last error; with ParkKey its
// key waits behind it, with SkipMessage its key goes on; every other key
// flows meanwhile. Retry sends it (ParkKey: before the key's later
// messages), Drop lets the key go on without it. A message the destination
// refuses for good is parked at its first attempt. A message without a key
// (claimed by its own row) is parked and retried the same way.
func TestPoisonParksOnlyItsKey(t *testing.T) {
	for _, backend := range dbtest.All {
		for _, policy := range []outbox.PoisonPolicy{outbox.ParkKey, outbox.SkipMessage} {
			t.Run(backend+"/"+string(policy), func(t *testing.T) {
				t.Parallel()
				st, _ := setup(t, backend)
				ctx := context.Background()
				var poisoned sync.Map
				dst := &recorder{fail: func(m outbox.Outgoing) error {
					switch string(m.Body) {
					case "refused":
						return classify.Poison("HTTP_400", errors.New("400 Bad Request"))
					}
					if _, ok := poisoned.Load(string(m.Body)); ok {
						return errors.New("destination says no")
					}
					return nil
				}}
				poisoned.Store("K1", true)
				poisoned.Store("X1", true)
				add(t, ctx, st,
					outbox.Message{Destination: "q", Key: "K", Body: []byte("K1")},
					outbox.Message{Destination: "q", Key: "K", Body: []byte("K2")},
					outbox.Message{Destination: "q", Key: "L", Body: []byte("L1")},
					outbox.Message{Destination: "q", Key: "M", Body: []byte("refused")},
					outbox.Message{Destination: "q", Key: "M", Body: []byte("M2")},
					outbox.Message{Destination: "q", Body: []byte("X1")},
				)
				relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, Retry: fastRetry(3), OnPoison: policy})
				wantSent := 1 // L1
				if policy == outbox.SkipMessage {
					wantSent = 3 // and K2, M2
				}
				runRelays(t, func() bool {
					return countStatus(t, st, outbox.StatusParked) == 3 && countStatus(t, st, outbox.StatusSent) == wantSent
				}, relay)
				parked := map[string]outbox.Row{}
				for _, p := range list(t, st, outbox.ListOptions{Statuses: []outbox.Status{outbox.StatusParked}}) {
					parked[string(p.Body)] = p
					switch string(p.Body) {
					case "K1", "X1":
						if p.Attempts != 3 || p.LastError != "destination says no" {
							t.Errorf("%s parked after %d attempts with %q, want 3 and the destination's error", p.Body, p.Attempts, p.LastError)
						}
					case "refused":
						if p.Attempts != 1 || !strings.Contains(p.LastError, "400 Bad Request") {
							t.Errorf("refused message parked after %d attempts with %q, want 1 and the refusal", p.Attempts, p.LastError)
						}
					default:
						t.Errorf("parked %s", p.Body)
					}
				}
				if _, err := st.Retry(ctx, outbox.Selector{Key: "Z"}); !errors.Is(err, outbox.ErrNotParked) {
					t.Errorf("Retry of a key with nothing parked: %v, want ErrNotParked", err)
				}
				poisoned.Delete("K1")
				poisoned.Delete("X1")
				for _, body := range []string{"K1", "X1"} {
					if n, err := st.Retry(ctx, outbox.Selector{MessageID: parked[body].ID}); err != nil || n != 1 {
						t.Fatalf("Retry of %s: %d, %v", body, n, err)
					}
				}
				if n, err := st.Drop(ctx, outbox.Selector{Key: "M"}); err != nil || n != 1 {
					t.Fatalf("Drop: %d, %v", n, err)
				}
				runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 5 }, relay)
				var order []string
				for _, m := range dst.sent() {
					order = append(order, string(m.Body))
				}
				want := "L1 K1 K2 M2"
				if policy == outbox.SkipMessage {
					want = "K2 L1 M2 K1" // K1 after the key's later message
				}
				if got := strings.Join(sortedByKey(order), " "); got != strings.Join(sortedByKey(strings.Fields(want)), " ") {
					t.Errorf("sent %v, want per key %v", order, want)
				}
				if n := countStatus(t, st, outbox.StatusDropped); n != 1 {
					t.Errorf("%d dropped rows, want 1", n)
				}
			})
		}
	}
}

// sortedByKey orders sends by their key's letter, keeping each key's order.
func sortedByKey(bodies []string) []string {
	var out []string
	for _, k := range []string{"K", "L", "M"} {
		for _, b := range bodies {
			if strings.HasPrefix(b, k) {
				out = append(out, b)
			}
		}
	}
	return out
}

// TestReadyNamesADestinationThatFails: readiness names a destination the
// relay cannot send to, and is ready again after the next confirm there; a
// message refused for good does not count (the destination answered).
func TestReadyNamesADestinationThatFails(t *testing.T) {
	st, _ := setup(t, dbtest.SQLite)
	ctx := context.Background()
	var down sync.Map
	down.Store("letters", true)
	dst := &recorder{fail: func(m outbox.Outgoing) error {
		if string(m.Body) == "refused" {
			return classify.Poison("HTTP_400", errors.New("400 Bad Request"))
		}
		if _, ok := down.Load(m.Destination); ok {
			return errors.New("dial tcp: connection refused")
		}
		return nil
	}}
	add(t, ctx, st, outbox.Message{Destination: "letters", Body: []byte("1")}, outbox.Message{Destination: "mails", Body: []byte("refused")})
	relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, Retry: fastRetry(1000)})
	var err error
	runRelays(t, func() bool {
		err = relay.Ready(ctx)
		return err != nil && countStatus(t, st, outbox.StatusParked) == 1
	}, relay)
	if msg := err.Error(); !strings.Contains(msg, "cannot send to letters since") || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "mails") {
		t.Fatalf("Ready = %q: want letters named with its error, mails not", msg)
	}
	down.Delete("letters")
	runRelays(t, func() bool { err = relay.Ready(ctx); return err == nil && countStatus(t, st, outbox.StatusSent) == 1 }, relay)
}

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestDrainSendsWhatIsDueAndSaysWhenMoreIs: Drain sends every due message
// in key order in the calling goroutine and returns; a failed send is
// tried again only once its backoff ended (NextDue), and parked after its
// attempts; nothing pending leaves NextDue zero.
func TestDrainSendsWhatIsDueAndSaysWhenMoreIs(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			clock := &stepClock{now: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
			st, _ := setup(t, backend, outbox.Config{Clock: clock})
			ctx := context.Background()
			add(t, ctx, st,
				outbox.Message{Destination: "q", Key: "B", Body: []byte("b1")},
				outbox.Message{Destination: "q", Key: "A", Body: []byte("a1")},
				outbox.Message{Destination: "q", Key: "B", Body: []byte("b2")},
				outbox.Message{Destination: "q", Key: "C", Body: []byte("bad")})
			dst := &recorder{fail: func(m outbox.Outgoing) error {
				if string(m.Body) == "bad" {
					return errors.New("destination down")
				}
				return nil
			}}
			relay := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, Retry: inboxkit.RetryPolicy{
				MaxAttempts: 2, Redelivery: inboxkit.Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1}}})
			d, err := relay.Drain(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var bodies []string
			for _, m := range dst.sent() {
				bodies = append(bodies, string(m.Body))
			}
			if strings.Join(bodies, " ") != "a1 b1 b2" {
				t.Errorf("sent %v, want a1 b1 b2 (key order, then sequence)", bodies)
			}
			if want := clock.Now().Add(time.Second); d.Sent != 3 || d.Failed != 1 || d.Parked != 0 || !d.NextDue.Equal(want) {
				t.Errorf("Drain = %+v, want 3 sent, 1 failed, next due at %s", d, want)
			}
			if d, err := relay.Drain(ctx); err != nil || d.Sent+d.Failed+d.Parked != 0 {
				t.Errorf("Drain before the backoff ended = %+v, %v; want nothing done", d, err)
			}
			clock.set(d.NextDue)
			d, err = relay.Drain(ctx)
			if err != nil || d.Parked != 1 || !d.NextDue.IsZero() {
				t.Errorf("Drain after the backoff = %+v, %v; want 1 parked and nothing due", d, err)
			}
			if n := countStatus(t, st, outbox.StatusParked); n != 1 {
				t.Errorf("%d parked rows, want 1", n)
			}
		})
	}
}

// TestSeveralRelaysSendKeylessMessagesOnce: keyless messages, several to a
// relay's slot (outbox.KeylessPerSlot) and more than one claim holds,
// beside keyed ones, with three relays: each message is sent once (no relay
// died, no lease ended), marked SENT after one attempt with its send time,
// and settled: no row is left due or leased.
func TestSeveralRelaysSendKeylessMessagesOnce(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, db := setup(t, backend)
			ctx := context.Background()
			const keyless, keyed = 150, 30
			var ms []outbox.Message
			for i := 0; i < keyless; i++ {
				ms = append(ms, outbox.Message{Destination: "q", Body: []byte(fmt.Sprint("keyless ", i))})
				if i < keyed {
					ms = append(ms, outbox.Message{Destination: "q", Key: fmt.Sprintf("K%d", i%3), Body: []byte(fmt.Sprint(i))})
				}
			}
			add(t, ctx, st, ms...)
			dst := &recorder{}
			var relays []*outbox.Relay
			for i := 0; i < 3; i++ {
				other, err := outbox.New(db.Open(t), st.Dialect(), outbox.Config{})
				if err != nil {
					t.Fatal(err)
				}
				relays = append(relays, newRelay(t, other, outbox.RelayConfig{SendFunc: dst.send, Concurrency: 3, PerKey: 2}))
			}
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == keyless+keyed }, relays...)
			seen := map[string]bool{}
			for _, m := range dst.sent() {
				if seen[m.ID] {
					t.Errorf("message %s (%s) sent twice", m.ID, m.Body)
				}
				seen[m.ID] = true
			}
			if len(seen) != keyless+keyed {
				t.Errorf("%d distinct messages sent, want %d", len(seen), keyless+keyed)
			}
			for _, row := range list(t, st, outbox.ListOptions{Statuses: all}) {
				if row.Status != outbox.StatusSent || row.Attempts != 1 || row.SentAt == nil {
					t.Errorf("row %+v: want SENT after 1 attempt, with a send time", row)
				}
			}
			var due int
			if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+st.Table()+` WHERE NEXT_AT IS NOT NULL OR LEASE_OWNER IS NOT NULL`).Scan(&due); err != nil {
				t.Fatal(err)
			}
			if due != 0 {
				t.Errorf("%d sent keyless rows still due or leased, want 0", due)
			}
		})
	}
}
