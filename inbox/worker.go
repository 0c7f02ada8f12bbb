package inbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
)

// ErrLeaseLost is returned by Worker.Process when the worker no longer holds
// the lease of the entry when it wants to record the outcome: the lease
// expired and another worker claimed the entry. Everything the handler wrote
// was rolled back; the other worker's processing counts.
var ErrLeaseLost = errors.New("inbox: lease lost")

// MessageHandler runs the business change of one stored message inside the
// worker's transaction. It must do all its database writes through tx and
// must not commit or roll it back. Its error decides what happens, as for
// Handler: a business rejection records REJECTED (its writes rolled back),
// poison is dead-lettered, anything else is a technical failure retried
// after a backoff.
type MessageHandler func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error

// RejectFunc publishes a business rejection of a claimed entry; see
// WorkerConfig.RejectFunc.
type RejectFunc func(ctx context.Context, c Claimed, reason string, cause error) error

// DeadLetterFunc publishes a message to the dead-letter destination. It is
// called with the entry still leased and its DEAD_LETTERED transition not
// yet committed; the transition commits only when it returns nil. When it
// returns an error the entry is kept as TECHNICAL_FAILURE and dead-lettered
// on a later claim: nothing is lost. A crash between a successful publish
// and the commit publishes the message again later (at least once).
type DeadLetterFunc func(ctx context.Context, c Claimed, class inboxkit.Class, reason string, cause error) error

// Claimed is an entry a Worker holds under lease.
type Claimed struct {
	// Message is rebuilt from the stored row: ID, CorrelationID, Headers,
	// Body. Redelivered is true and DeliveryCount is Attempts from the
	// second claim on. Destination and BrokerMessageID are not stored.
	Message inboxkit.Message
	// ConsumerName is the consumer the entry belongs to.
	ConsumerName string
	// Attempts is the ATTEMPTS column after this claim (1 for the first).
	Attempts int
	// ReceivedAt is when Receive stored the entry (CREATED_AT).
	ReceivedAt time.Time
	// LeaseUntil is when the lease of this claim expires.
	LeaseUntil time.Time
	// Owner is the lease owner (the worker's Owner).
	Owner string
	// LastError, ErrorClass and ReasonCode describe the previous failed
	// attempt, if any.
	LastError  string
	ErrorClass inboxkit.Class
	ReasonCode string

	headerErr error
}

// WorkerConfig configures a Worker. The zero value of every optional field
// means its default.
type WorkerConfig struct {
	// ConsumerName selects the entries this worker processes. Required.
	ConsumerName string
	// HandleFunc is the business handler. Required.
	HandleFunc MessageHandler
	// DeadLetterFunc publishes poison messages and messages past the
	// backout threshold (the store's Config.Retry.MaxAttempts). Required.
	DeadLetterFunc DeadLetterFunc
	// RejectFunc, if set, publishes business rejections (e.g. to a reject
	// queue for clarification). It is called while the REJECTED row is
	// locked and uncommitted; when it fails, the rejection is not recorded
	// and the entry is retried after a backoff (at least once).
	RejectFunc RejectFunc
	// Owner names this worker in LEASE_OWNER; it must be unique among the
	// running workers. Defaults to hostname-pid-random, at most 80 bytes.
	Owner string
	// LeaseDuration is how long a claim is exclusive. A worker that takes
	// longer (or dies) loses the entry to the next claim after it expires,
	// and its late commit is refused with ErrLeaseLost. Keep it well above
	// the slowest handler. Defaults to 30s.
	LeaseDuration time.Duration
	// PollInterval is how long Run sleeps when it found nothing to claim.
	// Defaults to 1s.
	PollInterval time.Duration
	// ClaimSize is how many entries Run claims at a time (at least
	// BatchSize). Every entry of a claim must be processed within
	// LeaseDuration of the claim. Defaults to 10.
	ClaimSize int
	// BatchSize is how many claimed entries Run processes in one database
	// transaction: each handler behind its own savepoint, so that a
	// rejection or a failure rolls back only its own writes, and one
	// commit for the processed and rejected entries of the batch (failures
	// and dead letters are recorded in their own transactions). Fewer
	// commits: more throughput, and a failed commit hands the whole batch
	// back to the next claim after its lease. Defaults to 1: one
	// transaction per entry.
	BatchSize int
	// Logger receives Run's errors. Defaults to slog.Default().
	Logger *slog.Logger
	// BatchFunc, if set, is called by Run and RunOnce with the number of
	// entries of every batch before it is processed (for metrics).
	BatchFunc func(n int)
	// ObserveFunc, if set, is called by Run and RunOnce for every claimed
	// entry before it is processed: the entry is processed with the
	// context it returns, and the returned function is called once with
	// what Process returned (for metrics and traces; package consumer
	// passes its Observer's). Nil: nothing is observed.
	ObserveFunc func(ctx context.Context, c Claimed) (context.Context, func(Result, error))
}

