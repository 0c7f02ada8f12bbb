package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// A delivery handed back because the database was unreachable is no
// attempt (issue 11, item 1): neither one that never reached the handler,
// nor one whose handler ran but whose outcome could not be recorded (the
// connection was cut inside the handler). Many such deliveries, flagged
// redelivered with a growing broker count, then one that goes through:
// PROCESSED with ATTEMPTS 1.
func TestOutageIsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db, s, b, proxy := setupViaProxy(t, backend, inbox.Config{Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
			ctx := context.Background()
			e := entry("OUT-1")
			// The connection dies inside the handler: the outcome cannot be recorded.
			cut := func(ctx context.Context, tx *sql.Tx) error {
				if err := insertBusiness(db, "OUT-1", "x")(ctx, tx); err != nil {
					return err
				}
				proxy.Cut()
				return nil
			}
			if _, err := s.Process(ctx, e, cut); err == nil {
				t.Fatal("Process succeeded although the connection was cut before the commit")
			}
			for i := 2; i <= 10; i++ { // redeliveries while the database stays unreachable
				e.Redelivered, e.DeliveryCount = true, i
				if _, err := s.Process(ctx, e, insertBusiness(db, "OUT-1", "x")); err == nil {
					t.Fatalf("delivery %d: Process succeeded while the database is unreachable", i)
				}
			}
			proxy.Restore()
			e.DeliveryCount = 11
			res, err := s.Process(ctx, e, insertBusiness(db, "OUT-1", "x"))
			dbtest.Must(t, err, "after the repair")
			r := get(t, s, "OUT-1")
			if res.Outcome != inboxkit.OutcomeProcessed || res.Attempts != 1 || r.Attempts != 1 {
				t.Errorf("after the outage: %+v, row ATTEMPTS %d; want PROCESSED at attempt 1", res, r.Attempts)
			}
			if n := b.businessRows(t, "OUT-1"); n != 1 {
				t.Errorf("business rows %d, want 1", n)
			}
		})
	}
}

// setupViaProxy is setup on a new database of backend, with the store's
// connections through a proxy the test can cut.
func setupViaProxy(t *testing.T, backend string, cfg inbox.Config) (*dbtest.DB, *inbox.Store, *bundle, *tcpproxy.Proxy) {
	t.Helper()
	db := dbtest.New(t, backend)
	_, b := setup(t, db, cfg)
	proxy := tcpproxy.Start(t, db.Addr())
	d, _ := inbox.DialectByName(backend)
	s, err := inbox.New(db.OpenVia(t, proxy.Addr()), d, cfg)
	dbtest.Must(t, err, "store via proxy")
	return db, s, b, proxy
}

// A worker's claim and release end within LeaseDuration even when the
// database stops answering on an open connection (a partition: the bytes
// are lost, the connection stays open) and the caller's context has no
// deadline: before, they waited for ever, and the worker with them, after
// the partition too.
func TestClaimEndsWithinTheLease(t *testing.T) {
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			_, s, _, proxy := setupViaProxy(t, backend, inbox.Config{})
			const lease = 2 * time.Second
			w := newWorker(t, s, inbox.WorkerConfig{LeaseDuration: lease, HandleFunc: func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }})
			receive(t, s, "claim-1")
			claimed, err := w.Claim(context.Background(), 1)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("claim before the partition: %d claimed, %v", len(claimed), err)
			}
			proxy.Hang()
			defer proxy.Restore()
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"claim", func() error { _, err := w.Claim(context.Background(), 1); return err }},
				{"release", func() error { return w.Release(context.Background(), claimed[0]) }},
			} {
				done := make(chan error, 1)
				began := time.Now()
				go func() { done <- call.fn() }()
				select {
				case err := <-done:
					if err == nil {
						t.Fatalf("a %s during the partition succeeded", call.name)
					}
					if took := time.Since(began); took > lease+5*time.Second {
						t.Errorf("the %s ended %v after it began, lease %v", call.name, took, lease)
					}
					t.Logf("%s during the partition: %v after %v", call.name, err, time.Since(began).Round(time.Millisecond))
				case <-time.After(lease + 20*time.Second):
					t.Fatalf("the %s still waits %v after it began (lease %v)", call.name, lease+20*time.Second, lease)
				}
			}
		})
	}
}
