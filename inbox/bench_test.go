package inbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// benchStore is a migrated store with the business table, per backend.
func benchStore(b *testing.B, backend string) (*dbtest.DB, *inbox.Store) {
	db := dbtest.New(b, backend)
	d, _ := inbox.DialectByName(backend)
	s, err := inbox.New(db.DB, d, inbox.Config{})
	dbtest.Must(b, err, "store")
	dbtest.Must(b, s.Migrate(context.Background()), "migrate")
	_, err = db.Exec(`CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
	dbtest.Must(b, err, "business table")
	return db, s
}

// reportMessages adds msg/s, so that Process and ProcessBatch compare.
func reportMessages(b *testing.B, n int) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkProcess measures one processed message (inbox row + one business
// row in one transaction) per dialect, and a duplicate delivery: one no
// broker vouched for (the marked path) and a producer's resend, a first
// delivery.
//
//	go test -run '^$' -bench Process -benchtime 2000x ./inbox/
func BenchmarkProcess(b *testing.B) {
	for _, backend := range dbtest.All {
		db, s := benchStore(b, backend)
		b.Run(backend+"/processed", func(b *testing.B) {
			i := 0
			for ; b.Loop(); i++ {
				id := "B-" + strconv.Itoa(i)
				res, err := s.Process(context.Background(), inbox.Entry{EventID: id, ConsumerName: "bench"}, insertBusiness(db, id, "x"))
				if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
					b.Fatalf("%v %+v", err, res)
				}
			}
			reportMessages(b, i)
		})
		b.Run(backend+"/duplicate", func(b *testing.B) {
			i := 0
			for ; b.Loop(); i++ {
				res, err := s.Process(context.Background(), inbox.Entry{EventID: "B-0", ConsumerName: "bench"}, insertBusiness(db, "B-0", "x"))
				if err != nil || res.Outcome != inboxkit.OutcomeDuplicate {
					b.Fatalf("%v %+v", err, res)
				}
			}
			reportMessages(b, i)
		})
		b.Run(backend+"/duplicate-first", func(b *testing.B) {
			i := 0
			for ; b.Loop(); i++ {
				res, err := s.Process(context.Background(), inbox.Entry{EventID: "B-0", ConsumerName: "bench", FirstDelivery: true}, insertBusiness(db, "B-0", "x"))
				if err != nil || res.Outcome != inboxkit.OutcomeDuplicate {
					b.Fatalf("%v %+v", err, res)
				}
			}
			reportMessages(b, i)
		})
	}
}

// BenchmarkProcessBatch measures batches of 16 new messages (the same work
// per message as BenchmarkProcess/processed) per dialect; one op is one
// batch, msg/s compares with BenchmarkProcess.
//
//	go test -run '^$' -bench 'Process(Batch)?$' -benchtime 3s ./inbox/
func BenchmarkProcessBatch(b *testing.B) {
	const size = 16
	for _, backend := range dbtest.All {
		db, s := benchStore(b, backend)
		b.Run(backend+"/batch16", func(b *testing.B) {
			n := 0
			items := make([]inbox.BatchItem, size)
			for b.Loop() {
				for k := range items {
					id := "B-" + strconv.Itoa(n)
					n++
					items[k] = inbox.BatchItem{Entry: inbox.Entry{EventID: id, ConsumerName: "bench"}, Handler: insertBusiness(db, id, "x")}
				}
				res, err := s.ProcessBatch(context.Background(), items)
				if err != nil || res[size-1].Outcome != inboxkit.OutcomeProcessed {
					b.Fatalf("%v %+v", err, res)
				}
			}
			reportMessages(b, n)
		})
	}
}

// BenchmarkBatchRatio interleaves the two paths on one store, so that a
// shared machine's changing load falls on both alike: every op is 16 new
// messages through Process one by one, then 16 through one ProcessBatch.
// "ratio" is batch throughput over single-message throughput. "marked" are
// deliveries the broker does not vouch are first (attempt markers), "first"
// first deliveries (Entry.FirstDelivery), as the runtime mostly sees them.
//
//	go test -run '^$' -bench BatchRatio -benchtime 100x ./inbox/
func BenchmarkBatchRatio(b *testing.B) {
	const size = 16
	for _, backend := range dbtest.All {
		db, s := benchStore(b, backend)
		for _, first := range []bool{false, true} {
			b.Run(backend+map[bool]string{false: "/marked", true: "/first"}[first], func(b *testing.B) {
				ctx := context.Background()
				run := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" // -count > 1 runs again on the same table
				var single, batch time.Duration
				n := 0
				items := make([]inbox.BatchItem, size)
				for b.Loop() {
					start := time.Now()
					for range size {
						id := "S-" + run + strconv.Itoa(n)
						n++
						if res, err := s.Process(ctx, inbox.Entry{EventID: id, ConsumerName: "bench", FirstDelivery: first}, insertBusiness(db, id, "x")); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
							b.Fatalf("%v %+v", err, res)
						}
					}
					single += time.Since(start)
					for k := range items {
						id := "M-" + run + strconv.Itoa(n)
						n++
						items[k] = inbox.BatchItem{Entry: inbox.Entry{EventID: id, ConsumerName: "bench", FirstDelivery: first}, Handler: insertBusiness(db, id, "x")}
					}
					start = time.Now()
					if res, err := s.ProcessBatch(ctx, items); err != nil || res[size-1].Outcome != inboxkit.OutcomeProcessed {
						b.Fatalf("%v %+v", err, res)
					}
					batch += time.Since(start)
				}
				msgs := float64(n / 2)
				b.ReportMetric(msgs/single.Seconds(), "single-msg/s")
				b.ReportMetric(msgs/batch.Seconds(), "batch-msg/s")
				b.ReportMetric(single.Seconds()/batch.Seconds(), "ratio")
			})
		}
	}
}
