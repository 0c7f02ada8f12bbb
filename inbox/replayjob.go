package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// ReplayJobTable records the bulk replays (consumer.Replay with a Job),
// one row per job: JOB_ID (primary key), TABLE_NAME, QUEUE_NAME (the
// dead-letter queue), SELECTION (what was selected, as the command that
// resumes the job reads it back), OPERATOR, RATE, MAX_EVENTS (--limit, 0:
// none), STATE (JobRunning, JobDone, JobStopped), the counts REPLAYED,
// SKIPPED and FAILED_AGAIN, STOP_REASON, CREATED_AT and UPDATED_AT.
// Migration step 9 creates it; it is shared by the inbox tables of a
// schema, like ActionTable.
const ReplayJobTable = "INBOXKIT_REPLAY_JOB"

// ReplayItemTable records each event a replay job reopened: JOB_ID,
// EVENT_ID, CONSUMER_NAME (the primary key: an event is reopened at most
// once per job, by the database's constraint, rule 1), STATE
// (ItemReopened, then ItemSent), REOPENED_AT and SENT_AT. Migration step 9
// creates it.
const ReplayItemTable = "INBOXKIT_REPLAY_ITEM"

const maxJobSelection = 1000

// The states of a replay job (ReplayJob.State).
const (
	// JobRunning: the job runs, or its process died (kill -9, a lost
	// connection) before it finished; resume it.
	JobRunning = "RUNNING"
	// JobDone: every selected dead letter found was replayed or left with
	// its reason.
	JobDone = "DONE"
	// JobStopped: the job stopped itself (StopReason), between two events:
	// too many replayed events failed again.
	JobStopped = "STOPPED"
)

// The states of a replay job's item.
const (
	// ItemReopened: the event's row was reopened (in the transaction that
	// wrote the item); its message may or may not have been sent.
	ItemReopened = "REOPENED"
	// ItemSent: the message was sent and the broker confirmed it.
	ItemSent = "SENT"
)

// ReplayJob is one row of ReplayJobTable.
type ReplayJob struct {
	ID    int64  `json:"id"`
	Table string `json:"table"`
	Queue string `json:"queue"`
	// Selection is what the job replays, in the caller's words (inboxctl
	// writes its flags as JSON and reads them back on --resume).
	Selection string `json:"selection"`
	Operator  string `json:"operator"`
	Rate      string `json:"rate,omitempty"`
	Limit     int64  `json:"limit"`
	State     string `json:"state"`
	// Replayed counts the events sent (items SENT), Skipped the selected
	// dead letters left on the queue with a reason, FailedAgain the
	// replayed events whose rows are failed again (FailureGroups' failed
	// rows).
	Replayed    int64     `json:"replayed"`
	Skipped     int64     `json:"skipped"`
	FailedAgain int64     `json:"failedAgain"`
	StopReason  string    `json:"stopReason,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// ErrNoSuchJob is returned by ReplayJob for an id no job of the table has.
var ErrNoSuchJob = errors.New("inbox: no such replay job")

// CreateReplayJob records a new job (state JobRunning) and returns it with
// its id: the highest id of the schema plus one, taken by the primary key
// (two jobs created at once cannot share one; the loser takes the next).
func (s *Store) CreateReplayJob(ctx context.Context, j ReplayJob) (ReplayJob, error) {
	if strings.TrimSpace(j.Operator) == "" {
		return j, errors.New("inbox: create a replay job: the operator is empty (give --operator NAME or set $USER)")
	}
	if len(j.Selection) > maxJobSelection {
		return j, fmt.Errorf("inbox: create a replay job: the selection is %d characters, at most %d fit", len(j.Selection), maxJobSelection)
	}
	j.Table, j.State, j.CreatedAt = s.cfg.Table, JobRunning, s.now()
	j.UpdatedAt = j.CreatedAt
	next := `SELECT COALESCE(MAX(JOB_ID), 0) + 1 FROM ` + ReplayJobTable
	ins := s.d.Rebind(`INSERT INTO ` + ReplayJobTable + ` (JOB_ID, TABLE_NAME, QUEUE_NAME, SELECTION, OPERATOR, RATE, MAX_EVENTS, STATE, CREATED_AT, UPDATED_AT) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	for range 5 {
		if err := s.db.QueryRowContext(ctx, next).Scan(&j.ID); err != nil {
			return j, fmt.Errorf("inbox: create a replay job in %s (run inboxctl migrate): %w", ReplayJobTable, err)
		}
		_, err := s.db.ExecContext(ctx, ins, j.ID, j.Table, j.Queue, j.Selection, cut(j.Operator, maxOperator), nullString(j.Rate), j.Limit, j.State, s.t(j.CreatedAt), s.t(j.UpdatedAt))
		if s.d.IsDuplicate(err) {
			continue // another job took the id
		}
		if err != nil {
			return j, fmt.Errorf("inbox: create a replay job in %s (run inboxctl migrate): %w", ReplayJobTable, err)
		}
		return j, nil
	}
	return j, fmt.Errorf("inbox: create a replay job: the next id was taken five times in a row; try again")
}