func (c *WorkerConfig) setDefaults() {
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1
	}
	if c.ClaimSize == 0 {
		c.ClaimSize = 10
	}
	c.ClaimSize = max(c.ClaimSize, c.BatchSize)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *WorkerConfig) validate() error {
	switch {
	case !validConsumerName(c.ConsumerName):
		return fmt.Errorf("inbox: WorkerConfig.ConsumerName %q must be 1 to %d bytes", c.ConsumerName, MaxConsumerNameLength)
	case c.HandleFunc == nil:
		return errors.New("inbox: WorkerConfig.HandleFunc is nil")
	case c.DeadLetterFunc == nil:
		return errors.New("inbox: WorkerConfig.DeadLetterFunc is nil: a worker must be able to dead-letter")
	case len(c.Owner) > 80:
		return fmt.Errorf("inbox: WorkerConfig.Owner is %d bytes: at most 80 (the LEASE_OWNER column)", len(c.Owner))
	case c.LeaseDuration < 0:
		return fmt.Errorf("inbox: WorkerConfig.LeaseDuration is negative (%s)", c.LeaseDuration)
	case c.PollInterval < 0:
		return fmt.Errorf("inbox: WorkerConfig.PollInterval is negative (%s)", c.PollInterval)
	case c.BatchSize < 0 || c.BatchSize > 1000:
		return fmt.Errorf("inbox: WorkerConfig.BatchSize is %d: it must be between 1 and 1000", c.BatchSize)
	case c.ClaimSize < 0 || c.ClaimSize > 1000:
		return fmt.Errorf("inbox: WorkerConfig.ClaimSize is %d: it must be between 1 and 1000", c.ClaimSize)
	}
	return nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	if len(host) > 50 {
		host = host[:50]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
}

// Worker processes the entries Receive stored, for one consumer: it claims
// them under a lease, runs the handler in a transaction that also records
// the outcome, and retries technical failures after the store's
// Retry.Redelivery backoff until Retry.MaxAttempts, then dead-letters them.
//
// A Worker is one sequence of claims: Run processes one entry (or one
// batch of WorkerConfig.BatchSize entries) at a time. For
// concurrency start several Workers, in one process or many; they share the
// table safely. Claim and Process may be called directly instead of Run.
type Worker struct {
	s   *Store
	cfg WorkerConfig
	q   *queueQueries
}

// NewWorker returns a Worker on the store's table.
func (s *Store) NewWorker(cfg WorkerConfig) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Worker{s: s, cfg: cfg, q: &s.qq}, nil
}

// Owner returns the worker's lease owner name.
func (w *Worker) Owner() string { return w.cfg.Owner }

