package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/driver/postgres"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/outbox"
)

// setup returns an outbox on a fresh database of backend, migrated.
func setup(t *testing.T, backend string, cfg ...outbox.Config) (*outbox.Store, *dbtest.DB) {
	t.Helper()
	db := dbtest.New(t, backend)
	d, err := inbox.DialectByName(backend)
	if err != nil {
		t.Fatal(err)
	}
	var c outbox.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	st, err := outbox.New(db.DB, d, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st, db
}

// add writes ms in one committed transaction and returns their ids.
func add(t testing.TB, ctx context.Context, st *outbox.Store, ms ...outbox.Message) []string {
	t.Helper()
	var ids []string
	err := inTx(ctx, st.DB(), func(tx *sql.Tx) error {
		ids = ids[:0]
		for _, m := range ms {
			id, err := st.Add(ctx, tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	return ids
}

// inTx runs fn in a transaction and commits, trying again on a deadlock
// (two writers adding messages of the same keys in another order).
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	for try := 0; ; try++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err = fn(tx); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err == nil || try == 20 || !strings.Contains(strings.ToLower(err.Error()), "deadlock") {
			return err
		}
	}
}

func list(t testing.TB, st *outbox.Store, opt outbox.ListOptions) []outbox.Row {
	t.Helper()
	if opt.Limit == 0 {
		opt.Limit = 100000
	}
	rows, err := st.List(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

var all = []outbox.Status{outbox.StatusPending, outbox.StatusSent, outbox.StatusParked, outbox.StatusDropped}

func TestAddCommitsWithTheTransaction(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t, backend)
			ctx := context.Background()

			// A rollback leaves no row, and takes the key's number back.
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Add(ctx, tx, outbox.Message{Destination: "letters", Key: "K", Body: []byte("rolled back")}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if rows := list(t, st, outbox.ListOptions{Statuses: all}); len(rows) != 0 {
				t.Fatalf("after a rollback: %d rows, want none", len(rows))
			}

			// Inside a handler the ids of the message handled are recorded.
			hctx := inboxkit.ContextWithMessage(ctx, inboxkit.Message{ID: "evt-1", CorrelationID: "order-7"})
			ids := add(t, hctx, st,
				outbox.Message{Destination: "letters", Key: "K", Headers: map[string]string{"type": "LetterRequested"}, Body: []byte("one")},
				outbox.Message{Destination: "letters", Key: "K", Body: []byte("two")},
				outbox.Message{Destination: "https://letters.example/v1/letters", Body: []byte("three"), CorrelationID: "own-corr"},
				outbox.Message{ID: "letter-42", Destination: "letters", Body: []byte("four")},
			)
			if ids[3] != "letter-42" || ids[0] == ids[1] || len(ids[0]) != 36 {
				t.Fatalf("ids %q: want three new UUIDs and letter-42", ids)
			}
			rows := list(t, st, outbox.ListOptions{})
			if len(rows) != 4 {
				t.Fatalf("%d rows, want 4", len(rows))
			}
			byID := map[string]outbox.Row{}
			for _, r := range rows {
				byID[r.ID] = r
				if r.Status != outbox.StatusPending || r.CauseEventID != "evt-1" || r.Attempts != 0 || r.CreatedAt.IsZero() {
					t.Errorf("row %+v: want PENDING, caused by evt-1, 0 attempts, a creation time", r)
				}
			}
			// The rolled-back message's number was taken back: no gap.
			if a, b := byID[ids[0]], byID[ids[1]]; a.Seq != 1 || b.Seq != 2 || a.Key != "K" || string(a.Body) != "one" || a.Headers["type"] != "LetterRequested" || a.CorrelationID != "order-7" {
				t.Errorf("key K: %+v, %+v: want seq 1 and 2, the body, headers and correlation id kept", a, b)
			}
			// Without a key: no key row, SEQ 0 (claimed by its own row).
			if r := byID[ids[2]]; r.Key != "" || r.CorrelationID != "own-corr" || r.Seq != 0 {
				t.Errorf("keyless message: %+v: want no key, seq 0 and its own correlation id", r)
			}
			var keyRows int
			if err := st.DB().QueryRowContext(ctx, st.Dialect().Rebind(`SELECT COUNT(*) FROM `+st.KeyTable()+` WHERE MSG_KEY = ?`), ids[2]).Scan(&keyRows); err != nil || keyRows != 0 {
				t.Errorf("keyless message: %d key rows (%v), want none", keyRows, err)
			}
		})
	}
}

func TestAddRefusesWhatCannotBeSent(t *testing.T) {
	st, _ := setup(t, dbtest.SQLite)
	ctx := context.Background()
	long := strings.Repeat("x", 501)
	for _, tc := range []struct {
		m    outbox.Message
		want string
	}{
		{outbox.Message{}, "Destination is empty"},
		{outbox.Message{Destination: long}, "Destination has 501 bytes"},
		{outbox.Message{Destination: "q", Key: long[:201]}, "Key has 201 bytes"},
		{outbox.Message{Destination: "q", ID: long[:121]}, "ID has 121 bytes"},
		{outbox.Message{Destination: "q", Headers: map[string]string{"eventId": "mine"}}, `header "eventId" is set by the relay`},
		{outbox.Message{Destination: "q", Headers: map[string]string{"jmsxgroupid": "g"}}, `header "jmsxgroupid" is set by the relay`},
		{outbox.Message{Destination: "http://h/x", Headers: map[string]string{"bad name": "v"}}, `header "bad name" cannot be sent to an HTTP destination`},
		{outbox.Message{Destination: "http:///nohost"}, "is not a valid URL"},
	} {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Add(ctx, tx, tc.m)
		_ = tx.Rollback()
		if !errors.Is(err, outbox.ErrInvalidMessage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%+v) = %v, want ErrInvalidMessage saying %q", tc.m, err, tc.want)
		}
	}
}

// recorder is a destination that records what reaches it.
type recorder struct {
	mu   sync.Mutex
	got  []outbox.Outgoing
	fail func(outbox.Outgoing) error
}

func (r *recorder) send(_ context.Context, m outbox.Outgoing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(m); err != nil {
			return err
		}
	}
	r.got = append(r.got, m)
	return nil
}

