package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// setup gives a consumer config on a real broker (embedded JetStream) and a
// real database (SQLite), with one message published. The store has the
// retry policy p, with redeliveries after 10ms unless p says otherwise.
func setup(t *testing.T, p ...inboxkit.RetryPolicy) (consumer.Config, *jetstream.Adapter, chan consumer.Settled) {
	t.Helper()
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	a, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Stream: "INVOICES", Subject: "invoices"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.EnsureStream(ctx, "DLQ", "dlq.invoices"); err != nil {
		t.Fatal(err)
	}
	db := dbtest.New(t, dbtest.SQLite)
	retry := inboxkit.RetryPolicy{MaxAttempts: 5}
	if len(p) > 0 {
		retry = p[0]
	}
	if retry.Redelivery == (inboxkit.Backoff{}) {
		retry.Redelivery = inboxkit.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	}
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{ClassifyFunc: classify.Of, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "invoices", map[string]string{"eventId": "E-1", "correlationId": "C-1"}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	settled := make(chan consumer.Settled, 10)
	return consumer.Config{
		Name: "retry-test", Source: a, Store: store, DeadLetter: a, DeadLetterQueue: "dlq.invoices",
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: consumer.ObserveSettled(func(s consumer.Settled) { settled <- s }),
	}, a, settled
}

// flaky fails transiently (a deadlock, say) the first n calls.
func flaky(n int) (consumer.Handler, func() int) {
	var mu sync.Mutex
	calls := 0
	return func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= n {
				return classify.Retry(errors.New("deadlock detected"))
			}
			return nil
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return calls
		}
}

func runUntil(t *testing.T, cfg consumer.Config, settled chan consumer.Settled) consumer.Settled {
	t.Helper()
	stop := start(t, cfg)
	defer func() { _ = stop() }()
	select {
	case s := <-settled:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("nothing settled in 20s")
	}
	return consumer.Settled{}
}

// start runs a consumer of cfg until the returned stop is called; stop
// returns Run's error.
func start(t *testing.T, cfg consumer.Config) (stop func() error) {
	t.Helper()
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error { cancel(); return <-done }
}

// inProcess is a store policy with in-process retries.
var inProcess = inboxkit.RetryPolicy{InProcessRetries: 3, InProcess: inboxkit.Backoff{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond}}

// With in-process retries in the store's policy a transient failure is
// retried in process: the delivery is processed and acknowledged at once,
// every try counted.
func TestInProcessRetry(t *testing.T) {
	cfg, _, settled := setup(t, inProcess)
	h, calls := flaky(2)
	cfg.Handler = h
	s := runUntil(t, cfg, settled)
	if s.Action != inboxkit.ActionAck || s.Result.Outcome != inboxkit.OutcomeProcessed || s.Result.Attempts != 3 || calls() != 3 {
		t.Fatalf("settled %s %s attempts %d after %d calls; want ack PROCESSED attempts 3 after 3 calls", s.Action, s.Result.Outcome, s.Result.Attempts, calls())
	}
}

// Without a policy the first transient failure hands the message back.
func TestNoInProcessRetry(t *testing.T) {
	cfg, _, settled := setup(t)
	h, calls := flaky(2)
	cfg.Handler = h
	s := runUntil(t, cfg, settled)
	if s.Action != inboxkit.ActionRequeue || s.Result.Attempts != 1 || calls() != 1 {
		t.Fatalf("settled %s attempts %d after %d calls; want requeue after 1", s.Action, s.Result.Attempts, calls())
	}
}

// A business rejection is never retried in process.
func TestInProcessRetryNeverRetriesReject(t *testing.T) {
	cfg, _, settled := setup(t, inProcess)
	calls := 0
	cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error {
		calls++
		return classify.Reject("CUSTOMER_UNKNOWN", nil)
	}
	s := runUntil(t, cfg, settled)
	if s.Action != inboxkit.ActionReject || calls != 1 {
		t.Fatalf("settled %s after %d calls", s.Action, calls)
	}
}