// Claim takes up to n entries (n <= 0: ClaimSize) of the worker's consumer
// that are RECEIVED, TECHNICAL_FAILURE with NEXT_ATTEMPT_AT passed, or
// IN_PROGRESS with an expired lease, and makes them IN_PROGRESS under this
// worker's lease, raising ATTEMPTS, in one transaction.
//
// PostgreSQL and MariaDB select the entries with FOR UPDATE SKIP LOCKED, so
// concurrent claims take different entries without waiting for each other.
// SQLite claims with one UPDATE ... RETURNING; its writers are serialized.
// Each claim must be passed to Process (or Release) within LeaseDuration.
func (w *Worker) Claim(ctx context.Context, n int) ([]Claimed, error) {
	if n <= 0 {
		n = w.cfg.ClaimSize
	}
	s := w.s
	now := s.now()
	until := now.Add(w.cfg.LeaseDuration)
	tx, err := s.begin(ctx, "claim", s.d.lockingTx)
	if err != nil {
		return nil, err
	}
	defer tx.rollback()

	claim := args{"consumer": w.cfg.ConsumerName, "owner": w.cfg.Owner, "until": s.t(until), "now": s.t(now), "n": n}
	out, err := w.scanClaims(tx.QueryContext(ctx, w.q.claim.text, w.q.claim.bind(claim)...))
	if err != nil {
		return nil, err
	}
	if !w.q.claimUpdates && len(out) > 0 {
		// The SELECT locked the rows; claim them by id.
		ids := make([]string, len(out))
		for i := range out {
			out[i].Attempts++ // the SELECT read the value before the claim
			ids[i] = "@id" + strconv.Itoa(i)
			claim["id"+strconv.Itoa(i)] = out[i].Message.ID
		}
		res, err := compile(s.d, w.q.claimUpdate+strings.Join(ids, ", ")+")").exec(ctx, tx, claim)
		if err != nil {
			return nil, fmt.Errorf("inbox: claim: %w", err)
		}
		if k, err := res.RowsAffected(); err != nil || int(k) != len(out) {
			return nil, fmt.Errorf("inbox: claim: updated %d of %d locked rows (%v)", k, len(out), err)
		}
	}
	if err := tx.commit(); err != nil {
		return nil, fmt.Errorf("inbox: claim: commit: %w", err)
	}
	for i := range out {
		out[i].ConsumerName = w.cfg.ConsumerName
		out[i].LeaseUntil = until
		out[i].Owner = w.cfg.Owner
		out[i].Message.Redelivered = out[i].Attempts > 1
		if out[i].Attempts > 1 {
			out[i].Message.DeliveryCount = out[i].Attempts
		}
	}
	return out, nil
}

func (w *Worker) scanClaims(rows *sql.Rows, err error) ([]Claimed, error) {
	if err != nil {
		return nil, fmt.Errorf("inbox: claim: %w", err)
	}
	defer rows.Close()
	var out []Claimed
	for rows.Next() {
		var c Claimed
		var corr, headers, class, reason, lastErr sql.NullString
		var created dbTime
		if err := rows.Scan(&c.Message.ID, &corr, &headers, &c.Message.Body, &c.Attempts, &created, &class, &reason, &lastErr); err != nil {
			return nil, fmt.Errorf("inbox: claim: scan: %w", err)
		}
		c.Message.CorrelationID = corr.String
		if headers.Valid {
			if err := json.Unmarshal([]byte(headers.String), &c.Message.Headers); err != nil {
				c.headerErr = fmt.Errorf("inbox: stored headers of event %q: %w", c.Message.ID, err)
			}
		}
		c.ReceivedAt = created.Time
		c.ErrorClass, c.ReasonCode, c.LastError = inboxkit.Class(class.String), reason.String, lastErr.String
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: claim: %w", err)
	}
	return out, nil
}

// Process runs the handler for one claimed entry and records the outcome,
// conditional on still holding the claim's lease:
//
//   - handler ok: the row becomes PROCESSED in the handler's transaction.
//   - business rejection: the handler's writes are rolled back (savepoint)
//     and the row becomes REJECTED in the same transaction; never retried.
//   - technical failure: rolled back; in its own transaction the row becomes
//     TECHNICAL_FAILURE with LAST_ERROR and NEXT_ATTEMPT_AT = now + backoff,
//     lease cleared. At the backout threshold (ATTEMPTS >= MaxAttempts) the
//     entry is dead-lettered instead.
//   - poison (or a claim past the threshold, or undecodable stored
//     headers): DeadLetterFunc is called, then the row becomes DEAD_LETTERED.
//
// When the lease was lost (another worker claimed the entry after it
// expired) nothing is recorded, the handler's writes are rolled back and the
// error wraps ErrLeaseLost. Any other error means the database could not
// record the outcome: the entry stays IN_PROGRESS and is claimed again when
// its lease expires.
func (w *Worker) Process(ctx context.Context, c Claimed) (Result, error) {
	if v, cause := w.before(c); !v.Run {
		return w.deadLetter(ctx, c, v.Class, v.Reason, cause)
	}
	s := w.s
	tx, err := s.begin(ctx, "process", nil)
	if err != nil {
		return Result{}, err
	}
	defer tx.rollback()
	if _, err := tx.ExecContext(ctx, s.q.savepoint); err != nil {
		return Result{}, fmt.Errorf("inbox: process: savepoint: %w", err)
	}
	herr := w.cfg.HandleFunc(ctx, tx.Tx, c.Message)
	v := decide(facts{Ran: true, Decision: s.classify(herr), Attempts: c.Attempts, MaxAttempts: s.cfg.Retry.MaxAttempts})
	return w.settle(ctx, tx, c, v, herr)
}

