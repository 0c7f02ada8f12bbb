package inbox

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkProcessSteps measures the steps of Process one by one, per
// dialect, in one run: the attempt marker as one upsert beside the three
// statements it replaced (UPDATE, status SELECT, INSERT; still SQLite's),
// on PostgreSQL also the upsert with a synchronous commit, for a new
// message and for a duplicate; the business transaction with and without
// its savepoint; and the whole Process both ways.
//
//	go test -run '^$' -bench ProcessSteps -benchtime 1000x ./inbox/
func BenchmarkProcessSteps(b *testing.B) {
	ctx := context.Background()
	for _, backend := range dbtest.All {
		db := dbtest.New(b, backend)
		d, _ := DialectByName(backend)
		upsert, err := New(db.DB, d, Config{})
		dbtest.Must(b, err, "store")
		dbtest.Must(b, upsert.Migrate(ctx), "migrate")
		_, err = db.Exec(`CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
		dbtest.Must(b, err, "business table")
		three, _ := New(db.DB, d, Config{})
		three.q.markUpsert = stmt{}
		ways := []struct {
			name string
			s    *Store
		}{{"three statements", three}}
		if upsert.q.markUpsert.text != "" {
			ways = append(ways, struct {
				name string
				s    *Store
			}{"upsert", upsert})
			if d.name == "postgres" {
				syncd, _ := New(db.DB, d, Config{})
				syncd.q.markUpsert.text = strings.Replace(syncd.q.markUpsert.text, "set_config('synchronous_commit', 'off', true)", "1", 1)
				ways = append(ways, struct {
					name string
					s    *Store
				}{"upsert, synchronous commit", syncd})
			}
		}
		seq := 0
		id := func() string { seq++; return "S-" + strconv.Itoa(seq) }
		entry := func(id string) Entry { return Entry{EventID: id, ConsumerName: "bench"} }
		business := func(id string) Handler {
			return func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, d.Rebind(`INSERT INTO business (event_id, note) VALUES (?, ?)`), id, "x")
				return err
			}
		}
		processed := id()
		if _, err := upsert.Process(ctx, entry(processed), business(processed)); err != nil {
			b.Fatal(err)
		}
		for _, w := range ways {
			b.Run(backend+"/marker new/"+w.name, func(b *testing.B) {
				for b.Loop() {
					m, err := w.s.mark(ctx, w.s.db, entry(id()))
					if err != nil || m.started != 1 {
						b.Fatalf("%v %+v", err, m)
					}
				}
			})
			b.Run(backend+"/marker duplicate/"+w.name, func(b *testing.B) {
				for b.Loop() {
					m, err := w.s.mark(ctx, w.s.db, entry(processed))
					if err != nil || m.res.Outcome != inboxkit.OutcomeDuplicate {
						b.Fatalf("%v %+v", err, m)
					}
				}
			})
		}
		for _, savepoint := range []bool{true, false} {
			name := "with savepoint"
			if !savepoint {
				name = "without savepoint"
			}
			b.Run(backend+"/business tx/"+name, func(b *testing.B) {
				ids := make([]string, b.N)
				for i := range ids {
					ids[i] = id()
					if _, err := upsert.mark(ctx, upsert.db, entry(ids[i])); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					tx, err := upsert.db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					now := upsert.t(upsert.now())
					if _, err := upsert.q.processFromFail.exec(ctx, tx, entry(ids[i]).row(arg{"now", now})); err != nil {
						b.Fatal(err)
					}
					if savepoint {
						if _, err := tx.ExecContext(ctx, upsert.q.savepoint); err != nil {
							b.Fatal(err)
						}
					}
					if err := business(ids[i])(ctx, tx); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(backend+"/marker then business tx", func(b *testing.B) {
			for b.Loop() {
				e := entry(id())
				if _, err := upsert.mark(ctx, upsert.db, e); err != nil {
					b.Fatal(err)
				}
				tx, err := upsert.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				now := upsert.t(upsert.now())
				if _, err := upsert.q.processFromFail.exec(ctx, tx, e.row(arg{"now", now})); err != nil {
					b.Fatal(err)
				}
				if err := business(e.EventID)(ctx, tx); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(backend+"/raw tx", func(b *testing.B) {
			for b.Loop() {
				e := entry(id())
				tx, err := upsert.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				now := upsert.t(upsert.now())
				if _, err := upsert.q.insertStarted.exec(ctx, tx, e.row(arg{"now", now})); err != nil {
					b.Fatal(err)
				}
				if err := business(e.EventID)(ctx, tx); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, w := range ways {
			b.Run(backend+"/Process new/"+w.name, func(b *testing.B) {
				for b.Loop() {
					e := entry(id())
					res, err := w.s.Process(ctx, e, business(e.EventID))
					if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
						b.Fatalf("%v %+v", err, res)
					}
				}
			})
			b.Run(backend+"/Process duplicate/"+w.name, func(b *testing.B) {
				for b.Loop() {
					res, err := w.s.Process(ctx, entry(processed), business(processed))
					if err != nil || res.Outcome != inboxkit.OutcomeDuplicate {
						b.Fatalf("%v %+v", err, res)
					}
				}
			})
		}
		// A broker's first delivery: no marker (first.go).
		b.Run(backend+"/Process new/first delivery", func(b *testing.B) {
			for b.Loop() {
				e := entry(id())
				e.FirstDelivery = true
				res, err := upsert.Process(ctx, e, business(e.EventID))
				if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
		b.Run(backend+"/Process duplicate/first delivery", func(b *testing.B) {
			for b.Loop() {
				e := entry(processed)
				e.FirstDelivery = true
				res, err := upsert.Process(ctx, e, business(processed))
				if err != nil || res.Outcome != inboxkit.OutcomeDuplicate {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