// The deprecated Config.OnSettled sees what it saw before Observer took
// its place: every delivery's settlement with the broker, beside an
// Observer; in store-then-process mode the receive (STORED), not the
// worker's processing, which only the Observer sees.
func TestOnSettled(t *testing.T) {
	for _, mode := range []consumer.Mode{consumer.ModeTransactional, consumer.ModeStoreThenProcess} {
		t.Run(string(mode), func(t *testing.T) {
			cfg, _, observed := setup(t)
			cfg.Mode = mode
			cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
			mine := make(chan consumer.Settled, 10)
			cfg.OnSettled = func(s consumer.Settled) { mine <- s }
			stop := start(t, cfg)
			for processed := false; !processed; {
				select {
				case s := <-observed:
					processed = s.Result.Outcome == inboxkit.OutcomeProcessed
				case <-time.After(20 * time.Second):
					t.Fatal("the Observer saw no PROCESSED settlement in 20s")
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			close(mine)
			var got []string
			for s := range mine {
				got = append(got, fmt.Sprintf("%s %s %s", s.Message.ID, s.Result.Outcome, s.Action))
			}
			want := "E-1 PROCESSED ack"
			if mode == consumer.ModeStoreThenProcess {
				want = "E-1 STORED ack"
			}
			if strings.Join(got, "; ") != want {
				t.Errorf("OnSettled saw %q, want %q", got, want)
			}
		})
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  consumer.Config
		want string
	}{
		{consumer.Config{}, "Config.Name"},
		{consumer.Config{Name: "x"}, "Config.Source"},
		{consumer.Config{Name: string(make([]byte, 81))}, "at most 80"},
	} {
		_, err := consumer.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// failingSource wraps a real source and fails one Receive after n
// deliveries, as a source that cannot repair its connection does; the other
// goroutines' Receive calls go on blocking on the real source.
type failingSource struct {
	consumer.Source
	mu     sync.Mutex
	n      int
	failed bool
}

var errSourceBroken = errors.New("source broken beyond repair")

func (f *failingSource) Receive(ctx context.Context) (consumer.Delivery, error) {
	f.mu.Lock()
	if f.n == 0 && !f.failed {
		f.failed = true
		f.mu.Unlock()
		return nil, errSourceBroken
	}
	f.n--
	f.mu.Unlock()
	return f.Source.Receive(ctx)
}

// A Receive error stops every goroutine (the others drain) and Run returns it.
func TestRunReturnsSourceError(t *testing.T) {
	cfg, _, settled := setup(t)
	cfg.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
	cfg.Source = &failingSource{Source: cfg.Source, n: 1}
	cfg.Concurrency = 3
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, errSourceBroken) {
			t.Fatalf("Run = %v, want the source's error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still running 20s after its source broke")
	}
	close(settled)
	for s := range settled {
		if s.Action != inboxkit.ActionAck {
			t.Errorf("delivery settled with %s", s.Action)
		}
	}
}

// A field that one mode would ignore is refused by New, naming the field and
// the fix; the same fields are accepted in the mode that uses them.
func TestNewRefusesFieldsTheModeIgnores(t *testing.T) {
	handler := func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
	cfg, _, _ := setup(t)
	cfg.Handler = handler
	withRetries, _, _ := setup(t, inProcess)
	withRetries.Handler = handler
	for _, tc := range []struct {
		name   string
		cfg    consumer.Config
		mode   consumer.Mode
		want   []string // in the error; none: New succeeds
		change func(*consumer.Config)
	}{
		{"lease in transactional", cfg, consumer.ModeTransactional, []string{"Config.LeaseDuration", "remove it", "store-then-process"},
			func(c *consumer.Config) { c.LeaseDuration = time.Minute }},
		{"worker poll in transactional (the default mode)", cfg, "", []string{"Config.WorkerPollInterval", "remove it", "store-then-process"},
			func(c *consumer.Config) { c.WorkerPollInterval = time.Second }},
		{"in-process retries in store-then-process", withRetries, consumer.ModeStoreThenProcess,
			[]string{"inbox.Config.Retry.InProcessRetries is 3", "set InProcessRetries to 0", "transactional"}, func(*consumer.Config) {}},
		{"lease and poll in store-then-process", cfg, consumer.ModeStoreThenProcess, nil,
			func(c *consumer.Config) { c.LeaseDuration, c.WorkerPollInterval = time.Minute, time.Second }},
		{"in-process retries in transactional", withRetries, consumer.ModeTransactional, nil, func(*consumer.Config) {}},
		{"order key in store-then-process", cfg, consumer.ModeStoreThenProcess, nil,
			func(c *consumer.Config) { c.OrderKeyFunc = func(inboxkit.Message) string { return "k" } }},
		{"order key in transactional", cfg, consumer.ModeTransactional, nil,
			func(c *consumer.Config) { c.OrderKeyFunc = func(inboxkit.Message) string { return "k" } }},
		{"park-key in store-then-process", cfg, consumer.ModeStoreThenProcess, []string{"Config.OnPoison \"park-key\"", "not built for Mode \"store-then-process\"", "transactional"},
			func(c *consumer.Config) {
				c.OrderKeyFunc, c.OnPoison = func(inboxkit.Message) string { return "k" }, consumer.OnPoisonParkKey
			}},
		{"receivers in transactional", cfg, consumer.ModeTransactional, []string{"Config.Receivers is 8", "set Concurrency instead", "store-then-process"},
			func(c *consumer.Config) { c.Receivers = 8 }},
		{"negative receivers", cfg, consumer.ModeStoreThenProcess, []string{"Config.Receivers is -1", "positive"},
			func(c *consumer.Config) { c.Receivers = -1 }},
		{"receivers with an order key", cfg, consumer.ModeStoreThenProcess, []string{"Config.Receivers is 8", "OrderKeyFunc is set", "leave Receivers out"},
			func(c *consumer.Config) {
				c.Receivers, c.OrderKeyFunc = 8, func(inboxkit.Message) string { return "k" }
			}},
		{"receivers in store-then-process", cfg, consumer.ModeStoreThenProcess, nil,
			func(c *consumer.Config) { c.Receivers = 8 }},
		{"park-key in transactional", cfg, consumer.ModeTransactional, nil,
			func(c *consumer.Config) {
				c.OrderKeyFunc, c.OnPoison = func(inboxkit.Message) string { return "k" }, consumer.OnPoisonParkKey
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Mode = tc.mode
			tc.change(&c)
			_, err := consumer.New(c)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("New = %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New = nil, want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// BatchSize and BatchWait are checked by New; in store-then-process mode
// BatchSize is the workers' batch.
func TestBatchConfig(t *testing.T) {
	base, _, _ := setup(t)
	base.Handler = func(context.Context, *sql.Tx, inboxkit.Message) error { return nil }
	for _, tc := range []struct {
		name string
		set  func(*consumer.Config)
		want string // "" = accepted
	}{
		{"default", func(*consumer.Config) {}, ""},
		{"batch 16", func(c *consumer.Config) { c.BatchSize = 16 }, ""},
		{"negative", func(c *consumer.Config) { c.BatchSize = -1 }, "Config.BatchSize is -1"},
		{"too big", func(c *consumer.Config) { c.BatchSize = 1001 }, "between 1 and 1000"},
		{"negative wait", func(c *consumer.Config) { c.BatchSize, c.BatchWait = 4, -time.Millisecond }, "Config.BatchWait is negative"},
		{"store-then-process 1", func(c *consumer.Config) { c.Mode, c.BatchSize = consumer.ModeStoreThenProcess, 1 }, ""},
		{"store-then-process 16", func(c *consumer.Config) { c.Mode, c.BatchSize = consumer.ModeStoreThenProcess, 16 }, ""}, // the workers' batch
	} {
		cfg := base
		tc.set(&cfg)
		_, err := consumer.New(cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: New: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// A replay job's stale time under inbox.MinJobStale is refused before the
// job is claimed: its heartbeat would be written every sixth of it.
func TestReplayJobStaleUnderMinimumRefused(t *testing.T) {
	cfg, a, _ := setup(t)
	ctx := context.Background()
	job, err := cfg.Store.CreateReplayJob(ctx, inbox.ReplayJob{Queue: "dlq.invoices", Selection: `{"all":true}`, Operator: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = consumer.Replay(ctx, consumer.ReplayConfig{DLQ: a, Publisher: a, Store: cfg.Store, All: true, Job: &job, JobStale: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "JobStale 500ms: give at least 1s (inbox.MinJobStale)") {
		t.Fatalf("Replay with JobStale 500ms: %v", err)
	}
	if j, err := cfg.Store.ReplayJob(ctx, job.ID); err != nil || j.State != inbox.JobRunning {
		t.Fatalf("the job after the refusal: %+v %v", j, err)
	}
}