// before is the verdict on claim c before its handler runs, and the cause
// of a dead letter without running it: earlier claims never recorded an
// outcome (the worker died) or a dead-letter publish failed, and the
// threshold is passed; or the stored headers do not decode (poison).
func (w *Worker) before(c Claimed) (verdict, error) {
	pre := facts{Attempts: c.Attempts - 1, MaxAttempts: w.s.cfg.Retry.MaxAttempts}
	if c.headerErr != nil {
		pre.Decision = inboxkit.Decision{Class: inboxkit.ClassPoison, Reason: inboxkit.ReasonMalformedHeaders}
	}
	v := decide(pre)
	cause := c.headerErr
	if v.Reason == inboxkit.ReasonMaxAttemptsExceeded {
		cause = errors.New("attempts exceeded without a recorded outcome")
		if c.LastError != "" {
			cause = errors.New(c.LastError)
		}
	}
	return v, cause
}

// settle does what the verdict v says for claim c, whose handler ran in tx
// and returned herr.
func (w *Worker) settle(ctx context.Context, tx *txn, c Claimed, v verdict, herr error) (Result, error) {
	s := w.s
	now := s.now()
	l := leaseOf(c)
	switch v.Row {
	case inboxkit.StatusProcessed:
		if err := w.complete(ctx, tx, l, w.q.processed, args{"now": s.t(now)}, nil); err != nil {
			return Result{}, err
		}
		return v.result(v.Row, c.Attempts, nil), nil
	case inboxkit.StatusRejected:
		_, err := tx.ExecContext(ctx, s.q.rollbackSavepont)
		if err == nil {
			err = w.complete(ctx, tx, l, w.q.rejected, args{"reason": v.Reason, "error": nullString(s.truncate(herr.Error())), "now": s.t(now)}, w.publishReject(ctx, c, v, herr))
		}
		if errors.Is(err, ErrLeaseLost) {
			return Result{}, err
		}
		if err != nil {
			tx.rollback()
			return w.fail(ctx, c, fmt.Errorf("inbox: record rejection (%v): %w", herr, err))
		}
		return v.result(v.Row, c.Attempts, herr), nil
	}
	tx.rollback()
	return w.apart(ctx, c, v, herr)
}

// publishReject is the RejectFunc call for a rejection, nil without one.
func (w *Worker) publishReject(ctx context.Context, c Claimed, v verdict, herr error) func() error {
	if w.cfg.RejectFunc == nil {
		return nil
	}
	return func() error { return w.cfg.RejectFunc(ctx, c, v.Reason, herr) }
}

// apart records, in its own transaction (rule 4), the failure or dead
// letter v says for claim c, caused by herr.
func (w *Worker) apart(ctx context.Context, c Claimed, v verdict, herr error) (Result, error) {
	if v.Row == inboxkit.StatusDeadLettered {
		return w.deadLetter(ctx, c, v.Class, v.Reason, herr)
	}
	return w.retryLater(ctx, c, v.Class, v.Reason, v.RetryAfter, v.Uncount, herr)
}

// lease identifies one claim of an entry: the outcome UPDATEs match on it
// (the statements' trailing EVENT_ID, CONSUMER_NAME, LEASE_OWNER, ATTEMPTS).
type lease struct {
	EventID, ConsumerName, Owner string
	Attempts                     int
}

func leaseOf(c Claimed) lease {
	return lease{EventID: c.Message.ID, ConsumerName: c.ConsumerName, Owner: c.Owner, Attempts: c.Attempts}
}

// args is the lease's named arguments (@event, @consumer, @owner,
// @attempts), with more.
func (l lease) args(more args) args {
	more["event"], more["consumer"], more["owner"], more["attempts"] = l.EventID, l.ConsumerName, l.Owner, l.Attempts
	return more
}

func (l lease) lost() error {
	return fmt.Errorf("%w: event %q for %q (owner %s, attempt %d)", ErrLeaseLost, l.EventID, l.ConsumerName, l.Owner, l.Attempts)
}