const jobColumns = `JOB_ID, TABLE_NAME, QUEUE_NAME, SELECTION, OPERATOR, RATE, MAX_EVENTS, STATE, REPLAYED, SKIPPED, FAILED_AGAIN, STOP_REASON, CREATED_AT, UPDATED_AT`

func scanJob(sc rowScanner) (ReplayJob, error) {
	var j ReplayJob
	var rate, reason sql.NullString
	var created, updated dbTime
	if err := sc.Scan(&j.ID, &j.Table, &j.Queue, &j.Selection, &j.Operator, &rate, &j.Limit, &j.State, &j.Replayed, &j.Skipped, &j.FailedAgain, &reason, &created, &updated); err != nil {
		return j, err
	}
	j.Rate, j.StopReason, j.CreatedAt, j.UpdatedAt = rate.String, reason.String, created.Time, updated.Time
	return j, nil
}

// ReplayJob returns the job with the id, of this store's table; a RUNNING
// job's counts are read from its items.
func (s *Store) ReplayJob(ctx context.Context, id int64) (ReplayJob, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, s.d.Rebind(`SELECT `+jobColumns+` FROM `+ReplayJobTable+` WHERE JOB_ID = ? AND TABLE_NAME = ?`), id, s.cfg.Table))
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("%w %d for table %s: list them with inboxctl dlq replay --jobs", ErrNoSuchJob, id, s.cfg.Table)
	}
	if err != nil {
		return j, fmt.Errorf("inbox: read replay job %d from %s (run inboxctl migrate): %w", id, ReplayJobTable, err)
	}
	return j, s.liveCounts(ctx, &j)
}

// liveCounts reads a RUNNING job's counts from its items: its row is
// written at most once a second, and not at all after a kill.
func (s *Store) liveCounts(ctx context.Context, j *ReplayJob) error {
	if j.State != JobRunning {
		return nil
	}
	var err error
	j.Replayed, j.FailedAgain, err = s.JobProgress(ctx, j.ID)
	return err
}

