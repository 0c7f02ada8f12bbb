package reportworker_test

import (
	"context"
	"testing"

	"github.com/inboxkit/inboxkit/examples/reportworker"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/golden/goldentest"
)

func factory(env *golden.Env) (golden.Subject, error) {
	return golden.Subject{
		Name: reportworker.ConsumerName, Handler: reportworker.NewHandler(env.Dialect),
		Setup: func(ctx context.Context) error {
			return reportworker.Migrate(ctx, env.DB, env.Dialect, "daily-sales", 6)
		},
		Tables: []golden.Table{{Name: "report_counters", Columns: []string{"report_id", "value"}}},
	}, nil
}

func TestGolden(t *testing.T) {
	goldentest.Run(t, "testdata/golden", factory)
}

// TestNeverEight states the claim directly on every case and backend: the
// counter ends at 7, never 8.
func TestNeverEight(t *testing.T) {
	cases, err := golden.Cases("testdata/golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, backend := range []string{golden.SQLite, golden.Postgres} {
			for range 3 { // the parallel case races differently each time
				tr, err := golden.PlayCase(t.Context(), c, backend, factory)
				if err != nil {
					t.Fatal(err)
				}
				if rows := tr.Rows["report_counters"]; len(rows) != 1 || rows[0][1] != "7" {
					t.Fatalf("%s on %s: report_counters = %v, want daily-sales at 7", c, backend, rows)
				}
			}
		}
	}
}
