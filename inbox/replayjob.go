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
// none), STATE (JobRunning, JobDone, JobStopped, JobAbandoned), the counts
// REPLAYED, SKIPPED and FAILED_AGAIN, STOP_REASON, CREATED_AT and
// UPDATED_AT. While a job is JobRunning, UPDATED_AT is its runner's
// heartbeat and claim (see ClaimReplayJob) and a STOP_REASON says that its
// last runner ended without finishing it (and released it). Migration step
// 9 creates it; it is shared by the inbox tables of a schema, like
// ActionTable.
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
	// JobRunning: the job runs (its runner keeps UPDATED_AT fresh), or its
	// process died (kill -9, a lost connection: the heartbeat goes stale)
	// or ended on an error (StopReason says which) before it finished;
	// resume it.
	JobRunning = "RUNNING"
	// JobDone: every selected dead letter found was replayed or left with
	// its reason.
	JobDone = "DONE"
	// JobStopped: the job stopped itself (StopReason), between two events:
	// too many replayed events failed again.
	JobStopped = "STOPPED"
	// JobAbandoned: an operator gave the job up (AbandonReplayJob); it is
	// not resumed, and a new job of its queue may start.
	JobAbandoned = "ABANDONED"
)

// DefaultJobStale is how long a replay job's heartbeat stays fresh: a
// runner writes it far more often (ReplayJobBeat), and another process
// takes the job over (ClaimReplayJob) or abandons it only when its last
// heartbeat is older than this.
const DefaultJobStale = 30 * time.Second

// MinJobStale is the shortest stale time a replay job takes: a runner
// writes its heartbeat every sixth of it (ReplayJobBeat), and the clocks
// of two processes that judge it differ by more than a shorter time
// allows for.
const MinJobStale = time.Second

// ReplayJobBeat is how often a runner of a job with stale time stale
// writes its heartbeat: a sixth of it, at most every 2 s, so that a few
// missed writes do not make a live runner's job look abandoned.
func ReplayJobBeat(stale time.Duration) time.Duration {
	return min(stale/6, 2*time.Second)
}

// JobHeldError is returned by ClaimReplayJob and AbandonReplayJob while
// another runner holds the job: its heartbeat is younger than the stale
// time.
type JobHeldError struct {
	ID int64
	// Heartbeat is how long ago the runner's last heartbeat was written
	// (by the store's clock and the runner's).
	Heartbeat time.Duration
	// Stale is the stale time the claim was judged by.
	Stale time.Duration
}

func (e *JobHeldError) Error() string {
	age := max(e.Heartbeat, 0)
	wait := max(e.Stale-age, time.Second)
	return fmt.Sprintf("replay job %d is being run (heartbeat %s ago); wait, or if that process is gone, retry after %s",
		e.ID, age.Round(time.Second), wait.Round(time.Second))
}

// ErrJobLost is returned to a runner whose claim on its job is gone: it
// did not write its heartbeat for the stale time and another process took
// the job over, or an operator abandoned it. The runner must stop.
var ErrJobLost = errors.New("inbox: the replay job's claim was lost")

// ErrJobClosed is returned by ClaimReplayJob and AbandonReplayJob for a
// job that is DONE or ABANDONED.
var ErrJobClosed = errors.New("inbox: the replay job is closed")

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
	// UpdatedAt is the last write of the row: while the job is RUNNING,
	// its runner's last heartbeat.
	UpdatedAt time.Time `json:"updatedAt"`

	// held is the UPDATED_AT this process wrote last as the job's runner
	// (zero: it holds no claim): every later write of the runner is
	// conditional on it, so a runner whose job was taken over writes
	// nothing.
	held time.Time
}

// Held tells whether this copy of the job holds the runner's claim
// (CreateReplayJob, ClaimReplayJob), as far as this process knows.
func (j *ReplayJob) Held() bool { return !j.held.IsZero() }

