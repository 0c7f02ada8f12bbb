package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// A job reopens each event once: the item and the reset commit together,
// a second ReopenForJob of the same job changes nothing and returns the
// item as it is, another job may reopen it again; a PROCESSED row is
// refused and leaves no item; a REJECTED row is reopened only as a
// rejection. JobProgress counts the sent items and those failed again.
func TestReopenForJob(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		d, _ := inbox.DialectByName(db.Backend)
		plantRows(t, db, map[string]string{"d-1": "DEAD_LETTERED", "d-2": "DEAD_LETTERED", "p-1": "PROCESSED", "r-1": "REJECTED"})
		j, err := s.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: `{"all":true}`, Operator: "ann"})
		dbtest.Must(t, err, "create job")
		j2, err := s.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: `{"all":true}`, Operator: "ann"})
		dbtest.Must(t, err, "create job 2")
		if j.ID != 1 || j2.ID != 2 || j.State != inbox.JobRunning {
			t.Fatalf("jobs %+v %+v", j, j2)
		}
		if _, err := s.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: "{}"}); err == nil {
			t.Error("a job without an operator was created")
		}
		it, err := s.ReopenForJob(ctx, j.ID, "d-1", consumerName, false)
		dbtest.Must(t, err, "reopen d-1")
		if !it.New || it.State != inbox.ItemReopened {
			t.Fatalf("first reopen: %+v", it)
		}
		if r := get(t, s, "d-1"); r.Status != inboxkit.StatusTechnicalFailure || r.ReplayCount != 1 || r.Attempts != 0 {
			t.Fatalf("d-1 after the reopen: %+v", r)
		}
		it, err = s.ReopenForJob(ctx, j.ID, "d-1", consumerName, false)
		dbtest.Must(t, err, "reopen d-1 again")
		if it.New || it.State != inbox.ItemReopened {
			t.Fatalf("second reopen of the job: %+v", it)
		}
		dbtest.Must(t, s.MarkItemSent(ctx, j.ID, "d-1", consumerName), "mark sent")
		it, err = s.ReopenForJob(ctx, j.ID, "d-1", consumerName, false)
		dbtest.Must(t, err, "reopen d-1 after sent")
		if it.New || it.State != inbox.ItemSent {
			t.Fatalf("reopen after the send: %+v", it)
		}
		if r := get(t, s, "d-1"); r.ReplayCount != 1 {
			t.Fatalf("d-1 reopened twice by one job: %+v", r)
		}
		// Another job: the row is TECHNICAL_FAILURE (reopened), taken as it is.
		it, err = s.ReopenForJob(ctx, j2.ID, "d-1", consumerName, false)
		dbtest.Must(t, err, "reopen d-1 in job 2")
		if !it.New {
			t.Fatalf("job 2: %+v", it)
		}
		it, err = s.ReopenForJob(ctx, j.ID, "p-1", consumerName, false)
		dbtest.Must(t, err, "reopen p-1")
		if !it.Refused || it.Status != inboxkit.StatusProcessed {
			t.Fatalf("processed row: %+v", it)
		}
		if keys, err := s.JobEvents(ctx, j.ID); err != nil || len(keys) != 1 {
			t.Fatalf("job 1's events: %v %v (p-1 refused: no item)", keys, err)
		}
		if it, err = s.ReopenForJob(ctx, j.ID, "r-1", consumerName, false); err != nil || !it.Refused {
			t.Fatalf("a REJECTED row reopened as a dead letter: %+v %v", it, err)
		}
		if it, err = s.ReopenForJob(ctx, j.ID, "r-1", consumerName, true); err != nil || !it.New || get(t, s, "r-1").Status != inboxkit.StatusTechnicalFailure {
			t.Fatalf("rejection: %+v %v", it, err)
		}
		// d-1 fails again: progress counts it.
		_, err = db.ExecContext(ctx, d.Rebind(`UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'DEAD_LETTERED' WHERE EVENT_ID = ?`), "d-1")
		dbtest.Must(t, err, "fail d-1 again")
		sent, again, err := s.JobProgress(ctx, j.ID)
		if err != nil || sent != 1 || again != 1 {
			t.Fatalf("progress: %d sent, %d failed again, %v; want 1, 1", sent, again, err)
		}
		j.State, j.StopReason = inbox.JobStopped, "because"
		dbtest.Must(t, s.UpdateReplayJob(ctx, &j), "update")
		got, err := s.ReplayJob(ctx, j.ID)
		if err != nil || got.State != inbox.JobStopped || got.Replayed != 1 || got.FailedAgain != 1 || got.StopReason != "because" || got.Operator != "ann" {
			t.Fatalf("job read back: %+v %v", got, err)
		}
		if _, err := s.ReplayJob(ctx, 99); !errors.Is(err, inbox.ErrNoSuchJob) {
			t.Errorf("job 99: %v", err)
		}
		if js, err := s.ReplayJobs(ctx); err != nil || len(js) != 2 || js[0].ID != 2 {
			t.Errorf("jobs, newest first: %+v %v", js, err)
		}
	})
}

