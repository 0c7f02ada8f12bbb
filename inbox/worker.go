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
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/internal/hold"
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
	// EffectsInTx declares that HandleFunc's effects are all in the
	// transaction it is given (see BatchItem.EffectsInTx): a batch then
	// runs its handlers without a savepoint each, and when one does not
	// succeed it is rolled back whole and runs again with savepoints, to
	// the same outcomes (on inboxkit-pgx with its statements pipelined:
	// see ProcessBatch). Never guessed: false keeps the savepoints.
	EffectsInTx bool
	// Logger receives Run's errors. Defaults to slog.Default().
	Logger *slog.Logger
	// BatchFunc, if set, is called by Run and RunOnce with the number of
	// entries of every batch before it is processed (for metrics).
	BatchFunc func(n int)
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
	h   handoff
}

// handoff is the queue of claims handed to a running Run in process
// (Hand), at most ClaimSize of them waiting.
type handoff struct {
	mu      sync.Mutex
	q       []Claimed
	running bool          // Run is taking from q
	wake    chan struct{} // q got claims (capacity 1)
	room    chan struct{} // Run took claims from q (capacity 1)
	stopped chan struct{} // closed when Run stops taking; new per Run
}

// NewWorker returns a Worker on the store's table. The store must publish
// (Store.WithPorts): a worker dead-letters poison and entries past the
// backout threshold, and publishes rejections to Ports.RejectQueue, by
// the letter protocol (see WithPorts).
func (s *Store) NewWorker(cfg WorkerConfig) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if s.ports == nil {
		return nil, errors.New("inbox: NewWorker: the store has no publish ports: a worker must be able to dead-letter (use Store.WithPorts)")
	}
	return &Worker{s: s, cfg: cfg, q: &s.qq, h: handoff{wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}}, nil
}

// Receive is Store.Receive for the worker's consumer, with the claim
// written by the insert while the worker's Run is running: a new entry
// without an order key is stored IN_PROGRESS under this worker's lease,
// its first attempt counted, and returned as the claim. The claim is nil
// otherwise: Run not running, a keyed entry (stored RECEIVED, it waits
// for its key's turn in a claim), a duplicate, a taken-in
// TECHNICAL_FAILURE row, or an error as from Store.Receive. The entry is
// safe in the database when the error is nil, as with Store.Receive. Pass
// the claim to Hand, Process or Release within LeaseDuration; should the
// process die first, the lease expires and any worker's claim takes the
// entry.
//
// Calls that store new entries at the same moment, through any of the
// store's workers, share one INSERT (PostgreSQL, MariaDB, SQLite): once
// more than three are being stored at once, those that come while a
// statement runs wait for it and go together in the next; an entry that
// finds no statement running, or few being stored, runs its own. Each
// call answers what its own INSERT would have: where the shared statement
// fails (a value the database refuses), every entry in it runs its own.
func (w *Worker) Receive(ctx context.Context, e Entry, headers map[string]string, payload []byte) (inserted bool, status inboxkit.Status, c *Claimed, err error) {
	if !w.h.taking() {
		inserted, status, err = w.s.Receive(ctx, e, headers, payload)
		return inserted, status, nil, err
	}
	return w.s.receive(ctx, e, headers, payload, w)
}