// ReplayJobs returns the jobs of this store's table, the newest first; a
// RUNNING job's counts are read from its items.
func (s *Store) ReplayJobs(ctx context.Context) ([]ReplayJob, error) {
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(`SELECT `+jobColumns+` FROM `+ReplayJobTable+` WHERE TABLE_NAME = ? ORDER BY JOB_ID DESC`), s.cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the replay jobs from %s (run inboxctl migrate): %w", ReplayJobTable, err)
	}
	defer rows.Close()
	out := []ReplayJob{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("inbox: read the replay jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the replay jobs: %w", err)
	}
	rows.Close()
	for i := range out {
		if err := s.liveCounts(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UpdateReplayJob writes j's state, counts and stop reason, and stamps
// UPDATED_AT; the counts Replayed and FailedAgain are read from the
// items first (JobProgress), so they are true after a resume too.
func (s *Store) UpdateReplayJob(ctx context.Context, j *ReplayJob) error {
	var err error
	if j.Replayed, j.FailedAgain, err = s.JobProgress(ctx, j.ID); err != nil {
		return err
	}
	j.UpdatedAt = s.now()
	q := s.d.Rebind(`UPDATE ` + ReplayJobTable + ` SET STATE = ?, REPLAYED = ?, SKIPPED = ?, FAILED_AGAIN = ?, STOP_REASON = ?, UPDATED_AT = ? WHERE JOB_ID = ?`)
	if _, err := s.db.ExecContext(ctx, q, j.State, j.Replayed, j.Skipped, j.FailedAgain, nullString(shortDetail(j.StopReason)), s.t(j.UpdatedAt), j.ID); err != nil {
		return fmt.Errorf("inbox: update replay job %d: %w", j.ID, err)
	}
	return nil
}

// JobProgress counts a job's events sent (items SENT) and, of those, the
// ones whose rows are failed again: DEAD_LETTERED, REJECTED or
// TECHNICAL_FAILURE at the backout threshold, as FailureGroups counts
// failures (a reopened row is TECHNICAL_FAILURE with ATTEMPTS 0 until the
// consumer ran it).
func (s *Store) JobProgress(ctx context.Context, jobID int64) (sent, failedAgain int64, err error) {
	q := s.d.Rebind(`SELECT COUNT(*) FROM ` + ReplayItemTable + ` WHERE JOB_ID = ? AND STATE = 'SENT'`)
	if err := s.db.QueryRowContext(ctx, q, jobID).Scan(&sent); err != nil {
		return 0, 0, fmt.Errorf("inbox: progress of replay job %d: %w", jobID, err)
	}
	cond := strings.ReplaceAll(s.failedRows(), "ATTEMPTS", "t.ATTEMPTS")
	cond = strings.ReplaceAll(cond, s.d.exactStatus(), strings.ReplaceAll(s.d.exactStatus(), "STATUS", "t.STATUS"))
	q = s.d.Rebind(`SELECT COUNT(*) FROM ` + ReplayItemTable + ` i JOIN ` + s.cfg.Table + ` t ON t.EVENT_ID = i.EVENT_ID AND t.CONSUMER_NAME = i.CONSUMER_NAME
	WHERE i.JOB_ID = ? AND i.STATE = 'SENT' AND ` + cond)
	if err := s.db.QueryRowContext(ctx, q, jobID, s.cfg.Retry.MaxAttempts).Scan(&failedAgain); err != nil {
		return 0, 0, fmt.Errorf("inbox: progress of replay job %d: %w", jobID, err)
	}
	return sent, failedAgain, nil
}

// ReplayItem is what ReopenForJob found or did.
type ReplayItem struct {
	// State is the item's state: ItemReopened (by this call when New) or
	// ItemSent; "" when the row was not reopened (Refused).
	State string
	// New: this call reopened the row and wrote the item, in one
	// transaction.
	New bool
	// ReopenedAt is when the item was written (the store's clock).
	ReopenedAt time.Time
	// Refused: the row is in a status a replay does not reopen (Status);
	// nothing was written.
	Refused bool
	Status  inboxkit.Status
}

// ReopenForJob reopens the row of a dead letter for job jobID and records
// the item, in one transaction: the item's INSERT (its primary key
// (JOB_ID, EVENT_ID, CONSUMER_NAME) refuses a second one), then the row's
// reset: DEAD_LETTERED (or, with rejected, REJECTED, see ReopenRejected)
// becomes TECHNICAL_FAILURE with ATTEMPTS 0 and REPLAY_COUNT+1. A row that
// is TECHNICAL_FAILURE already, or no row, needs no reset: the item is
// written all the same. Any other status (PROCESSED) writes nothing and
// returns Refused with it. When the job has the item already (an earlier
// run of the job, killed, or a second copy of the dead letter), nothing is
// written and the item is returned as it is (New false): the caller sends
// an ItemReopened one (its send may not have happened) and does not send an
// ItemSent one again.
func (s *Store) ReopenForJob(ctx context.Context, jobID int64, eventID, consumerName string, rejected bool) (ReplayItem, error) {
	now := s.now()
	tx, err := s.begin(ctx, "reopen for replay job", nil)
	if err != nil {
		return ReplayItem{}, err
	}
	defer tx.rollback()
	ins := s.d.Rebind(`INSERT INTO ` + ReplayItemTable + ` (JOB_ID, EVENT_ID, CONSUMER_NAME, STATE, REOPENED_AT) VALUES (?, ?, ?, 'REOPENED', ?)`)
	if _, err := tx.ExecContext(ctx, ins, jobID, eventID, consumerName, s.t(now)); err != nil {
		if !s.d.IsDuplicate(err) {
			return ReplayItem{}, fmt.Errorf("inbox: record replay item of job %d (run inboxctl migrate): %w", jobID, err)
		}
		tx.rollback() // PostgreSQL: the duplicate aborted the transaction
		var it ReplayItem
		var at dbTime
		q := s.d.Rebind(`SELECT STATE, REOPENED_AT FROM ` + ReplayItemTable + ` WHERE JOB_ID = ? AND EVENT_ID = ? AND CONSUMER_NAME = ?`)
		if err := s.db.QueryRowContext(ctx, q, jobID, eventID, consumerName).Scan(&it.State, &at); err != nil {
			return ReplayItem{}, fmt.Errorf("inbox: read replay item of job %d: %w", jobID, err)
		}
		it.ReopenedAt = at.Time
		return it, nil
	}
	key := Entry{EventID: eventID, ConsumerName: consumerName}
	var ok bool
	if rejected {
		ok, err = s.reopenRejectedOn(ctx, tx, eventID, consumerName)
	} else {
		var res sql.Result
		if res, err = s.q.resetForReplay.exec(ctx, tx, key.key(args{"now": s.t(now)})); err == nil {
			n, _ := res.RowsAffected()
			ok = n == 1
		}
	}
	if err != nil {
		return ReplayItem{}, fmt.Errorf("inbox: reopen for replay job %d: %w", jobID, err)
	}
	if !ok {
		var status string
		var attempts int
		err := s.q.selectStatus.queryRow(ctx, tx, key.key(nil)).Scan(&status, &attempts)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return ReplayItem{}, fmt.Errorf("inbox: reopen for replay job %d: %w", jobID, err)
		case inboxkit.Status(status) != inboxkit.StatusTechnicalFailure:
			return ReplayItem{Refused: true, Status: inboxkit.Status(status)}, nil // rolled back: no item
		}
	}
	if err := tx.commit(); err != nil {
		return ReplayItem{}, fmt.Errorf("inbox: reopen for replay job %d: commit: %w", jobID, err)
	}
	return ReplayItem{State: ItemReopened, New: true, ReopenedAt: now}, nil
}

// MarkItemSent records that the message of a job's item was sent and
// confirmed (ItemReopened -> ItemSent).
func (s *Store) MarkItemSent(ctx context.Context, jobID int64, eventID, consumerName string) error {
	q := s.d.Rebind(`UPDATE ` + ReplayItemTable + ` SET STATE = 'SENT', SENT_AT = ? WHERE JOB_ID = ? AND EVENT_ID = ? AND CONSUMER_NAME = ? AND STATE = 'REOPENED'`)
	if _, err := s.db.ExecContext(ctx, q, s.t(s.now()), jobID, eventID, consumerName); err != nil {
		return fmt.Errorf("inbox: mark replay item %s of job %d sent: %w", eventID, jobID, err)
	}
	return nil
}

// EventKey is the key of an inbox row.
type EventKey struct {
	EventID      string `json:"eventId"`
	ConsumerName string `json:"consumer"`
}

// FailedEvents returns the keys of the failed rows f selects (see
// FailureGroups), oldest change first: a replay's selection by time.
func (s *Store) FailedEvents(ctx context.Context, f FailureFilter) ([]EventKey, error) {
	where, args := s.filterWhere(f)
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(`SELECT EVENT_ID, CONSUMER_NAME FROM `+s.cfg.Table+` WHERE `+where+` ORDER BY `+s.lastChanged()+`, EVENT_ID`), args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: failed events: %w", err)
	}
	defer rows.Close()
	var out []EventKey
	for rows.Next() {
		var k EventKey
		if err := rows.Scan(&k.EventID, &k.ConsumerName); err != nil {
			return nil, fmt.Errorf("inbox: failed events: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// ArchiveGroup archives the rows of failure group id (among the rows f
// selects that are not archived): their ARCHIVED_AT is set, so that
// FailureGroups, GroupEvents and FailedEvents leave them out until
// RestoreGroup. A failure of the same group that comes later is not
// archived: the group shows again with it. A replay that reopens an
// archived row (by its event id) clears the mark. It returns the group and
// the event ids archived.
func (s *Store) ArchiveGroup(ctx context.Context, id string, f FailureFilter) (FailureGroup, []string, error) {
	f.Archived = false
	return s.setArchived(ctx, id, f, true)
}

// RestoreGroup is ArchiveGroup undone: the archived rows of group id (as
// FailureGroups lists them with FailureFilter.Archived) are shown again.
func (s *Store) RestoreGroup(ctx context.Context, id string, f FailureFilter) (FailureGroup, []string, error) {
	f.Archived = true
	return s.setArchived(ctx, id, f, false)
}

func (s *Store) setArchived(ctx context.Context, id string, f FailureFilter, archive bool) (FailureGroup, []string, error) {
	g, ids, err := s.GroupEvents(ctx, id, f)
	if err != nil {
		return g, nil, err
	}
	set, cond := "ARCHIVED_AT = ?", "ARCHIVED_AT IS NULL"
	val := s.t(s.now())
	if !archive {
		set, cond, val = "ARCHIVED_AT = NULL", "ARCHIVED_AT IS NOT NULL", nil
	}
	var done []string
	for len(ids) > 0 {
		n := min(len(ids), 200)
		batch := ids[:n]
		ids = ids[n:]
		q := `UPDATE ` + s.cfg.Table + ` SET ` + set + ` WHERE CONSUMER_NAME = ? AND ` + cond + ` AND EVENT_ID IN (?` + strings.Repeat(", ?", n-1) + `)`
		a := []any{}
		if val != nil {
			a = append(a, val)
		}
		a = append(a, g.ConsumerName)
		for _, ev := range batch {
			a = append(a, ev)
		}
		if _, err := s.db.ExecContext(ctx, s.d.Rebind(q), a...); err != nil {
			return g, done, fmt.Errorf("inbox: archive failure group %s: %w", id, err)
		}
		done = append(done, batch...)
	}
	return g, done, nil
}

// JobEvents returns the keys of a job's items (every event it reopened,
// sent or not): a resumed job takes their dead letters whatever its
// selection finds now, since a reopened row has left its failure group.
func (s *Store) JobEvents(ctx context.Context, jobID int64) ([]EventKey, error) {
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(`SELECT EVENT_ID, CONSUMER_NAME FROM `+ReplayItemTable+` WHERE JOB_ID = ?`), jobID)
	if err != nil {
		return nil, fmt.Errorf("inbox: events of replay job %d: %w", jobID, err)
	}
	defer rows.Close()
	var out []EventKey
	for rows.Next() {
		var k EventKey
		if err := rows.Scan(&k.EventID, &k.ConsumerName); err != nil {
			return nil, fmt.Errorf("inbox: events of replay job %d: %w", jobID, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
