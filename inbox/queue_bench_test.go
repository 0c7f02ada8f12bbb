package inbox_test

import (
	"context"
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
// (WorkerConfig.BatchSize 16). The entries/s metric is the figure to
// compare.
//
//	go test -run '^$' -bench Worker -benchtime 4000x ./inbox/
func BenchmarkWorker(b *testing.B) {
	for _, run := range []struct{ workers, batch int }{{1, 1}, {4, 1}, {1, 16}, {4, 16}} {
		workers := run.workers
		b.Run(fmt.Sprintf("postgres/workers=%d/batch=%d", workers, run.batch), func(b *testing.B) {
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
				ws[i], err = ports.NewWorker(inbox.WorkerConfig{ConsumerName: "bench", HandleFunc: businessHandler(db, "bench"), ClaimSize: 16, BatchSize: run.batch})
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