// Hand gives claims of this worker (from Receive) to its running Run,
// which processes them before it claims from the table, BatchSize per
// transaction. It waits while ClaimSize claims are waiting already. It
// returns false, having handed nothing, when Run is not running or has
// stopped, or ctx is done: the caller then releases the claims (Release),
// or leaves them to expire.
func (w *Worker) Hand(ctx context.Context, cs ...Claimed) bool {
	h := &w.h
	for {
		h.mu.Lock()
		if !h.running {
			h.mu.Unlock()
			return false
		}
		stopped := h.stopped
		if len(h.q) == 0 || len(h.q)+len(cs) <= w.cfg.ClaimSize {
			h.q = append(h.q, cs...)
			h.mu.Unlock()
			select {
			case h.wake <- struct{}{}:
			default:
			}
			return true
		}
		h.mu.Unlock()
		select {
		case <-h.room:
		case <-stopped:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// taking reports whether Run is taking handed claims.
func (h *handoff) taking() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

// waiting reports whether claims wait in the handoff.
func (h *handoff) waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.q) > 0
}

// take returns the claims waiting in the handoff, at most BatchSize.
func (h *handoff) take(n int) []Claimed {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := min(n, len(h.q))
	if k == 0 {
		return nil
	}
	out := make([]Claimed, k)
	copy(out, h.q)
	h.q = append(h.q[:0], h.q[k:]...)
	select {
	case h.room <- struct{}{}:
	default:
	}
	return out
}

// start marks Run as taking handed claims; stop ends that and returns
// the claims still waiting.
func (h *handoff) start() {
	h.mu.Lock()
	h.running = true
	h.stopped = make(chan struct{})
	h.mu.Unlock()
}

func (h *handoff) stop() []Claimed {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = false
	close(h.stopped)
	out := h.q
	h.q = nil
	return out
}

// Owner returns the worker's lease owner name.
func (w *Worker) Owner() string { return w.cfg.Owner }

// Claim takes up to n entries (n <= 0: ClaimSize) of the worker's consumer
// that are RECEIVED, TECHNICAL_FAILURE with NEXT_ATTEMPT_AT passed, or
// IN_PROGRESS with an expired lease, and makes them IN_PROGRESS under this
// worker's lease, raising ATTEMPTS, in one transaction.
//
// An entry with an order key (Entry.OrderKey, ORDER_KEY) is taken only
// while it is the oldest open entry of its key: none of its key is older
// and RECEIVED, IN_PROGRESS (leased, or its lease expired) or
// TECHNICAL_FAILURE waiting for NEXT_ATTEMPT_AT. So no two workers, of any
// process, hold entries of one key, a key's entries run in the order
// Receive stored them, a failed entry holds its key until it is processed
// or dead-lettered (then the key goes on), and an expired lease's entry is
// claimed before its key's later ones. A replayed entry (ResetForReplay)
// is open again and holds its key the same way.
//
// PostgreSQL and MariaDB select the entries with FOR UPDATE SKIP LOCKED, so
// concurrent claims take different entries without waiting for each other.
// SQLite claims with one UPDATE ... RETURNING; its writers are serialized.
// Each claim must be passed to Process (or Release) within LeaseDuration.
//
// The claim's statements run within LeaseDuration, whatever ctx allows: a
// claim that took longer would hand out leases already run out, and one
// waiting on a connection that will never answer (its bytes lost in a
// network partition) would stop the worker for good.
func (w *Worker) Claim(ctx context.Context, n int) ([]Claimed, error) {
	if n <= 0 {
		n = w.cfg.ClaimSize
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration)
	defer cancel()
	s := w.s
	now := s.now()
	until := now.Add(w.cfg.LeaseDuration)
	tx, err := s.begin(ctx, "claim", s.d.lockingTx)
	if err != nil {
		return nil, err
	}
	defer tx.rollback()

	claim := args{{"consumer", w.cfg.ConsumerName}, {"owner", w.cfg.Owner}, {"until", s.t(until)}, {"now", s.t(now)}, {"n", n}}
	out, err := w.scanClaims(tx.QueryContext(ctx, w.q.claim.text, w.q.claim.bind(claim)...))
	if err != nil {
		return nil, err
	}
	if !w.q.claimUpdates && len(out) > 0 {
		// The SELECT locked the rows; claim them by id.
		for i := range out {
			out[i].Attempts++ // the SELECT read the value before the claim
		}
		st := compileListed(s.d, w.q.claimUpdate, "@id", ")", len(out))
		id := args{{}}
		res, err := tx.ExecContext(ctx, st.text, st.bindRows(claim, func(i int) args {
			id[0] = arg{"id", out[i].Message.ID}
			return id
		})...)
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
//   - business rejection: the handler's writes are rolled back and the row
//     becomes REJECTED (published to Ports.RejectQueue, if set, before the
//     commit); never retried.
//   - technical failure: rolled back; in its own transaction the row becomes
//     TECHNICAL_FAILURE with LAST_ERROR and NEXT_ATTEMPT_AT = now + backoff,
//     lease cleared. At the backout threshold (ATTEMPTS >= MaxAttempts) the
//     entry is dead-lettered instead.
//   - poison (or a claim past the threshold, or undecodable stored
//     headers): the letter protocol: the row becomes DEAD_LETTERED,
//     uncommitted, the envelope is published to Ports.DeadLetterQueue, and
//     the row committed; a failed publish keeps the entry TECHNICAL_FAILURE
//     (dead-lettered on a later claim: nothing is lost).
//
// When the lease was lost (another worker claimed the entry after it
// expired) nothing is recorded, the handler's writes are rolled back and the
// error wraps ErrLeaseLost. Any other error means the database could not
// record the outcome: the entry stays IN_PROGRESS and is claimed again when
// its lease expires.
func (w *Worker) Process(ctx context.Context, c Claimed) (Result, error) {
	j := w.job(ctx, c)
	w.s.runClaims(j.alone())
	return j.res, j.err
}

// job is the engine's job for claim c, processed with ctx.
func (w *Worker) job(ctx context.Context, c Claimed) *job {
	h := w.cfg.HandleFunc
	return &job{ctx: ctx, claim: &c, h: func(ctx context.Context, tx *sql.Tx) error { return h(ctx, tx, c.Message) }, effectsInTx: w.cfg.EffectsInTx}
}

// before is the verdict on claim c before its handler runs, and the cause
// of a dead letter without running it: earlier claims never recorded an
// outcome (the worker died) or a dead-letter publish failed, and the
// threshold is passed; or the stored headers do not decode (poison).
func (s *Store) before(c *Claimed) (verdict, error) {
	pre := facts{Attempts: c.Attempts - 1, MaxAttempts: s.cfg.Retry.MaxAttempts}
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

// lease identifies one claim of an entry: the outcome UPDATEs match on it
// (the statements' trailing EVENT_ID, CONSUMER_NAME, LEASE_OWNER, ATTEMPTS).
type lease struct {
	EventID, ConsumerName, Owner string
	Attempts                     int
}

func (c *Claimed) lease() lease {
	return lease{EventID: c.Message.ID, ConsumerName: c.ConsumerName, Owner: c.Owner, Attempts: c.Attempts}
}

// args is the lease's named arguments (@event, @consumer, @owner,
// @attempts), with more.
func (l lease) args(more args) args {
	return append(more, arg{"event", l.EventID}, arg{"consumer", l.ConsumerName}, arg{"owner", l.Owner}, arg{"attempts", l.Attempts})
}

func (l lease) lost() error {
	return fmt.Errorf("%w: event %q for %q (owner %s, attempt %d)", ErrLeaseLost, l.EventID, l.ConsumerName, l.Owner, l.Attempts)
}

// record runs the conditional UPDATE q (values set, with the lease's)
// through e, by s.verdict; zero rows matched means the lease is lost.
func (l lease) record(ctx context.Context, s *Store, e execer, q stmt, set args) error {
	res, err := s.verdict(ctx, e, q, l.args(set))
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

// leaseLostText is the value processedFenced's cast refuses when the
// lease is lost: its error's text.
const leaseLostText = "inboxkit: the lease is lost"

// fence records the PROCESSED row on the lease through e by
// processedFenced, marked hold.Counted with n, and reports whether the
// driver held it: it then goes with the transaction's next statement (a
// batch's next SAVEPOINT, its RELEASE, the check of a batch without
// savepoints) or its COMMIT, which its failure fails, and n is what it
// met. Its error, run at once by a driver that
// does not hold, or met later, is not ErrLeaseLost: the job's outcome is
// then recorded apart (retryLater), which tells a lost lease.
func (l lease) fence(ctx context.Context, s *Store, e execer, n *hold.Count, set args) (held bool, err error) {
	*n = hold.Count{}
	res, err := s.qq.processedFenced.exec(hold.Counted(ctx, "inbox: record outcome", n), e, l.args(set))
	if err != nil {
		return false, fmt.Errorf("inbox: process: record outcome: %w", err)
	}
	_, err = res.RowsAffected() // hold.ErrHeld when held; one row when it ran
	return errors.Is(err, hold.ErrHeld), nil
}

// retryLater records a failure in its own transaction (the handler's
// rollback cannot erase it): TECHNICAL_FAILURE, due again after delay (the
// backoff when 0), the attempt taken back when noAttempt.
func (s *Store) retryLater(ctx context.Context, c *Claimed, class inboxkit.Class, reason string, delay time.Duration, noAttempt bool, cause error) (Result, error) {
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
	defer tx.rollback()
	err = c.lease().record(ctx, s, tx, s.qq.failed, args{{"reason", nullString(reason)}, {"class", string(class)}, {"error", nullString(s.truncate(cause.Error()))}, {"next", s.t(now.Add(delay))}, {"now", s.t(now)}, {"uncount", uncount}})
	if err != nil {
		return Result{}, err
	}
	if err := tx.commit(); err != nil {
		return Result{}, fmt.Errorf("inbox: process: commit: %w", err)
	}
	return Result{Outcome: inboxkit.OutcomeRetry, Status: inboxkit.StatusTechnicalFailure, Class: class, Reason: reason,
		Attempts: attempts, Err: cause, RetryAfter: delay}, nil
}

// Release hands a claimed entry back without processing it: its lease ends
// now, so the next Claim of any worker takes it. The claim stays counted in
// ATTEMPTS (as if the worker had died), because owner and attempt number
// identify a claim and must never repeat. It reports ErrLeaseLost when the
// claim had already been taken over. Like Claim, it gives up after
// LeaseDuration, by when the lease has ended anyway.
func (w *Worker) Release(ctx context.Context, c Claimed) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration)
	defer cancel()
	s := w.s
	now := s.now()
	res, err := w.q.release.exec(ctx, s.db, c.lease().args(args{{"now", s.t(now)}}))
	if err != nil {
		return fmt.Errorf("inbox: release: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: event %q for %q", ErrLeaseLost, c.Message.ID, c.ConsumerName)
	}
	return nil
}

// Around wraps the processing of one claimed entry by RunOnce: it
// returns the context to process the entry with, and the function to call
// once with what Process returned. Package consumer observes its workers'
// entries through it (its Observer).
type Around func(ctx context.Context, c Claimed) (context.Context, func(Result, error))

// RunOnce claims up to ClaimSize entries and processes them, BatchSize at a
// time, returning how many entries it claimed. When ctx is cancelled it
// finishes the entries in hand and releases the rest of the claim. Errors
// of single entries are logged; the returned error is the claim's. around,
// if given, wraps each entry.
func (w *Worker) RunOnce(ctx context.Context, around ...Around) (int, error) {
	claimed, err := w.Claim(ctx, w.cfg.ClaimSize)
	if err != nil {
		return 0, err
	}
	w.runClaimed(ctx, claimed, around)
	return len(claimed), nil
}

// runClaimed processes claims, BatchSize at a time; when ctx is
// cancelled it finishes the batch in hand and releases the rest.
func (w *Worker) runClaimed(ctx context.Context, claimed []Claimed, around []Around) {
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
		jobs, observed := make([]*job, len(batch)), make([][]func(Result, error), len(batch))
		for i, c := range batch {
			cctx := work
			for _, a := range around {
				var done func(Result, error)
				cctx, done = a(cctx, c)
				observed[i] = append(observed[i], done)
			}
			jobs[i] = w.job(cctx, c)
		}
		w.s.runClaims(jobs)
		for i, j := range jobs {
			for _, done := range observed[i] {
				done(j.res, j.err)
			}
			w.logOutcome(batch[i], j.res, j.err)
		}
	}
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
// Claims handed to it (Hand) are processed first, as they come, BatchSize
// per transaction; the table is then claimed from every PollInterval, for
// entries no receiver handed over (keyed ones, failures due again, expired
// leases, entries of a process that died). On cancellation it finishes the
// entry in hand (its handler's ctx is not cancelled), releases the rest of
// its claim and what was handed and not begun, and returns nil. around is
// RunOnce's.
func (w *Worker) Run(ctx context.Context, around ...Around) error {
	w.h.start()
	defer func() {
		work := context.WithoutCancel(ctx)
		for _, r := range w.h.stop() {
			if err := w.Release(work, r); err != nil {
				w.cfg.Logger.Warn("inbox worker: release", "owner", w.cfg.Owner, "event_id", r.Message.ID, "error", err)
			}
		}
	}()
	poll := time.NewTimer(0)
	defer poll.Stop()
	// claim claims and processes until a claim finds nothing (or fails),
	// or claims were handed over meanwhile (they go first; the claiming
	// goes on after them).
	claim := func() {
		for {
			n, err := w.RunOnce(ctx, around...)
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Error("inbox worker: claim", "owner", w.cfg.Owner, "error", err)
			}
			if n == 0 || err != nil || ctx.Err() != nil {
				poll.Reset(w.cfg.PollInterval)
				return
			}
			if w.h.waiting() {
				poll.Reset(0)
				return
			}
		}
	}
	for ctx.Err() == nil {
		// The poll is due even while claims keep being handed over.
		select {
		case <-poll.C:
			claim()
			continue
		default:
		}
		if cs := w.h.take(w.cfg.BatchSize); len(cs) > 0 {
			w.runClaimed(ctx, cs, around)
			continue
		}
		select {
		case <-ctx.Done():
		case <-w.h.wake:
		case <-poll.C:
			claim()
		}
	}
	return nil
}