// ErrNoSuchJob is returned by ReplayJob for an id no job of the table has.
var ErrNoSuchJob = errors.New("inbox: no such replay job")

// CreateReplayJob records a new job (state JobRunning) and returns it with
// its id: the highest id of the schema plus one, taken by the primary key
// (two jobs created at once cannot share one; the loser takes the next).
// The job returned holds the runner's claim (see ClaimReplayJob).
func (s *Store) CreateReplayJob(ctx context.Context, j ReplayJob) (ReplayJob, error) {
	if strings.TrimSpace(j.Operator) == "" {
		return j, errors.New("inbox: create a replay job: the operator is empty (give --operator NAME or set $USER)")
	}
	if len(j.Selection) > maxJobSelection {
		return j, fmt.Errorf("inbox: create a replay job: the selection is %d characters, at most %d fit", len(j.Selection), maxJobSelection)
	}
	j.Table, j.State, j.CreatedAt = s.cfg.Table, JobRunning, s.stamp(time.Time{})
	j.UpdatedAt, j.held = j.CreatedAt, j.CreatedAt
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
// items first (JobProgress), so they are true after a resume too. Only
// the job's runner writes it: j must hold the claim, and the write is
// conditional on it (ErrJobLost when the job was taken over or
// abandoned). A write that ends the run (a state other than JobRunning,
// or a StopReason: the run ended unfinished) releases the claim.
func (s *Store) UpdateReplayJob(ctx context.Context, j *ReplayJob) error {
	if j.held.IsZero() {
		return fmt.Errorf("%w: update replay job %d: this process does not run it (claim it with ClaimReplayJob)", ErrJobLost, j.ID)
	}
	var err error
	if j.Replayed, j.FailedAgain, err = s.JobProgress(ctx, j.ID); err != nil {
		return err
	}
	next := s.stamp(j.held)
	q := s.d.Rebind(`UPDATE ` + ReplayJobTable + ` SET STATE = ?, REPLAYED = ?, SKIPPED = ?, FAILED_AGAIN = ?, STOP_REASON = ?, UPDATED_AT = ? WHERE JOB_ID = ? AND STATE = 'RUNNING' AND UPDATED_AT = ?`)
	res, err := s.db.ExecContext(ctx, q, j.State, j.Replayed, j.Skipped, j.FailedAgain, nullString(shortDetail(j.StopReason)), s.t(next), j.ID, s.t(j.held))
	if err != nil {
		return fmt.Errorf("inbox: update replay job %d: %w", j.ID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return s.lost(ctx, j)
	}
	j.UpdatedAt, j.held = next, next
	if j.State != JobRunning || j.StopReason != "" {
		j.held = time.Time{}
	}
	return nil
}

// stamp is the store's clock cut to microseconds (what every dialect's
// TIMESTAMP keeps, so that a stamp written compares equal when read back),
// and later than after.
func (s *Store) stamp(after time.Time) time.Time {
	t := s.now().Truncate(time.Microsecond)
	if !t.After(after) {
		t = after.Add(time.Microsecond)
	}
	return t
}

// jobClaimable is the condition on a job row that no runner holds: STOPPED,
// or RUNNING with a heartbeat older than the cut-off (the bound
// parameter) or released by its last runner (a STOP_REASON).
const jobClaimable = `(STATE = 'STOPPED' OR (STATE = 'RUNNING' AND (UPDATED_AT IS NULL OR UPDATED_AT < ? OR STOP_REASON IS NOT NULL)))`

// ClaimReplayJob makes this process j's runner: one conditional UPDATE
// that sets the job RUNNING with a new UPDATED_AT, and that succeeds only
// while no other runner holds it (the job is STOPPED, or RUNNING with a
// heartbeat older than stale, DefaultJobStale when 0, or released), so of
// two processes claiming at once one wins. The runner then writes its
// heartbeat (BeatReplayJob) every ReplayJobBeat(stale) and its counts
// (UpdateReplayJob), each conditional on the UPDATED_AT it wrote last, and
// stops when a write finds it changed (ErrJobLost): a runner killed with
// kill -9 leaves a heartbeat that goes stale, and its job is taken over
// after stale without an operator. A job held by a live runner is refused
// with *JobHeldError (its heartbeat's age and the time to wait), a DONE or
// ABANDONED one with ErrJobClosed. When j holds the claim already (a job
// CreateReplayJob returned), the claim is checked and renewed. The
// processes' clocks are compared: they must agree to well within stale.
func (s *Store) ClaimReplayJob(ctx context.Context, j *ReplayJob, stale time.Duration) error {
	if stale <= 0 {
		stale = DefaultJobStale
	}
	if stale < MinJobStale {
		return fmt.Errorf("inbox: claim replay job %d: stale time %s: give at least %s (inbox.MinJobStale), the same for every process that runs the job", j.ID, stale, MinJobStale)
	}
	if !j.held.IsZero() {
		return s.BeatReplayJob(ctx, j)
	}
	now := s.stamp(time.Time{})
	q := s.d.Rebind(`UPDATE ` + ReplayJobTable + ` SET STATE = 'RUNNING', STOP_REASON = NULL, UPDATED_AT = ? WHERE JOB_ID = ? AND TABLE_NAME = ? AND ` + jobClaimable)
	res, err := s.db.ExecContext(ctx, q, s.t(now), j.ID, s.cfg.Table, s.t(now.Add(-stale)))
	if err != nil {
		return fmt.Errorf("inbox: claim replay job %d (run inboxctl migrate): %w", j.ID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return s.notClaimable(ctx, j.ID, now, stale)
	}
	j.held, j.State, j.StopReason, j.UpdatedAt = now, JobRunning, "", now
	return nil
}

// notClaimable says why job id could not be claimed or abandoned at now.
func (s *Store) notClaimable(ctx context.Context, id int64, now time.Time, stale time.Duration) error {
	cur, err := s.ReplayJob(ctx, id)
	if err != nil {
		return err
	}
	switch cur.State {
	case JobDone, JobAbandoned:
		why := ""
		if cur.StopReason != "" {
			why = " (" + cur.StopReason + ")"
		}
		return fmt.Errorf("%w: replay job %d is %s%s", ErrJobClosed, id, cur.State, why)
	}
	return &JobHeldError{ID: id, Heartbeat: now.Sub(cur.UpdatedAt), Stale: stale}
}

// BeatReplayJob writes the heartbeat of j's runner: a new UPDATED_AT,
// conditional on the one it wrote last; ErrJobLost when that changed (the
// job was taken over or abandoned: the runner must stop).
func (s *Store) BeatReplayJob(ctx context.Context, j *ReplayJob) error {
	if j.held.IsZero() {
		return fmt.Errorf("%w: replay job %d: this process does not run it", ErrJobLost, j.ID)
	}
	next := s.stamp(j.held)
	q := s.d.Rebind(`UPDATE ` + ReplayJobTable + ` SET UPDATED_AT = ? WHERE JOB_ID = ? AND STATE = 'RUNNING' AND UPDATED_AT = ?`)
	res, err := s.db.ExecContext(ctx, q, s.t(next), j.ID, s.t(j.held))
	if err != nil {
		return fmt.Errorf("inbox: heartbeat of replay job %d: %w", j.ID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return s.lost(ctx, j)
	}
	j.held, j.UpdatedAt = next, next
	return nil
}

// lost drops j's claim and says who has the job now.
func (s *Store) lost(ctx context.Context, j *ReplayJob) error {
	j.held = time.Time{}
	cur, err := s.ReplayJob(ctx, j.ID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: replay job %d: %w", ErrJobLost, j.ID, err)
	case cur.State == JobAbandoned:
		return fmt.Errorf("%w: replay job %d was abandoned (%s)", ErrJobLost, j.ID, cur.StopReason)
	}
	return fmt.Errorf("%w: replay job %d is %s, taken over by another runner (this one's heartbeat was stale)", ErrJobLost, j.ID, cur.State)
}

// AbandonReplayJob gives job id up for operator: state JobAbandoned, its
// stop reason "abandoned by OPERATOR", its counts as its items are. Like a
// claim it is one conditional UPDATE, refused while a runner holds the job
// (*JobHeldError; stale as for ClaimReplayJob) and for a DONE or ABANDONED
// job (ErrJobClosed). It returns the job and the events it reopened but
// never marked sent (ItemReopened): their rows are TECHNICAL_FAILURE, and
// their messages may or may not have been sent; the operator checks each
// (its dead letter may still be on the queue).
func (s *Store) AbandonReplayJob(ctx context.Context, id int64, operator string, stale time.Duration) (ReplayJob, []EventKey, error) {
	if strings.TrimSpace(operator) == "" {
		return ReplayJob{}, nil, errors.New("inbox: abandon a replay job: the operator is empty (give --operator NAME or set $USER)")
	}
	if stale <= 0 {
		stale = DefaultJobStale
	}
	sent, again, err := s.JobProgress(ctx, id)
	if err != nil {
		return ReplayJob{}, nil, err
	}
	now := s.stamp(time.Time{})
	q := s.d.Rebind(`UPDATE ` + ReplayJobTable + ` SET STATE = 'ABANDONED', STOP_REASON = ?, REPLAYED = ?, FAILED_AGAIN = ?, UPDATED_AT = ? WHERE JOB_ID = ? AND TABLE_NAME = ? AND ` + jobClaimable)
	res, err := s.db.ExecContext(ctx, q, shortDetail("abandoned by "+cut(operator, maxOperator)), sent, again, s.t(now), id, s.cfg.Table, s.t(now.Add(-stale)))
	if err != nil {
		return ReplayJob{}, nil, fmt.Errorf("inbox: abandon replay job %d (run inboxctl migrate): %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ReplayJob{}, nil, s.notClaimable(ctx, id, now, stale)
	}
	j, err := s.ReplayJob(ctx, id)
	if err != nil {
		return j, nil, err
	}
	unsent, err := s.jobItems(ctx, id, ItemReopened)
	return j, unsent, err
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
		if res, err = s.q.resetForReplay.exec(ctx, tx, key.key(arg{"now", s.t(now)})); err == nil {
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
		err := s.q.selectStatus.queryRow(ctx, tx, key.key()).Scan(&status, &attempts)
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
	return s.eventKeys(ctx, "failed events", `SELECT EVENT_ID, CONSUMER_NAME FROM `+s.cfg.Table+` WHERE `+where+` ORDER BY `+s.lastChanged()+`, EVENT_ID`, args...)
}

// eventKeys runs q (rebound for the dialect), which selects EVENT_ID and
// CONSUMER_NAME, and returns the keys; what names it in errors.
func (s *Store) eventKeys(ctx context.Context, what, q string, args ...any) ([]EventKey, error) {
	rows, err := s.db.QueryContext(ctx, s.d.Rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", what, err)
	}
	defer rows.Close()
	var out []EventKey
	for rows.Next() {
		var k EventKey
		if err := rows.Scan(&k.EventID, &k.ConsumerName); err != nil {
			return nil, fmt.Errorf("inbox: %s: %w", what, err)
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
	return s.jobItems(ctx, jobID, "")
}

// jobItems returns the keys of a job's items in state ("": all).
func (s *Store) jobItems(ctx context.Context, jobID int64, state string) ([]EventKey, error) {
	q, args := `SELECT EVENT_ID, CONSUMER_NAME FROM `+ReplayItemTable+` WHERE JOB_ID = ?`, []any{jobID}
	if state != "" {
		q, args = q+` AND STATE = ?`, append(args, state)
	}
	return s.eventKeys(ctx, fmt.Sprintf("events of replay job %d", jobID), q+` ORDER BY EVENT_ID, CONSUMER_NAME`, args...)
}