// complete runs the conditional UPDATE q that records the outcome (its
// values set, matched on the lease l), calls beforeCommit (if not nil)
// and commits; zero rows matched means the lease is lost. On any error the
// transaction is rolled back before complete returns. Every outcome UPDATE
// changes STATUS from IN_PROGRESS, so MySQL's changed-rows count equals the
// matched-rows count.
func (w *Worker) complete(ctx context.Context, tx *txn, l lease, q stmt, set args, beforeCommit func() error) error {
	defer tx.rollback()
	if err := w.record(ctx, tx, l, q, set); err != nil {
		return err
	}
	if beforeCommit != nil {
		if err := beforeCommit(); err != nil {
			return fmt.Errorf("inbox: process: publish rejection: %w", err)
		}
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("inbox: process: commit: %w", err)
	}
	return nil
}

// record runs the conditional UPDATE q (values set, matched on the lease
// l) in tx; zero rows matched means the lease is lost.
func (w *Worker) record(ctx context.Context, tx *txn, l lease, q stmt, set args) error {
	res, err := q.exec(ctx, tx, l.args(set))
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return fmt.Errorf("inbox: process: record outcome: %w", err)
	}
	if n == 0 {
		return l.lost()
	}
	return nil
}

// fail records err, a technical failure whatever its class, as the decision
// table says: retried later, or dead-lettered at the threshold.
func (w *Worker) fail(ctx context.Context, c Claimed, err error) (Result, error) {
	return w.apart(ctx, c, w.technical(c), err)
}

// technical is the verdict on a technical failure of claim c.
func (w *Worker) technical(c Claimed) verdict {
	return decide(facts{Ran: true, Decision: inboxkit.Decision{Class: inboxkit.ClassTechnical}, Attempts: c.Attempts, MaxAttempts: w.s.cfg.Retry.MaxAttempts})
}

// retryLater records a failure in its own transaction (the handler's
// rollback cannot erase it): TECHNICAL_FAILURE, due again after delay (the
// backoff when 0), the attempt taken back when noAttempt.
func (w *Worker) retryLater(ctx context.Context, c Claimed, class inboxkit.Class, reason string, delay time.Duration, noAttempt bool, cause error) (Result, error) {
	s := w.s
	if delay <= 0 {
		delay = s.cfg.Retry.RedeliveryDelay(c.Attempts)
	}
	uncount, attempts := 0, c.Attempts
	if noAttempt {
		uncount, attempts = 1, c.Attempts-1
	}
	now := s.now()
	tx, err := s.begin(ctx, "record failure", nil)
	if err != nil {
		return Result{}, fmt.Errorf("%w (handler error: %v)", err, cause)
	}
	err = w.complete(ctx, tx, leaseOf(c), w.q.failed, args{"reason": nullString(reason), "class": string(class), "error": nullString(s.truncate(cause.Error())),
		"next": s.t(now.Add(delay)), "now": s.t(now), "uncount": uncount}, nil)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: inboxkit.OutcomeRetry, Status: inboxkit.StatusTechnicalFailure, Class: class, Reason: reason,
		Attempts: attempts, Err: cause, RetryAfter: delay}, nil
}

// deadLetter moves the row to DEAD_LETTERED, calls DeadLetterFunc while the
// row is locked by that uncommitted UPDATE, and commits only after the
// publish succeeded.
func (w *Worker) deadLetter(ctx context.Context, c Claimed, class inboxkit.Class, reason string, cause error) (Result, error) {
	s := w.s
	now := s.now()
	var msg any
	if cause != nil {
		msg = s.truncate(cause.Error())
	}
	tx, err := s.begin(ctx, "dead-letter", nil)
	if err != nil {
		return Result{}, err
	}
	defer tx.rollback()
	l := leaseOf(c)
	res, err := w.q.deadLettered.exec(ctx, tx, l.args(args{"reason": nullString(reason), "class": string(class), "error": msg, "now": s.t(now)}))
	if err != nil {
		return Result{}, fmt.Errorf("inbox: dead-letter: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return Result{}, fmt.Errorf("inbox: dead-letter: %w", err)
		}
		return Result{}, l.lost()
	}
	if perr := w.cfg.DeadLetterFunc(ctx, c, class, reason, cause); perr != nil {
		tx.rollback()
		// Keep the entry: the next claim (past the threshold, or poison
		// again) tries the dead letter again after a backoff.
		res, err := w.retryLater(ctx, c, class, reason, 0, false, fmt.Errorf("dead-letter publish failed: %w (cause: %v)", perr, cause))
		if err != nil {
			return Result{}, err
		}
		res.Err = perr
		return res, nil
	}
	if err := tx.commit(); err != nil {
		return Result{}, fmt.Errorf("inbox: dead-letter: commit after publish: %w", err)
	}
	return Result{Outcome: inboxkit.OutcomeDeadLetter, Status: inboxkit.StatusDeadLettered, Class: class, Reason: reason,
		Attempts: c.Attempts, Err: cause}, nil
}