func (r *recorder) sent() []outbox.Outgoing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Outgoing(nil), r.got...)
}

// runRelays runs relays until cond holds (or fails the test after a
// minute), then stops them.
func runRelays(t *testing.T, cond func() bool, relays ...*outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay: %v", err)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatal("the relays did not get there within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
}

func newRelay(t testing.TB, st *outbox.Store, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r, err := outbox.NewRelay(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func countStatus(t testing.TB, st *outbox.Store, s outbox.Status) int {
	return len(list(t, st, outbox.ListOptions{Statuses: []outbox.Status{s}}))
}

func TestRelaySendsEachMessageOnceInKeyOrder(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t, backend)
			ctx := inboxkit.ContextWithMessage(context.Background(), inboxkit.Message{ID: "evt-9", CorrelationID: "c-9"})
			var ms []outbox.Message
			for i := 0; i < 30; i++ {
				ms = append(ms, outbox.Message{Destination: "q", Key: fmt.Sprintf("K%d", i%3), Body: []byte(fmt.Sprint(i))})
			}
			ms = append(ms, outbox.Message{Destination: "q", Body: []byte("keyless")})
			add(t, ctx, st, ms...)
			dst := &recorder{}
			r := newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, PerKey: 4})
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 31 }, r)
			got := dst.sent()
			if len(got) != 31 {
				t.Fatalf("%d sends, want 31 (one per message)", len(got))
			}
			last := map[string]int{}
			for _, m := range got {
				var n int
				if m.Key == "" {
					if string(m.Body) != "keyless" || m.Attempt != 1 {
						t.Errorf("keyless message: %+v", m)
					}
					continue
				}
				fmt.Sscan(string(m.Body), &n)
				if prev, ok := last[m.Key]; ok && n <= prev {
					t.Errorf("key %s: message %d sent after %d", m.Key, n, prev)
				}
				last[m.Key] = n
				h := m.BrokerHeaders()
				if h["eventId"] != m.ID || h["causationId"] != "evt-9" || h["correlationId"] != "c-9" || h["JMSXGroupID"] != m.Key || h["orderKey"] != m.Key {
					t.Errorf("broker headers %v of %s", h, m.ID)
				}
			}
			for _, row := range list(t, st, outbox.ListOptions{Statuses: all}) {
				if row.Status != outbox.StatusSent || row.Attempts != 1 || row.SentAt == nil {
					t.Errorf("row %+v: want SENT after 1 attempt, with a send time", row)
				}
			}
		})
	}
}

