package inbox_test

import (
	"context"
	"testing"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkFailureGroups measures FailureGroups on PostgreSQL over a
// million failed rows (DEAD_LETTERED, REJECTED, TECHNICAL_FAILURE at the
// threshold, 20000 distinct error texts in 4 fingerprints) beside a
// million PROCESSED rows, generated with generate_series; the -default-
// work_mem runs without the dialect's aggregateMemory, for the ratio.
//
//	go test -run '^$' -bench FailureGroups -benchtime 5x ./inbox/
func BenchmarkFailureGroups(b *testing.B) {
	ctx := context.Background()
	db := dbtest.New(b, dbtest.Postgres)
	s, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{})
	dbtest.Must(b, err, "store")
	dbtest.Must(b, s.Migrate(ctx), "migrate")
	_, err = db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING
  (EVENT_ID, CONSUMER_NAME, STATUS, REASON_CODE, ERROR_CLASS, LAST_ERROR, PROCESSED_AT, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT, ATTEMPTS, REPLAY_COUNT)
SELECT md5('f' || i), 'consumer-' || (i % 3),
  (ARRAY['DEAD_LETTERED', 'REJECTED', 'TECHNICAL_FAILURE', 'DEAD_LETTERED'])[i % 4 + 1],
  (ARRAY['MAX_ATTEMPTS', 'CUSTOMER_UNKNOWN', NULL, 'POISON'])[i % 4 + 1],
  (ARRAY['TECHNICAL', 'BUSINESS', 'TECHNICAL', 'POISON'])[i % 4 + 1],
  (ARRAY['letter service: HTTP 503 for ''INV-', 'customer K-', 'database timeout on order ', 'cannot decode body at offset '])[i % 4 + 1] || (i % 5000),
  now() - (i % 1000) * interval '1 minute', now() - (i % 1000) * interval '1 minute', now() - (i % 1000) * interval '1 minute', now() - (i % 1000) * interval '1 minute',
  5, i % 2
FROM generate_series(1, 1000000) AS i`)
	dbtest.Must(b, err, "generate the failed rows")
	_, err = db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS)
SELECT md5('p' || i), 'consumer-' || (i % 3), 'PROCESSED', now(), now(), now(), 1 FROM generate_series(1, 1000000) AS i`)
	dbtest.Must(b, err, "generate the processed rows")
	_, err = db.ExecContext(ctx, `ANALYZE INBOX_EVENT_PROCESSING`)
	dbtest.Must(b, err, "analyze")
	plain := inbox.WithoutAggregateMemory(s)
	for _, tc := range []struct {
		name string
		s    *inbox.Store
		f    inbox.FailureFilter
	}{
		{"all", s, inbox.FailureFilter{}},
		{"all-default-work_mem", plain, inbox.FailureFilter{}},
		{"consumer", s, inbox.FailureFilter{Consumer: "consumer-1"}},
		{"consumer-default-work_mem", plain, inbox.FailureFilter{Consumer: "consumer-1"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				gs, err := tc.s.FailureGroups(ctx, tc.f)
				if err != nil {
					b.Fatal(err)
				}
				var n int64
				for _, g := range gs {
					n += g.Rows
				}
				if tc.f.Consumer == "" && n != 1000000 {
					b.Fatalf("%d failed rows in %d groups, want 1000000", n, len(gs))
				}
			}
		})
	}
}
