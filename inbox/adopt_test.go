package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// Issue 23: what an adopted legacy table brings.

// seedLegacy creates the seed table with what a legacy bean left: a
// FAILED row, an IN_PROGRESS row it never finished, a lower-case
// processed and a mixed-case Rejected beside the known PROCESSED and
// REJECTED, all of them a month old.
func seedLegacy(t *testing.T, db *dbtest.DB) {
	t.Helper()
	const old = "2026-02-01 10:00:00"
	dbtest.SeedLegacy(t, db, old, dbtest.LegacyRow{EventID: "INV-9006", Status: "FAILED"}, dbtest.LegacyRow{EventID: "INV-9007", Status: "IN_PROGRESS"},
		dbtest.LegacyRow{EventID: "INV-9008", Status: "processed", ProcessedAt: old}, dbtest.LegacyRow{EventID: "INV-9009", Status: "PROCESSED", ProcessedAt: old},
		dbtest.LegacyRow{EventID: "INV-9010", Status: "Rejected", ProcessedAt: old}, dbtest.LegacyRow{EventID: "INV-9011", Status: "REJECTED", ProcessedAt: old})
}

// snapshot is the inbox table's columns and rows, and which of inboxkit's
// own tables exist: what "nothing changed" compares.
func snapshot(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	return dbtest.Dump(t, db, inbox.DefaultTable, inbox.VersionTable, inbox.HistoryTable)
}

var legacyMapping = map[string]inboxkit.Status{
	"FAILED": inboxkit.StatusTechnicalFailure, "IN_PROGRESS": inboxkit.StatusTechnicalFailure,
	"processed": inboxkit.StatusProcessed, "Rejected": inboxkit.StatusDeadLettered,
}