// TestPurgeDeletesOnlySettledRows: SENT and DROPPED rows older than the
// window go, with the keys left with nothing; PENDING and PARKED rows stay.
func TestPurgeDeletesOnlySettledRows(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, db := setup(t, backend)
			ctx := context.Background()
			add(t, ctx, st, outbox.Message{Destination: "q", Body: []byte("a")}, outbox.Message{Destination: "q", Key: "K", Body: []byte("b")},
				outbox.Message{Destination: "q", Key: "K", Body: []byte("c")}, outbox.Message{Destination: "q", Key: "L", Body: []byte("poison")})
			dst := &recorder{fail: func(m outbox.Outgoing) error {
				if string(m.Body) == "poison" {
					return errors.New("no")
				}
				return nil
			}}
			runRelays(t, func() bool {
				return countStatus(t, st, outbox.StatusSent) == 3 && countStatus(t, st, outbox.StatusParked) == 1
			},
				newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send, Retry: fastRetry(1)}))
			add(t, ctx, st, outbox.Message{Destination: "q", Key: "K", Body: []byte("pending")})
			time.Sleep(10 * time.Millisecond) // the rows are older than the window below
			if n, err := st.Purge(ctx, outbox.PurgeOptions{OlderThan: time.Millisecond, DryRun: true}); err != nil || n != 3 {
				t.Fatalf("dry run: %d, %v; want 3", n, err)
			}
			if n, err := st.Purge(ctx, outbox.PurgeOptions{OlderThan: time.Millisecond, BatchSize: 2}); err != nil || n != 3 {
				t.Fatalf("purge: %d, %v; want 3", n, err)
			}
			left := list(t, st, outbox.ListOptions{Statuses: all})
			if len(left) != 2 {
				t.Fatalf("left %v, want the pending and the parked row", left)
			}
			var keys int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+st.KeyTable()).Scan(&keys); err != nil || keys != 2 {
				t.Fatalf("%d key rows (%v), want 2 (K and L: the keyless message's key is gone)", keys, err)
			}
		})
	}
}

// TestAddHeldUntilTheCommit: through inboxkit's PostgreSQL driver (dbtest's)
// an Add's INSERT goes with the commit, so a message id written before
// fails there: Add returns nil, the delivery's commit fails, named, and
// nothing of its transaction is written. Through pgx's plain driver the
// same Add fails at once.
func TestAddHeldUntilTheCommit(t *testing.T) {
	t.Parallel()
	st, db := setup(t, dbtest.Postgres)
	ctx := context.Background()
	if db.Driver != postgres.DriverName {
		t.Fatalf("dbtest opened PostgreSQL through %q, want %q", db.Driver, postgres.DriverName)
	}
	in, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (event_id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var addErr error
	process := func(in *inbox.Store, ob *outbox.Store, event string) inbox.Result {
		t.Helper()
		res, err := in.Process(ctx, inbox.Entry{EventID: event, ConsumerName: "c", FirstDelivery: true}, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES ($1)`, event); err != nil {
				return err
			}
			_, addErr = ob.Add(ctx, tx, outbox.Message{ID: "letter-1", Destination: "letters", Body: []byte(event)})
			return addErr
		})
		if err != nil {
			t.Fatalf("process %s: %v", event, err)
		}
		return res
	}
	if res := process(in, st, "e1"); res.Outcome != inboxkit.OutcomeProcessed || addErr != nil {
		t.Fatalf("e1: %+v, Add: %v; want processed", res, addErr)
	}
	res := process(in, st, "e2")
	if addErr != nil {
		t.Errorf("Add of a message id written before returned %v in the handler: not held for the commit", addErr)
	}
	if res.Outcome != inboxkit.OutcomeRetry || res.Err == nil || !strings.Contains(res.Err.Error(), "outbox: add message letter-1 to letters") {
		t.Errorf("e2: outcome %s, error %v; want a retry whose error names the held Add", res.Outcome, res.Err)
	}
	var effects, rows int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM effects), (SELECT count(*) FROM `+outbox.DefaultTable+`)`).Scan(&effects, &rows); err != nil || effects != 1 || rows != 1 {
		t.Errorf("%d effects and %d outbox rows (%v), want e1's only", effects, rows, err)
	}

	// pgx's plain driver sends the INSERT at once: Add itself fails.
	plain, err := sql.Open("pgx", db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pin, err := inbox.New(plain, inbox.Postgres, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pob, err := outbox.New(plain, inbox.Postgres, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	process(pin, pob, "e3")
	if addErr == nil || !strings.Contains(addErr.Error(), "outbox: add message letter-1 to letters") {
		t.Errorf("Add through pgx's plain driver of a message id written before: %v, want its error at once", addErr)
	}
}