// Archiving hides a group's rows from FailureGroups and FailedEvents
// until restored; a replay's reset unarchives the row.
func TestArchiveGroup(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		d, _ := inbox.DialectByName(db.Backend)
		for i, e := range []string{"customer K-1 unknown", "customer K-2 unknown", "timeout"} {
			_, err := db.ExecContext(ctx, d.Rebind(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, LAST_ERROR, ATTEMPTS) VALUES (?, ?, 'DEAD_LETTERED', ?, 5)`), fmt.Sprint("e-", i), consumerName, e)
			dbtest.Must(t, err, "plant")
		}
		groups, err := s.FailureGroups(ctx, inbox.FailureFilter{})
		if err != nil || len(groups) != 2 || groups[0].Rows != 2 {
			t.Fatalf("groups: %+v %v", groups, err)
		}
		g, ids, err := s.ArchiveGroup(ctx, groups[0].ID, inbox.FailureFilter{})
		if err != nil || len(ids) != 2 || g.ID != groups[0].ID {
			t.Fatalf("archive: %v %v", ids, err)
		}
		if after, _ := s.FailureGroups(ctx, inbox.FailureFilter{}); len(after) != 1 || after[0].ID != groups[1].ID {
			t.Errorf("groups after the archive: %+v", after)
		}
		if keys, _ := s.FailedEvents(ctx, inbox.FailureFilter{}); len(keys) != 1 || keys[0].EventID != "e-2" {
			t.Errorf("failed events after the archive: %+v", keys)
		}
		if arch, _ := s.FailureGroups(ctx, inbox.FailureFilter{Archived: true}); len(arch) != 1 || arch[0].ID != g.ID || arch[0].Rows != 2 {
			t.Errorf("archived groups: %+v", arch)
		}
		if _, _, err := s.ArchiveGroup(ctx, g.ID, inbox.FailureFilter{}); !errors.Is(err, inbox.ErrNoSuchGroup) {
			t.Errorf("archive twice: %v", err)
		}
		ok, err := s.ResetForReplay(ctx, "e-0", consumerName)
		dbtest.Must(t, err, "reset")
		if !ok {
			t.Fatal("e-0 not reset")
		}
		_, err = db.ExecContext(ctx, d.Rebind(`UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'DEAD_LETTERED' WHERE EVENT_ID = ?`), "e-0")
		dbtest.Must(t, err, "fail e-0 again")
		if after, _ := s.FailureGroups(ctx, inbox.FailureFilter{}); len(after) != 2 {
			t.Errorf("a replayed row stays archived: %+v", after)
		}
		if _, ids, err := s.RestoreGroup(ctx, g.ID, inbox.FailureFilter{}); err != nil || len(ids) != 1 || ids[0] != "e-1" {
			t.Errorf("restore: %v %v", ids, err)
		}
		if after, _ := s.FailureGroups(ctx, inbox.FailureFilter{}); len(after) != 2 || after[0].Rows != 2 {
			t.Errorf("groups after the restore: %+v", after)
		}
	})
}

// A table at version 8 is migrated to 9 (ARCHIVED_AT and the job
// tables), and on to the latest.
func TestReplayJobMigrationFromVersion8(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		undoStep10(t, db)
		for _, q := range []string{`ALTER TABLE ` + inbox.DefaultTable + ` DROP COLUMN ARCHIVED_AT`, `DROP TABLE ` + inbox.ReplayJobTable,
			`DROP TABLE ` + inbox.ReplayItemTable, fmt.Sprintf(`DELETE FROM %s WHERE VERSION = 9`, inbox.VersionTable)} {
			_, err := db.ExecContext(ctx, q)
			dbtest.Must(t, err, "%s", q)
		}
		var se *inbox.SchemaError
		if err := s.CheckSchema(ctx); !errors.As(err, &se) || se.Current != 8 || len(se.Pending) != inbox.SchemaVersion-8 {
			t.Fatalf("CheckSchema at version 8 = %v, want step 9 and the later ones pending", err)
		}
		dbtest.Must(t, s.Migrate(ctx), "migrate from 8")
		dbtest.Must(t, s.CheckSchema(ctx), "check")
		if _, err := s.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "q", Selection: "{}", Operator: "ann"}); err != nil {
			t.Fatal(err)
		}
	})
}

// GroupsOf finds the failed rows of the event ids, over more than one
// chunk of ids, each with the id FailureGroups gives its group; a
// PROCESSED row, an unknown id and the rows the filter leaves out are
// not returned.
func TestGroupsOf(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		d, _ := inbox.DialectByName(db.Backend)
		tx, err := db.BeginTx(ctx, nil)
		dbtest.Must(t, err, "begin")
		ins := d.Rebind(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, LAST_ERROR, ATTEMPTS) VALUES (?, ?, ?, ?, 5)`)
		var ids []string
		for i := range 501 {
			id := fmt.Sprint("e-", i)
			ids = append(ids, id)
			_, err := tx.ExecContext(ctx, ins, id, consumerName, "DEAD_LETTERED", fmt.Sprintf("customer K-%d unknown", i))
			dbtest.Must(t, err, "plant %s", id)
		}
		for _, r := range []struct{ id, consumer, status, err string }{
			{"x-1", consumerName, "DEAD_LETTERED", "timeout"}, {"x-1", "other", "REJECTED", "bad field 'a'"}, {"p-1", consumerName, "PROCESSED", ""},
		} {
			_, err := tx.ExecContext(ctx, ins, r.id, r.consumer, r.status, r.err)
			dbtest.Must(t, err, "plant %s", r.id)
		}
		dbtest.Must(t, tx.Commit(), "commit")
		groups, err := s.FailureGroups(ctx, inbox.FailureFilter{})
		if err != nil || len(groups) != 3 || groups[0].Rows != 501 {
			t.Fatalf("groups: %+v %v", groups, err)
		}
		id := map[string]string{}
		for _, g := range groups {
			id[g.ConsumerName+" "+g.Fingerprint] = g.ID
		}
		got, err := s.GroupsOf(ctx, inbox.FailureFilter{}, append(ids, "x-1", "p-1", "nope"))
		dbtest.Must(t, err, "groups of")
		want := map[inbox.GroupedEvent]bool{
			{ConsumerName: consumerName, EventID: "x-1", Group: id[consumerName+" timeout"]}: true,
			{ConsumerName: "other", EventID: "x-1", Group: id["other bad field <q>"]}:        true,
		}
		for _, ev := range ids {
			want[inbox.GroupedEvent{ConsumerName: consumerName, EventID: ev, Group: groups[0].ID}] = true
		}
		seen := map[inbox.GroupedEvent]bool{}
		for _, g := range got {
			if !want[g] || seen[g] {
				t.Errorf("unexpected or twice: %+v", g)
			}
			seen[g] = true
		}
		if len(seen) != len(want) || want[inbox.GroupedEvent{}] {
			t.Errorf("got %d rows, want %d", len(seen), len(want))
		}
		if got, err := s.GroupsOf(ctx, inbox.FailureFilter{Consumer: "other"}, []string{"x-1", "e-1"}); err != nil || len(got) != 1 || got[0].ConsumerName != "other" {
			t.Errorf("consumer other: %+v %v", got, err)
		}
	})
}