func TestMigrateStopsUntilUnknownStatusesAreMapped(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		seedLegacy(t, db)
		s := newStore(t, db.DB, db.Backend)
		before := snapshot(t, db)

		// Unmapped: the census, and nothing changed (no column, no version
		// table, no row touched).
		_, err := inbox.MigrateDB(ctx, db.DB, s.Dialect(), "")
		var ue *inbox.UnknownStatusesError
		if !errors.As(err, &ue) || !errors.Is(err, inbox.ErrUnknownStatuses) {
			t.Fatalf("MigrateDB on a table with FAILED rows = %v, want an UnknownStatusesError", err)
		}
		want := []inbox.UnknownStatus{{Status: "FAILED", Rows: 1}, {Status: "IN_PROGRESS", Orphan: true, Rows: 1}, {Status: "Rejected", Rows: 1}, {Status: "processed", Rows: 1}}
		if !reflect.DeepEqual(ue.Unmapped, want) || !reflect.DeepEqual(ue.Unknown, want) {
			t.Errorf("unknown statuses = %+v\nunmapped %+v\nwant %+v", ue.Unknown, ue.Unmapped, want)
		}
		for _, w := range []string{"FAILED (1 row)", "IN_PROGRESS without payload or lease (1 row)", "nothing was changed", "--map-status 'FAILED=TECHNICAL_FAILURE,IN_PROGRESS=TECHNICAL_FAILURE,Rejected=REJECTED,processed=PROCESSED'"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
		if got := snapshot(t, db); got != before {
			t.Fatalf("a refused migration changed the database:\n--- before\n%s--- after\n%s", before, got)
		}
		st, err := s.SchemaStatus(ctx)
		dbtest.Must(t, err, "status")
		if !reflect.DeepEqual(st.Unknown, want) || st.Current != 0 {
			t.Errorf("SchemaStatus: version %d, unknown %+v", st.Current, st.Unknown)
		}

		// A mapping that leaves one value out is refused the same way.
		partial := map[string]inboxkit.Status{"FAILED": inboxkit.StatusTechnicalFailure}
		_, err = inbox.MigrateDBWith(ctx, db.DB, s.Dialect(), "", inbox.MigrateOptions{MapStatus: partial})
		if !errors.As(err, &ue) || len(ue.Unmapped) != 3 {
			t.Fatalf("partial mapping = %v, want the 3 values left unmapped", err)
		}
		// Targets that are no status to map to, and known sources, are
		// refused before anything runs.
		for _, m := range []map[string]inboxkit.Status{{"FAILED": "DONE"}, {"FAILED": inboxkit.StatusReceived}, {"FAILED": "technical_failure"}, {"PROCESSED": inboxkit.StatusRejected}} {
			_, err = inbox.MigrateDBWith(ctx, db.DB, s.Dialect(), "", inbox.MigrateOptions{MapStatus: m})
			if !errors.Is(err, inbox.ErrBadMapping) {
				t.Errorf("mapping %v = %v, want ErrBadMapping", m, err)
			}
		}
		if err := inbox.ValidateStatusMapping(map[string]inboxkit.Status{"FAILED": "DONE"}); err == nil || !strings.Contains(err.Error(), "TECHNICAL_FAILURE, PROCESSED, REJECTED, DEAD_LETTERED") {
			t.Errorf("a bad target's error does not name the valid ones: %v", err)
		}
		// The plan shows the mapping, and changes nothing either.
		p, err := s.PlanMigrationWith(ctx, inbox.MigrateOptions{MapStatus: legacyMapping})
		dbtest.Must(t, err, "plan with the mapping")
		for _, w := range []string{"-- status mapping", "INSERT INTO " + inbox.HistoryTable, "UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'TECHNICAL_FAILURE'", "'processed'", "PAYLOAD_HASH IS NULL AND LEASE_UNTIL IS NULL"} {
			if !strings.Contains(p.Text(), w) {
				t.Errorf("plan lacks %q:\n%s", w, p.Text())
			}
		}
		if got := snapshot(t, db); got != before {
			t.Fatalf("planning changed the database:\n--- before\n%s--- after\n%s", before, got)
		}

		// Mapped: steps and mapping in one locked migration, recorded.
		p, err = inbox.MigrateDBWith(ctx, db.DB, s.Dialect(), "", inbox.MigrateOptions{MapStatus: legacyMapping})
		dbtest.Must(t, err, "migrate with the mapping")
		if len(p.Mapping) != 8 {
			t.Errorf("mapping ran %d statements, want 8", len(p.Mapping))
		}
		dbtest.Must(t, s.CheckSchema(ctx), "schema after migrate")
		for id, want := range map[string]inboxkit.Status{
			"INV-9006": inboxkit.StatusTechnicalFailure, "INV-9007": inboxkit.StatusTechnicalFailure, "INV-9008": inboxkit.StatusProcessed,
			"INV-9009": inboxkit.StatusProcessed, "INV-9010": inboxkit.StatusDeadLettered, "INV-9011": inboxkit.StatusRejected,
		} {
			// INV-9011 (REJECTED) stays: the mapping of Rejected compares
			// byte for byte, on MariaDB's case-blind seed table too.
			if r := get(t, s, id); r.Status != want {
				t.Errorf("%s after the mapping: %s, want %s", id, r.Status, want)
			}
		}
		if r := get(t, s, "INV-9006"); r.ErrorClass != "TECHNICAL" || !strings.Contains(r.LastError, "legacy status FAILED") || r.Attempts != 1 {
			t.Errorf("mapped FAILED row: %+v", r)
		}
		ms, err := s.StatusMappings(ctx)
		dbtest.Must(t, err, "mappings")
		var got []string
		for _, m := range ms {
			got = append(got, fmt.Sprintf("%s (%d)", m.Detail, m.Rows))
		}
		if fmt.Sprint(got) != "[FAILED -> TECHNICAL_FAILURE (1) IN_PROGRESS -> TECHNICAL_FAILURE (1) Rejected -> DEAD_LETTERED (1) processed -> PROCESSED (1)]" {
			t.Errorf("recorded mappings: %v", got)
		}
		unknown, err := s.UnknownStatuses(ctx)
		dbtest.Must(t, err, "census")
		if len(unknown) != 0 {
			t.Errorf("unknown statuses after the mapping: %+v", unknown)
		}
		// Running it again with the same mapping changes nothing more.
		_, err = inbox.MigrateDBWith(ctx, db.DB, s.Dialect(), "", inbox.MigrateOptions{MapStatus: legacyMapping})
		dbtest.Must(t, err, "migrate again")
		if ms2, _ := s.StatusMappings(ctx); len(ms2) != len(ms) {
			t.Errorf("a second run recorded %d mappings, want %d", len(ms2), len(ms))
		}

		// The adopted FAILED event and the unfinished one are processed
		// once when they come again (the first as a redelivery, the second
		// as a producer resend the broker calls a first delivery); the
		// lower-case processed is a duplicate.
		ran := map[string]int{}
		h := func(id string) inbox.Handler {
			return func(context.Context, *sql.Tx) error { ran[id]++; return nil }
		}
		wantOutcome(t, mustProcess(t, s, redelivered("INV-9006"), h("INV-9006")), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		first := entry("INV-9007")
		first.FirstDelivery = true
		wantOutcome(t, mustProcess(t, s, first, h("INV-9007")), inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
		wantOutcome(t, mustProcess(t, s, entry("INV-9008"), h("INV-9008")), inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		wantOutcome(t, mustProcess(t, s, redelivered("INV-9006"), h("INV-9006")), inboxkit.OutcomeDuplicate, inboxkit.StatusProcessed)
		if fmt.Sprint(ran) != "map[INV-9006:1 INV-9007:1]" {
			t.Errorf("handlers ran %v, want INV-9006 and INV-9007 once each", ran)
		}
		if r := get(t, s, "INV-9006"); r.Attempts != 2 || r.EventIDSource != "" || r.PayloadHash != "hash-INV-9006" {
			t.Errorf("INV-9006 after processing: %+v", r)
		}
	})
}

// A row in a status the state machine does not know is never a duplicate
// and never processed, on every path: dead-lettered with UNKNOWN_STATUS,
// the row left as it is.
func TestUnknownStatusAtRunTime(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		s, b := setup(t, db, inbox.Config{})
		for _, r := range [][2]string{{"L-1", "FAILED"}, {"L-2", "IN_PROGRESS"}, {"L-3", "processed"}, {"L-4", "RECEIVED"}} {
			// What a legacy bean still running beside the consumer writes.
			_, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS) VALUES ('%s', '%s', '%s', 1)`, r[0], consumerName, r[1]))
			dbtest.Must(t, err, "legacy row")
		}
		if ok, st := receive(t, s, "S-1"); !ok || st != inboxkit.StatusReceived {
			t.Fatalf("Receive S-1: %v %s", ok, st)
		}
		before := snapshot(t, db)
		h := func(id string) inbox.Handler { return insertBusiness(db, id, "ran") }
		wantUnknown := func(t *testing.T, res inbox.Result, st string) {
			t.Helper()
			var ue *inbox.UnknownStatusError
			if res.Outcome != inboxkit.OutcomeDeadLetter || res.Reason != inboxkit.ReasonUnknownStatus || res.Class != inboxkit.ClassTechnical ||
				string(res.Status) != st || !errors.As(res.Err, &ue) || !strings.Contains(res.Err.Error(), "inboxctl migrate --map-status") {
				t.Errorf("result = %+v (err %v), want a dead letter UNKNOWN_STATUS of a %s row naming --map-status", res, res.Err, st)
			}
		}
		wantUnknown(t, mustProcess(t, s, redelivered("L-1"), h("L-1")), "FAILED")
		wantUnknown(t, mustProcess(t, s, entry("L-3"), h("L-3")), "processed")
		first := entry("L-2")
		first.FirstDelivery = true // the first-delivery path meets the row at its INSERT
		wantUnknown(t, mustProcess(t, s, first, h("L-2")), "IN_PROGRESS")
		wantUnknown(t, mustProcess(t, s, entry("L-4"), h("L-4")), "RECEIVED")
		// A stored entry is the workers': acknowledged as stored.
		wantOutcome(t, mustProcess(t, s, entry("S-1"), h("S-1")), inboxkit.OutcomeStored, inboxkit.StatusReceived)

		// Batches: the marked path, and one of first deliveries.
		items := func(first bool, ids ...string) []inbox.BatchItem {
			var out []inbox.BatchItem
			for _, id := range ids {
				e := entry(id)
				e.FirstDelivery = first
				out = append(out, inbox.BatchItem{Entry: e, Handler: h(id)})
			}
			return out
		}
		for _, first := range []bool{false, true} {
			n := fmt.Sprintf("N-%v", first)
			res, err := s.ProcessBatch(ctx, items(first, "L-1", n, "L-2", "S-1", "L-3"))
			dbtest.Must(t, err, "batch")
			wantUnknown(t, res[0], "FAILED")
			wantOutcome(t, res[1], inboxkit.OutcomeProcessed, inboxkit.StatusProcessed)
			wantUnknown(t, res[2], "IN_PROGRESS")
			wantOutcome(t, res[3], inboxkit.OutcomeStored, inboxkit.StatusReceived)
			wantUnknown(t, res[4], "processed")
		}

		// The dead letter's mark leaves the row; so does the receiver,
		// which reports it for a dead letter too.
		st, err := s.MarkDeadLettered(ctx, inbox.DeadLetter{Entry: entry("L-1"), Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonUnknownStatus})
		if err != nil || st != "FAILED" {
			t.Errorf("MarkDeadLettered on the FAILED row = %q, %v; want FAILED, unchanged", st, err)
		}
		for _, id := range []string{"L-1", "L-2", "L-3"} {
			_, _, err := s.Receive(ctx, entry(id), nil, []byte("p"))
			var re *inbox.ReceiveError
			if !errors.As(err, &re) || re.Reason != inboxkit.ReasonUnknownStatus || inboxkit.DecisionOf(err).Class != inboxkit.ClassTechnical {
				t.Errorf("Receive(%s) = %v, want a ReceiveError UNKNOWN_STATUS (technical)", id, err)
			}
		}
		if ok, st := receive(t, s, "S-1"); ok || st != inboxkit.StatusReceived {
			t.Errorf("Receive S-1 again: %v %s, want the stored entry", ok, st)
		}

		// Nothing of theirs ran, no row of theirs changed.
		if n := b.allBusinessRows(t); n != 2 {
			t.Errorf("%d business rows, want the 2 new events'", n)
		}
		_, err = db.ExecContext(ctx, `DELETE FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID LIKE 'N-%'`)
		dbtest.Must(t, err, "delete the new events")
		if got := snapshot(t, db); got != before {
			t.Errorf("rows in unknown statuses changed:\n--- before\n%s--- after\n%s", before, got)
		}
		rows, err := s.UnknownStatusRows(ctx, 0)
		dbtest.Must(t, err, "unknown rows")
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.EventID)
		}
		if fmt.Sprint(ids) != "[L-1 L-2 L-3 L-4]" {
			t.Errorf("UnknownStatusRows = %v", ids)
		}
	})
}

// The store-then-process receiver takes a message in for a
// TECHNICAL_FAILURE row no worker would claim (an adopted FAILED row
// mapped by migrate): a worker then processes it once.
func TestReceiveTakesInAMappedFailure(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		s, b := setup(t, db, inbox.Config{})
		_, err := db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, ATTEMPTS, ERROR_CLASS) VALUES ('A-1', '`+consumerName+`', 'TECHNICAL_FAILURE', 1, 'TECHNICAL')`)
		dbtest.Must(t, err, "mapped row")
		if ok, st := receive(t, s, "A-1"); !ok || st != inboxkit.StatusReceived {
			t.Fatalf("Receive of the mapped failure: %v %s, want it stored", ok, st)
		}
		w := newWorker(t, s, inbox.WorkerConfig{HandleFunc: businessHandler(db, "w")})
		c := claimOne(t, w)
		res, err := w.Process(ctx, c)
		dbtest.Must(t, err, "process")
		if res.Outcome != inboxkit.OutcomeProcessed || res.Attempts != 2 {
			t.Errorf("worker result %+v, want processed at attempt 2", res)
		}
		if ok, st := receive(t, s, "A-1"); ok || st != inboxkit.StatusProcessed {
			t.Errorf("Receive after processing: %v %s, want a duplicate", ok, st)
		}
		if n := b.businessRows(t, "A-1"); n != 1 {
			t.Errorf("A-1 has %d business rows, want 1", n)
		}
	})
}

