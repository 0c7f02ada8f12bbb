package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkMarkedPipeline compares, on PostgreSQL in one process, a new
// delivery's Process on the marked path with the pgx batch (pipeline.go)
// and without it (the statements one by one, as before it), beside a first
// delivery and the same SQL by hand (BEGIN, inbox INSERT, business INSERT,
// COMMIT), at 1, 4 and 16 goroutines. The cells are short and interleaved
// round by round, so that a shared machine's load moves all of them alike;
// it reports the median msg/s of each and the ratios to raw.
//
//	go test -run '^$' -bench MarkedPipeline -benchtime 1x ./inbox/
func BenchmarkMarkedPipeline(b *testing.B) {
	ctx := context.Background()
	db := dbtest.New(b, dbtest.Postgres)
	db.DB.SetMaxIdleConns(40)
	piped, err := New(db.DB, Postgres, Config{})
	dbtest.Must(b, err, "store")
	dbtest.Must(b, piped.Migrate(ctx), "migrate")
	plain, _ := New(db.DB, Postgres, Config{})
	plain.nopipe.Store(true)
	_, err = db.Exec(`CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
	dbtest.Must(b, err, "business table")
	var seq atomic.Int64
	id := func() string { return fmt.Sprintf("P-%d", seq.Add(1)) }
	business := func(ctx context.Context, tx *sql.Tx, id string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO business (event_id, note) VALUES ($1, $2)`, id, "x")
		return err
	}
	process := func(s *Store, first bool) func() error {
		return func() error {
			e := Entry{EventID: id(), ConsumerName: "bench", CorrelationID: "corr", FirstDelivery: first}
			_, err := s.Process(ctx, e, func(ctx context.Context, tx *sql.Tx) error { return business(ctx, tx, e.EventID) })
			return err
		}
	}
	raw := func() error {
		e := id()
		tx, err := db.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS) VALUES ($1, 'bench', 'PROCESSED', $2, now(), now(), now(), 1)`, e, "corr"); err != nil {
			return err
		}
		if err := business(ctx, tx, e); err != nil {
			return err
		}
		return tx.Commit()
	}
	ops := []struct {
		name, unit string
		one        func() error
	}{{"raw", "raw", raw}, {"marked, pipelined", "piped", process(piped, false)}, {"marked, no pipeline", "plain", process(plain, false)}, {"first delivery", "first", process(piped, true)}}
	const rounds, cell = 7, time.Second
	for _, c := range []int{1, 4, 16} {
		rates := make([][]float64, len(ops))
		for range rounds {
			for i, op := range ops {
				var n atomic.Int64
				var wg sync.WaitGroup
				stop := time.Now().Add(cell)
				for range c {
					wg.Go(func() {
						for time.Now().Before(stop) {
							if err := op.one(); err != nil {
								b.Error(err)
								return
							}
							n.Add(1)
						}
					})
				}
				wg.Wait()
				rates[i] = append(rates[i], float64(n.Load())/cell.Seconds())
			}
		}
		med := make([]float64, len(ops))
		for i := range ops {
			slices.Sort(rates[i])
			med[i] = rates[i][rounds/2]
		}
		for i, op := range ops {
			b.Logf("c=%-2d %-20s %6.0f msg/s  %.2f× raw  (rounds %v)", c, op.name, med[i], med[i]/med[0], rates[i])
			b.ReportMetric(med[i]/med[0], fmt.Sprintf("%s/raw@c%d", op.unit, c))
		}
	}
}