// A job has one runner: CreateReplayJob's caller holds it; a claim by
// another process is refused with the heartbeat's age while it is fresh,
// succeeds once it is older than the stale time, and the first runner's
// next write finds its claim lost. Of claims made at once exactly one
// wins. A run that ended unfinished (a stop reason) or STOPPED is claimed
// at once; DONE and ABANDONED are closed. AbandonReplayJob is refused
// while a runner holds the job and reports the items reopened but not
// sent. Every database, one clock for the processes.
func TestReplayJobClaim(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		a, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		d, _ := inbox.DialectByName(db.Backend)
		other := func() *inbox.Store { // another process on the same database
			s, err := inbox.New(db.DB, d, inbox.Config{Clock: b.clock})
			dbtest.Must(t, err, "store")
			return s
		}
		const stale = 30 * time.Second
		job, err := a.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: `{"all":true}`, Operator: "ann"})
		dbtest.Must(t, err, "create")
		if !job.Held() {
			t.Fatal("the creator does not hold its job")
		}
		read := func(s *inbox.Store) inbox.ReplayJob {
			j, err := s.ReplayJob(ctx, job.ID)
			dbtest.Must(t, err, "read job")
			return j
		}
		bStore := other()
		jb := read(bStore)
		var held *inbox.JobHeldError
		if err := bStore.ClaimReplayJob(ctx, &jb, 500*time.Millisecond); err == nil || errors.As(err, &held) || !strings.Contains(err.Error(), "give at least 1s (inbox.MinJobStale)") {
			t.Fatalf("claim with a stale time under inbox.MinJobStale: %v", err)
		}
		err = bStore.ClaimReplayJob(ctx, &jb, stale)
		if !errors.As(err, &held) || err.Error() != "replay job 1 is being run (heartbeat 0s ago); wait, or if that process is gone, retry after 30s" {
			t.Fatalf("claim of a fresh job: %v", err)
		}
		b.clock.Add(20 * time.Second)
		dbtest.Must(t, a.BeatReplayJob(ctx, &job), "beat")
		b.clock.Add(20 * time.Second)
		if err := bStore.ClaimReplayJob(ctx, &jb, stale); !errors.As(err, &held) || held.Heartbeat != 20*time.Second {
			t.Fatalf("claim 20 s after a heartbeat: %v", err)
		}
		job.State = inbox.JobRunning
		dbtest.Must(t, a.UpdateReplayJob(ctx, &job), "counts")

		// A is killed: its heartbeat goes stale, B takes over.
		b.clock.Add(stale + time.Second)
		dbtest.Must(t, bStore.ClaimReplayJob(ctx, &jb, stale), "take over a stale job")
		if err := a.BeatReplayJob(ctx, &job); !errors.Is(err, inbox.ErrJobLost) || !strings.Contains(err.Error(), "taken over") {
			t.Fatalf("the first runner's heartbeat after the takeover: %v", err)
		}
		if err := a.UpdateReplayJob(ctx, &job); !errors.Is(err, inbox.ErrJobLost) {
			t.Fatalf("the first runner's write after the takeover: %v", err)
		}
		dbtest.Must(t, bStore.BeatReplayJob(ctx, &jb), "the new runner's heartbeat")

		// Claims at once, each round after the heartbeat went stale: one wins.
		for round := range 5 {
			b.clock.Add(stale + time.Second)
			var wg sync.WaitGroup
			var mu sync.Mutex
			won, refused := 0, 0
			for range 4 {
				s := other()
				j := read(s)
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := s.ClaimReplayJob(ctx, &j, stale)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case errors.As(err, new(*inbox.JobHeldError)):
						refused++
					default:
						t.Errorf("round %d: claim: %v", round, err)
					}
				}()
			}
			wg.Wait()
			if won != 1 || refused != 3 {
				t.Fatalf("round %d: %d claims won, %d refused; want 1 and 3", round, won, refused)
			}
		}

		// Released by a run that ended unfinished, or STOPPED: claimed at once.
		jc := read(a)
		b.clock.Add(stale + time.Second)
		dbtest.Must(t, a.ClaimReplayJob(ctx, &jc, stale), "claim")
		jc.StopReason = "the run ended unfinished: broker gone"
		dbtest.Must(t, a.UpdateReplayJob(ctx, &jc), "release")
		if jc.Held() {
			t.Fatal("a released job is still held")
		}
		jd := read(bStore)
		if jd.State != inbox.JobRunning || jd.StopReason == "" {
			t.Fatalf("released job: %+v", jd)
		}
		dbtest.Must(t, bStore.ClaimReplayJob(ctx, &jd, stale), "claim a released job")
		jd.State, jd.StopReason = inbox.JobStopped, "too many"
		dbtest.Must(t, bStore.UpdateReplayJob(ctx, &jd), "stop")
		je := read(a)
		dbtest.Must(t, a.ClaimReplayJob(ctx, &je, stale), "claim a stopped job")

		// Abandon: refused while held; then the items reopened, not sent.
		plantRows(t, db, map[string]string{"d-1": "DEAD_LETTERED", "d-2": "DEAD_LETTERED"})
		for _, id := range []string{"d-1", "d-2"} {
			_, err := a.ReopenForJob(ctx, job.ID, id, consumerName, false)
			dbtest.Must(t, err, "reopen %s", id)
		}
		dbtest.Must(t, a.MarkItemSent(ctx, job.ID, "d-1", consumerName), "mark d-1")
		if _, _, err := bStore.AbandonReplayJob(ctx, job.ID, "bob", stale); !errors.As(err, &held) {
			t.Fatalf("abandon of a held job: %v", err)
		}
		b.clock.Add(stale + time.Second)
		got, unsent, err := bStore.AbandonReplayJob(ctx, job.ID, "bob", stale)
		dbtest.Must(t, err, "abandon")
		if got.State != inbox.JobAbandoned || got.StopReason != "abandoned by bob" || got.Replayed != 1 || len(unsent) != 1 || unsent[0].EventID != "d-2" {
			t.Fatalf("abandoned: %+v, reopened not sent %v", got, unsent)
		}
		if err := a.BeatReplayJob(ctx, &je); !errors.Is(err, inbox.ErrJobLost) || !strings.Contains(err.Error(), "abandoned (abandoned by bob)") {
			t.Fatalf("the runner's heartbeat after the abandon: %v", err)
		}
		jf := read(a)
		if err := a.ClaimReplayJob(ctx, &jf, stale); !errors.Is(err, inbox.ErrJobClosed) || !strings.Contains(err.Error(), "ABANDONED") {
			t.Fatalf("claim of an abandoned job: %v", err)
		}
		if _, _, err := a.AbandonReplayJob(ctx, job.ID, "bob", stale); !errors.Is(err, inbox.ErrJobClosed) {
			t.Fatalf("second abandon: %v", err)
		}
		if _, _, err := a.AbandonReplayJob(ctx, 99, "bob", stale); !errors.Is(err, inbox.ErrNoSuchJob) {
			t.Fatalf("abandon of no job: %v", err)
		}
		// DONE is closed too.
		done, err := a.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "DLQ.q", Selection: "{}", Operator: "ann"})
		dbtest.Must(t, err, "create 2")
		done.State = inbox.JobDone
		dbtest.Must(t, a.UpdateReplayJob(ctx, &done), "done")
		dd, err := a.ReplayJob(ctx, done.ID)
		dbtest.Must(t, err, "read job 2")
		if err := a.ClaimReplayJob(ctx, &dd, stale); !errors.Is(err, inbox.ErrJobClosed) {
			t.Fatalf("claim of a DONE job: %v", err)
		}
	})
}

// plantRows inserts a row of consumerName per event id in its status, with
// LAST_ERROR 'boom' and 5 attempts.
func plantRows(t *testing.T, db *dbtest.DB, rows map[string]string) {
	t.Helper()
	d, _ := inbox.DialectByName(db.Backend)
	for id, status := range rows {
		_, err := db.ExecContext(context.Background(), d.Rebind(`INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, LAST_ERROR, ATTEMPTS) VALUES (?, ?, ?, 'boom', 5)`), id, consumerName, status)
		dbtest.Must(t, err, "plant %s", id)
	}
}