// A PROCESSED row a legacy consumer left without PROCESSED_AT is purged by
// its CREATED_AT; every run that deleted rows is recorded with its time,
// cutoff, window and horizon.
func TestPurgeLegacyRowsAndRecordRuns(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		s, b := setup(t, db, inbox.Config{}) // clock 2026-03-01 09:00, horizon 7 days
		for _, q := range []string{
			`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CREATED_AT) VALUES ('null-old', 'c', 'PROCESSED', '2026-01-01 00:00:00')`,
			`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CREATED_AT) VALUES ('null-new', 'c', 'PROCESSED', '2026-02-28 00:00:00')`,
			`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT) VALUES ('set-old', 'c', 'REJECTED', '2026-01-02 00:00:00', '2026-01-01 00:00:00')`,
			`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT, CREATED_AT) VALUES ('set-new', 'c', 'PROCESSED', '2026-02-28 00:00:00', '2026-01-01 00:00:00')`,
			`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CREATED_AT) VALUES ('failed-old', 'c', 'TECHNICAL_FAILURE', '2026-01-01 00:00:00')`,
		} {
			_, err := db.ExecContext(ctx, q)
			dbtest.Must(t, err, "row")
		}
		opt := inbox.PurgeOptions{OlderThan: 30 * 24 * time.Hour}
		dry := opt
		dry.DryRun = true
		if n, err := s.Purge(ctx, dry); err != nil || n != 2 {
			t.Fatalf("dry run: %d, %v; want 2 (null-old by its CREATED_AT, set-old)", n, err)
		}
		if n, err := s.Purge(ctx, opt); err != nil || n != 2 {
			t.Fatalf("purge: %d, %v; want 2", n, err)
		}
		for id, want := range map[string]bool{"null-old": false, "null-new": true, "set-old": false, "set-new": true, "failed-old": true} {
			_, err := s.Get(ctx, id, "c")
			if got := err == nil; got != want {
				t.Errorf("%s kept = %v, want %v (%v)", id, got, want, err)
			}
		}
		b.clock.Add(time.Hour)
		if n, err := s.Purge(ctx, opt); err != nil || n != 0 {
			t.Fatalf("second purge: %d, %v", n, err)
		}
		runs, err := s.PurgeRuns(ctx)
		dbtest.Must(t, err, "purge runs")
		now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		want := []inbox.PurgeRun{{At: now, Cutoff: now.Add(-30 * 24 * time.Hour), Window: 30 * 24 * time.Hour, Horizon: 7 * 24 * time.Hour, Rows: 2}}
		if len(runs) != 1 || !runs[0].At.Equal(want[0].At) || !runs[0].Cutoff.Equal(want[0].Cutoff) || runs[0].Window != want[0].Window || runs[0].Horizon != want[0].Horizon || runs[0].Rows != 2 {
			t.Fatalf("purge runs = %+v, want %+v (a run that deleted nothing is not recorded)", runs, want)
		}
		if s := runs[0].String(); s != "purge of 2026-03-01 09:00:00 (window 720h0m0s, horizon 168h0m0s: rows finished before 2026-01-30 09:00:00 deleted, 2 rows)" {
			t.Errorf("run text %q", s)
		}
	})
}

