package golden

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
)

// Factory builds the consumer under test for one instance on the runner's
// environment. It is called once per instance (Scenario.Instances) with
// the same database and scripted world; Subject.Setup runs once.
type Factory func(env *Env) (Subject, error)

// Subject is the consumer under test: exactly one of Handler (a consumer
// run by the inboxkit runtime with an inbox) or Legacy (a consumer without
// inbox, the "before") is set.
type Subject struct {
	// Name is the consumer name (CONSUMER_NAME of the inbox rows). Required
	// with Handler; shown in the transcript.
	Name string
	// Handler is the business function of a refactored consumer. The runner
	// builds a consumer.Consumer around it with an inbox (Retry.MaxAttempts from
	// the scenario), a dead-letter queue DLQ.<queue> and a reject queue
	// <queue>.REJECTED, and wraps it so that Env.BeforeCommit runs after it.
	Handler consumer.Handler
	// Configure, if set, adjusts the consumer.Config the runner built.
	Configure func(*consumer.Config)
	// Legacy is a consumer without inbox: nil means acknowledge, an error
	// means the message is handed back for redelivery. It must call
	// Env.BeforeCommit right before it commits, or crash and commit faults
	// never trigger.
	Legacy func(ctx context.Context, m inboxkit.Message) error
	// Setup, if set, runs once before the first delivery (business tables,
	// seed data). The inbox table is created by the runner.
	Setup func(ctx context.Context) error
	// Tables are the business tables written to the transcript.
	Tables []Table
	// Relay, if set, is the subject's outbox relay (package outbox: what
	// the handler wrote to its outbox is sent after the commit). The
	// runner calls it once a send step's deliveries settled, never inside
	// a delivery (so that batching changes no transcript); it sends
	// what is due and returns when the next message is due (zero: nothing
	// left to send but parked messages). The runner moves the scenario
	// clock to that time and calls it again, until nothing is due. A
	// crash inside it ("crash during SERVICE") kills the relay alone, with
	// its claims: the runner moves the clock on by RelayLease and calls it
	// again. Its Env.Call calls are marked in the transcript as the
	// relay's, after the commit.
	Relay func(ctx context.Context) (RelayResult, error)
	// RelayLease is how long a relay that died holds its claims (the
	// outbox relay's lease). Required with Relay.
	RelayLease time.Duration
	// Outbox is the outbox table written to the transcript (columns
	// MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, STATUS, ATTEMPTS,
	// CAUSE_EVENT_ID, CORRELATION_ID, LAST_ERROR, by key and sequence).
	// Empty: none.
	Outbox string
}

// RelayResult is what one call of Subject.Relay did: the messages sent
// (confirmed), failed (tried again after their backoff) and parked, and
// when the next message is due (zero: none).
type RelayResult struct {
	Sent, Failed, Parked int
	NextDue              time.Time
}

// Table is a business table in the transcript: the columns, rows sorted by
// OrderBy (a SQL ORDER BY list; defaults to the first column).
type Table struct {
	Name    string
	Columns []string
	OrderBy string
}

// Env is the scripted world one consumer instance runs in.
type Env struct {
	// DB is the instance's connection pool to the scenario's database.
	DB *sql.DB
	// Dialect is DB's dialect.
	Dialect inbox.Dialect
	// Instance is the instance number, from 1.
	Instance int
	// Clock is the scenario clock: it starts at 2026-01-05T09:00:00Z and
	// moves one second before every delivery. Inject it everywhere.
	Clock inboxkit.Clock
	// IDFunc returns ids "golden-id-000001", "golden-id-000002", ...; the
	// transcript shows them as <id_1>, <id_2> in order of appearance.
	IDFunc func() string
	// MaxAttempts is the scenario's max-attempts (the inbox's backout
	// threshold), for a subject's own retry limits (its outbox relay's).
	MaxAttempts int

	w *world
}

// Call records a call to an external service (a letter service, a partner
// API) and returns the error a "fail SERVICE N" step injected, or nil. A
// non-empty key makes the fake idempotent: a second successful call with the
// same key is recorded as a duplicate and sends nothing. summary describes
// the call in the transcript.
func (e *Env) Call(ctx context.Context, service, key, summary string) error {
	return e.w.call(service, key, summary)
}

// BeforeCommit must be called by a consumer right before its database
// commit (the runner does it for Subject.Handler). It panics to simulate a
// crash before the commit ("crash before-commit") and returns an error for
// "fail commit N".
func (e *Env) BeforeCommit(ctx context.Context) error { return e.w.beforeCommit() }

// crashSignal is the panic value of a simulated crash; during names the
// service whose call it happened in ("" for a crash before the commit).
type crashSignal struct{ during string }

// world is the scripted state shared by all instances.
type world struct {
	mu        sync.Mutex
	now       time.Time
	ids       int
	crash     map[string]int // "crash before-commit" and "crash after-commit" left
	svc       *services
	inRelay   bool // the calls being made are a relay's
	published []published
}

type published struct {
	destination string
	headers     map[string]string
	body        []byte
}

var epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

func newWorld() *world {
	return &world{now: epoch, crash: map[string]int{}, svc: newServices("the caller died before the answer (injected crash)")}
}

// Now implements inboxkit.Clock.
func (w *world) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(time.Second)
}

// advance moves the scenario clock to t, if t is later.
func (w *world) advance(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.now) {
		w.now = t
	}
}

func (w *world) relaying(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inRelay = on
}

func (w *world) newID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids++
	return fmt.Sprintf("golden-id-%06d", w.ids)
}

func (w *world) call(service, key, summary string) error {
	w.mu.Lock()
	c := w.svc.call(service, key, summary)
	if w.inRelay {
		c.Relay = true
		w.svc.calls[len(w.svc.calls)-1].Relay = true
	}
	w.mu.Unlock()
	switch {
	case c.CallerDied:
		// The service got the request; the caller dies before the answer.
		panic(crashSignal{during: service})
	case c.Effect == CallFailed:
		return fmt.Errorf("%s unavailable (injected fault)", service)
	}
	return nil
}

func (w *world) beforeCommit() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crash[CrashBeforeCommit] > 0 {
		w.crash[CrashBeforeCommit]--
		panic(crashSignal{})
	}
	if w.svc.fails[ServiceCommit] > 0 {
		w.svc.fails[ServiceCommit]--
		return fmt.Errorf("database error on commit (injected fault)")
	}
	return nil
}

// ackLost reports (and consumes) an armed "crash after-commit".
func (w *world) ackLost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crash[CrashAfterCommit] > 0 {
		w.crash[CrashAfterCommit]--
		return true
	}
	return false
}

// Publish implements dlq.Publisher.
func (w *world) Publish(_ context.Context, destination string, headers map[string]string, body []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := make(map[string]string, len(headers))
	for k, v := range headers {
		h[k] = v
	}
	w.published = append(w.published, published{destination: destination, headers: h, body: append([]byte(nil), body...)})
	return nil
}
