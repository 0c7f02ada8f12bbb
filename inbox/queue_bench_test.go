package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkWorker measures store-then-process worker throughput on
// PostgreSQL: b.N entries are stored with Receive (not timed), then 1 or 4
// workers drain them with RunOnce (claims of 16; one business row per
// entry), one transaction per entry (batch=1) or per 16 entries
// (WorkerConfig.BatchSize 16), the batches with savepoints or, declared
// EffectsInTx, without. The entries/s metric is the figure to compare.
//
//	go test -run '^$' -bench Worker -benchtime 4000x ./inbox/
func BenchmarkWorker(b *testing.B) {
	for _, run := range []struct {
		workers, batch int
		effectsInTx    bool
	}{{1, 1, false}, {4, 1, false}, {1, 16, false}, {4, 16, false}, {1, 16, true}, {4, 16, true}} {
		workers := run.workers
		name := fmt.Sprintf("postgres/workers=%d/batch=%d", workers, run.batch)
		if run.effectsInTx {
			name += "/effects-in-tx"
		}
		b.Run(name, func(b *testing.B) {
			db := dbtest.New(b, dbtest.Postgres)
			s, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{})
			dbtest.Must(b, err, "store")
			ctx := context.Background()
			dbtest.Must(b, s.Migrate(ctx), "migrate")
			_, err = db.Exec(`CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
			dbtest.Must(b, err, "business table")
			for i := range b.N {
				id := fmt.Sprintf("B-%07d", i)
				if _, _, err := s.Receive(ctx, inbox.Entry{EventID: id, ConsumerName: "bench"}, map[string]string{"id": id}, []byte(id)); err != nil {
					b.Fatal(err)
				}
			}
			var done atomic.Int64
			ws := make([]*inbox.Worker, workers)
			for i := range ws {
				ports, perr := s.WithPorts((&deadLetters{}).ports())
				dbtest.Must(b, perr, "ports")
				ws[i], err = ports.NewWorker(inbox.WorkerConfig{ConsumerName: "bench", HandleFunc: businessHandler(db, "bench"), ClaimSize: 16, BatchSize: run.batch, EffectsInTx: run.effectsInTx})
				dbtest.Must(b, err, "worker")
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Go(func() {
					for done.Load() < int64(b.N) {
						n, err := w.RunOnce(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if n == 0 {
							return // the others hold the rest
						}
						done.Add(int64(n))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if counts, err := s.CountByStatus(ctx); err != nil || counts[inboxkit.StatusProcessed] != b.N {
				b.Fatalf("processed %v of %d (%v)", counts, b.N, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkClaim measures one worker's claim of 16 entries (Claim; the
// entries are released untimed, so the backlog stays) with a backlog of
// 5,000 stored entries: without order keys, and with the entries spread
// over 100 keys (only the oldest open entry of a key is claimable: the
// claim ranks the open keyed entries). The claims/s metric is the figure
// to compare.
//
//	go test -run '^$' -bench Claim -benchtime 300x ./inbox/
func BenchmarkClaim(b *testing.B) {
	const backlog = 5000
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL, dbtest.SQLite} {
		for _, keys := range []int{0, 100} {
			b.Run(fmt.Sprintf("%s/keys=%d", backend, keys), func(b *testing.B) {
				s, ctx := benchBacklog(b, backend, backlog, keys)
				ports, err := s.WithPorts((&deadLetters{}).ports())
				dbtest.Must(b, err, "ports")
				w, err := ports.NewWorker(inbox.WorkerConfig{ConsumerName: "bench", HandleFunc: func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }})
				dbtest.Must(b, err, "worker")
				b.ResetTimer()
				for range b.N {
					cs, err := w.Claim(ctx, 16)
					if err != nil || len(cs) != 16 {
						b.Fatalf("claimed %d (%v), want 16", len(cs), err)
					}
					b.StopTimer()
					for _, c := range cs {
						dbtest.Must(b, w.Release(ctx, c), "release")
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			})
		}
	}
}

// BenchmarkReceiveKeyed measures Receive with a backlog of 5,000 open
// entries: without an order key, and with one of 100 keys (the receive
// reads the newest open entry of its key first).
//
//	go test -run '^$' -bench ReceiveKeyed -benchtime 500x ./inbox/
func BenchmarkReceiveKeyed(b *testing.B) {
	const backlog = 5000
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL, dbtest.SQLite} {
		for _, keys := range []int{0, 100} {
			b.Run(fmt.Sprintf("%s/keys=%d", backend, keys), func(b *testing.B) {
				s, ctx := benchBacklog(b, backend, backlog, keys)
				b.ResetTimer()
				for i := range b.N {
					e := inbox.Entry{EventID: fmt.Sprintf("N-%07d", i), ConsumerName: "bench"}
					if keys > 0 {
						e.OrderKey = fmt.Sprintf("key-%03d", i%keys)
					}
					if _, _, err := s.Receive(ctx, e, map[string]string{"id": e.EventID}, []byte(e.EventID)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receives/s")
			})
		}
	}
}

// BenchmarkReceiveResend measures Receive of a producer's resend: an event
// whose row is PROCESSED already, among 5,000.
//
//	go test -run '^$' -bench ReceiveResend -benchtime 2000x ./inbox/
func BenchmarkReceiveResend(b *testing.B) {
	const backlog = 5000
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL, dbtest.SQLite} {
		b.Run(backend, func(b *testing.B) {
			s, ctx := benchBacklog(b, backend, backlog, 0)
			_, err := s.DB().ExecContext(ctx, `UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'PROCESSED', PROCESSED_AT = CURRENT_TIMESTAMP`)
			dbtest.Must(b, err, "process the backlog")
			b.ResetTimer()
			for i := range b.N {
				e := inbox.Entry{EventID: fmt.Sprintf("B-%07d", i%backlog), ConsumerName: "bench"}
				inserted, st, err := s.Receive(ctx, e, map[string]string{"id": e.EventID}, []byte(e.EventID))
				if err != nil || inserted || st != inboxkit.StatusProcessed {
					b.Fatalf("resend of %s: %v %s %v", e.EventID, inserted, st, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receives/s")
		})
	}
}

// benchBacklog is a store on a fresh database of backend holding n stored
// entries of consumer "bench", spread over keys order keys (0: none).
func benchBacklog(b *testing.B, backend string, n, keys int) (*inbox.Store, context.Context) {
	db := dbtest.New(b, backend)
	d, err := inbox.DialectByName(backend)
	dbtest.Must(b, err, "dialect")
	s, err := inbox.New(db.DB, d, inbox.Config{})
	dbtest.Must(b, err, "store")
	ctx := context.Background()
	dbtest.Must(b, s.Migrate(ctx), "migrate")
	for i := range n {
		e := inbox.Entry{EventID: fmt.Sprintf("B-%07d", i), ConsumerName: "bench"}
		if keys > 0 {
			e.OrderKey = fmt.Sprintf("key-%03d", i%keys)
		}
		if _, _, err := s.Receive(ctx, e, map[string]string{"id": e.EventID}, []byte(e.EventID)); err != nil {
			b.Fatal(err)
		}
	}
	return s, ctx
}
