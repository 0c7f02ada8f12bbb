package inbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkProcess measures one processed message (inbox row + one business
// row in one transaction) per dialect, and a duplicate delivery.
//
//	go test -run '^$' -bench Process -benchtime 2000x ./inbox/
func BenchmarkProcess(b *testing.B) {
	for _, backend := range dbtest.All {
		db := dbtest.New(b, backend)
		d, _ := inbox.DialectByName(backend)
		s, err := inbox.New(db.DB, d, inbox.Config{})
		dbtest.Must(b, err, "store")
		dbtest.Must(b, s.Migrate(context.Background()), "migrate")
		_, err = db.Exec(`CREATE TABLE business (event_id VARCHAR(120) NOT NULL, note VARCHAR(200))`)
		dbtest.Must(b, err, "business table")
		b.Run(backend+"/processed", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				id := "B-" + strconv.Itoa(i)
				res, err := s.Process(context.Background(), inbox.Entry{EventID: id, ConsumerName: "bench"}, insertBusiness(db, id, "x"))
				if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
		b.Run(backend+"/duplicate", func(b *testing.B) {
			for b.Loop() {
				res, err := s.Process(context.Background(), inbox.Entry{EventID: "B-0", ConsumerName: "bench"}, insertBusiness(db, "B-0", "x"))
				if err != nil || res.Outcome != inboxkit.OutcomeDuplicate {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