// Release hands a claimed entry back without processing it: its lease ends
// now, so the next Claim of any worker takes it. The claim stays counted in
// ATTEMPTS (as if the worker had died), because owner and attempt number
// identify a claim and must never repeat. It reports ErrLeaseLost when the
// claim had already been taken over.
func (w *Worker) Release(ctx context.Context, c Claimed) error {
	s := w.s
	now := s.now()
	res, err := w.q.release.exec(ctx, s.db, leaseOf(c).args(args{"now": s.t(now)}))
	if err != nil {
		return fmt.Errorf("inbox: release: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: event %q for %q", ErrLeaseLost, c.Message.ID, c.ConsumerName)
	}
	return nil
}

// RunOnce claims up to ClaimSize entries and processes them, BatchSize at a
// time, returning how many entries it claimed. When ctx is cancelled it
// finishes the entries in hand and releases the rest of the claim. Errors
// of single entries are logged; the returned error is the claim's.
func (w *Worker) RunOnce(ctx context.Context) (int, error) {
	claimed, err := w.Claim(ctx, w.cfg.ClaimSize)
	if err != nil {
		return 0, err
	}
	work := context.WithoutCancel(ctx)
	for rest := claimed; len(rest) > 0; {
		if ctx.Err() != nil {
			for _, r := range rest {
				if err := w.Release(work, r); err != nil {
					w.cfg.Logger.Warn("inbox worker: release", "owner", w.cfg.Owner, "event_id", r.Message.ID, "error", err)
				}
			}
			break
		}
		batch := rest[:min(w.cfg.BatchSize, len(rest))]
		rest = rest[len(batch):]
		if w.cfg.BatchFunc != nil {
			w.cfg.BatchFunc(len(batch))
		}
		ctxs, observed := make([]context.Context, len(batch)), make([]func(Result, error), len(batch))
		for i, c := range batch {
			ctxs[i], observed[i] = work, func(Result, error) {}
			if w.cfg.ObserveFunc != nil {
				ctxs[i], observed[i] = w.cfg.ObserveFunc(work, c)
			}
		}
		var results []Result
		var errs []error
		if len(batch) == 1 {
			res, err := w.Process(ctxs[0], batch[0])
			results, errs = []Result{res}, []error{err}
		} else {
			results, errs = w.processBatch(ctxs, batch)
		}
		for i, c := range batch {
			observed[i](results[i], errs[i])
			w.logOutcome(c, results[i], errs[i])
		}
	}
	return len(claimed), nil
}

func (w *Worker) logOutcome(c Claimed, res Result, err error) {
	switch {
	case errors.Is(err, ErrLeaseLost):
		w.cfg.Logger.Warn("inbox worker: lease lost; the handler's writes were rolled back", "owner", w.cfg.Owner, "event_id", c.Message.ID, "error", err)
	case err != nil:
		w.cfg.Logger.Error("inbox worker: outcome not recorded; the entry is retried after its lease", "owner", w.cfg.Owner, "event_id", c.Message.ID, "error", err)
	case res.Outcome != inboxkit.OutcomeProcessed:
		level := slog.LevelInfo
		if res.Outcome == inboxkit.OutcomeDeadLetter {
			level = slog.LevelWarn // the one line of a dead letter
		}
		w.cfg.Logger.Log(context.Background(), level, "inbox worker", "owner", w.cfg.Owner, "event_id", c.Message.ID, "correlation_id", c.Message.CorrelationID,
			"outcome", string(res.Outcome), "status", string(res.Status), "reason", res.Reason, "attempts", res.Attempts, "error", res.Err)
	}
}

// Run claims and processes entries until ctx is cancelled, sleeping
// PollInterval whenever there is nothing to claim (or the claim failed).
// On cancellation it finishes the entry in hand (its handler's ctx is not
// cancelled), releases the rest of its claim and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for ctx.Err() == nil {
		n, err := w.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("inbox worker: claim", "owner", w.cfg.Owner, "error", err)
		}
		if n > 0 && err == nil {
			continue
		}
		timer.Reset(w.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	return nil
}