// The read-only queries work on the seed table before it is migrated.
func TestForReadingAnUnmigratedSeedTable(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		seedLegacy(t, db)
		s := newStore(t, db.DB, db.Backend)
		if _, err := s.ByEventID(ctx, "INV-9006"); err == nil {
			t.Fatal("the full store read a table without its columns")
		}
		r, err := s.ForReading(ctx)
		dbtest.Must(t, err, "for reading")
		recs, err := r.ByCorrelation(ctx, "order-INV-9006")
		dbtest.Must(t, err, "by correlation")
		if len(recs) != 1 || recs[0].Status != "FAILED" || recs[0].Attempts != 0 || recs[0].EventIDSource != "" {
			t.Errorf("ByCorrelation = %+v", recs)
		}
		recs, err = r.ByEventID(ctx, "INV-9008")
		dbtest.Must(t, err, "by event id")
		if len(recs) != 1 || recs[0].Status != "processed" {
			t.Errorf("ByEventID = %+v", recs)
		}
		if _, err := r.Get(ctx, "INV-9009", consumerName); err != nil {
			t.Errorf("Get: %v", err)
		}
		st, err := r.Stats(ctx)
		dbtest.Must(t, err, "stats")
		if len(st.Counts) != 6 {
			t.Errorf("stats counts %+v, want the 6 statuses", st.Counts)
		}
		if _, err := r.Baseline(ctx); !errors.Is(err, inbox.ErrNoBaseline) {
			t.Errorf("Baseline of an unmigrated table = %v, want ErrNoBaseline", err)
		}
		// Once migrated, the baseline is the adoption.
		_, err = inbox.MigrateDBWith(ctx, db.DB, s.Dialect(), "", inbox.MigrateOptions{MapStatus: legacyMapping})
		dbtest.Must(t, err, "migrate")
		at, err := s.Baseline(ctx)
		dbtest.Must(t, err, "baseline")
		if d := time.Since(at); d < -time.Minute || d > time.Minute {
			t.Errorf("baseline %s is not the migration's time", at)
		}
		if r2, err := s.ForReading(ctx); err != nil || r2 != s {
			t.Errorf("ForReading on a migrated table = %p, %v; want the store itself", r2, err)
		}
	})
}
