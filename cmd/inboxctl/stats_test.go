package main

import (
	"encoding/json"
	"testing"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// stats counts rows per consumer and status on every database, shows the
// oldest open row and the stuck one at the threshold; --json has stable
// names and [] for no rows.
func TestStats(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			r := inboxctl(t, "", "stats", "--db", url, "--json")
			wantCode(t, r, 0, `"counts": []`, `"oldestNonTerminal": null`)
			wantCode(t, inboxctl(t, "", "stats", "--db", url), 0, "no rows", "oldest non-terminal row: none")
			plant(t, db)
			r = inboxctl(t, "", "stats", "--db", url)
			wantCode(t, r, 0, "invoice-consumer", "PROCESSED", "TECHNICAL_FAILURE", "open rows at the threshold: 1")
			t.Logf("inboxctl stats:\n%s", r.stdout)
			r = inboxctl(t, "", "stats", "--db", url, "--json")
			wantCode(t, r, 0)
			var rep statsReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, r)
			}
			rows := map[string]int64{}
			for _, c := range rep.Counts {
				rows[string(c.Status)] += c.Rows
			}
			if rows["PROCESSED"] != 4 || rows["REJECTED"] != 2 || rows["TECHNICAL_FAILURE"] != 1 || rep.AtThreshold != 1 || rep.OldestNonTerminal == nil {
				t.Errorf("stats --json: %+v", rep)
			}
		})
	}
}
