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
// workers drain them (claim batches of 10; one transaction per entry with
// one business row). The entries/s metric is the figure to compare.
//
//	go test -run '^$' -bench Worker -benchtime 4000x ./inbox/
func BenchmarkWorker(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("postgres/workers=%d", workers), func(b *testing.B) {
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
				ws[i], err = s.NewWorker(inbox.WorkerConfig{ConsumerName: "bench", HandleFunc: businessHandler(db, "bench"),
					DeadLetterFunc: func(context.Context, inbox.Claimed, inboxkit.Class, string, error) error { return nil }})
				dbtest.Must(b, err, "worker")
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Go(func() {
					for done.Load() < int64(b.N) {
						batch, err := w.Claim(ctx, 0)
						if err != nil {
							b.Error(err)
							return
						}
						for _, c := range batch {
							if res, err := w.Process(ctx, c); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
								b.Errorf("%+v %v", res, err)
								return
							}
							done.Add(1)
						}
						if len(batch) == 0 {
							return // the others hold the rest
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if done.Load() != int64(b.N) {
				b.Fatalf("processed %d of %d", done.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
