package claims_test

import (
	"context"
	"testing"

	"github.com/inboxkit/inboxkit/examples/claims"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/golden/goldentest"
)

func factory(env *golden.Env) (golden.Subject, error) {
	h, err := claims.NewHandler(claims.Config{Dialect: env.Dialect, IDFunc: env.IDFunc, Clock: env.Clock})
	if err != nil {
		return golden.Subject{}, err
	}
	return golden.Subject{
		Name: claims.ConsumerName, Handler: h,
		Setup:  func(ctx context.Context) error { return claims.Migrate(ctx, env.DB) },
		Tables: []golden.Table{{Name: "claim_cases", Columns: []string{"case_id", "claim_no", "event_id", "opened_at"}, OrderBy: "claim_no, case_id"}},
	}, nil
}

func TestGolden(t *testing.T) {
	goldentest.Run(t, "testdata/golden", factory)
}

// TestExactlyOneCase states the claim of the Inbox Pattern text directly:
// after a crash between commit and acknowledgement, n-9921 is delivered
// twice and exactly one claim case exists.
func TestExactlyOneCase(t *testing.T) {
	for _, backend := range []string{golden.SQLite, golden.Postgres} {
		tr, err := golden.PlayCase(t.Context(), "testdata/golden/crash-after-commit", backend, factory)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(tr.Deliveries); n != 2 {
			t.Errorf("%s: %d deliveries, want 2 (the redelivery)", backend, n)
		}
		if rows := tr.Rows["claim_cases"]; len(rows) != 1 || rows[0][1] != "4711" || rows[0][2] != "n-9921" {
			t.Errorf("%s: claim_cases = %v, want exactly one case for claim 4711 from n-9921", backend, rows)
		}
	}
}
