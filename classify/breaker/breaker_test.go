package breaker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/classify/breaker"
)

type transitions struct {
	mu   sync.Mutex
	seen []string
}

func (tr *transitions) record(name string, from, to breaker.State) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.seen = append(tr.seen, name+":"+string(from)+"->"+string(to))
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.seen, " ")
}

func newBreaker(t *testing.T, cfg breaker.Config) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fast retries in process quickly (classify.Do).
var fast = inboxkit.RetryPolicy{
	InProcessRetries: 1000,
	InProcess:        inboxkit.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
	InProcessMaxTime: time.Minute,
}

func fail(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

// waitState polls until the breaker reports want, for at most 5s.
func waitState(t *testing.T, b *breaker.Breaker, want breaker.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("state = %s, want %s", b.State(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBreakerOpensHalfOpensCloses(t *testing.T) {
	t.Parallel()
	tr := &transitions{}
	b := newBreaker(t, breaker.Config{
		Name: "letters", MaxFailures: 3, OpenTimeout: 50 * time.Millisecond, OnStateChangeFunc: tr.record,
	})
	ctx := context.Background()
	down := errors.New("letter service: 503")

	for i := range 3 {
		if b.Open() {
			t.Fatalf("open after %d failures", i)
		}
		if err := b.Do(ctx, fail(down)); err != down {
			t.Fatalf("Do = %v, want fn's error unchanged", err)
		}
	}
	if !b.Open() || b.State() != breaker.StateOpen {
		t.Fatalf("state = %s after 3 failures, want open", b.State())
	}

	// Open: fail fast, fn not called, CIRCUIT_OPEN / NoAttempt.
	called := false
	err := b.Do(ctx, func(context.Context) error { called = true; return nil })
	if called {
		t.Fatal("fn called while open")
	}
	want := inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonCircuitOpen, RetryAfter: 50 * time.Millisecond, NoAttempt: true}
	if got := classify.Of(err); got != want {
		t.Errorf("Of(open error) = %+v, want %+v", got, want)
	}
	if got := inboxkit.DecisionOf(err); got != want {
		t.Errorf("DecisionOf(open error) = %+v, want %+v", got, want)
	}
	if !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("errors.Is(%v, ErrOpen) = false", err)
	}
	if classify.IsTransient(err) {
		t.Error("IsTransient(open error) = true; it must not be retried in process")
	}
	if got := err.Error(); got != `technical CIRCUIT_OPEN (retry after 50ms): circuit breaker "letters" is open` {
		t.Errorf("Error() = %q", got)
	}

	// After OpenTimeout: half-open; a failed trial opens it again.
	waitState(t, b, breaker.StateHalfOpen)
	if err := b.Do(ctx, fail(down)); err != down {
		t.Fatalf("trial Do = %v", err)
	}
	if b.State() != breaker.StateOpen {
		t.Fatalf("state = %s after failed trial, want open", b.State())
	}

	// Half-open again; a successful trial closes it.
	waitState(t, b, breaker.StateHalfOpen)
	if err := b.Do(ctx, fail(nil)); err != nil {
		t.Fatalf("trial Do = %v", err)
	}
	if b.State() != breaker.StateClosed {
		t.Fatalf("state = %s after successful trial, want closed", b.State())
	}
	wantTr := "letters:closed->open letters:open->half-open letters:half-open->open letters:open->half-open letters:half-open->closed"
	if got := tr.String(); got != wantTr {
		t.Errorf("transitions = %s\nwant %s", got, wantTr)
	}
}

func TestBreakerIgnoresBusinessAndPoison(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, breaker.Config{MaxFailures: 2, OpenTimeout: time.Hour})
	ctx := context.Background()
	for range 10 {
		_ = b.Do(ctx, fail(classify.Reject("CUSTOMER_UNKNOWN", nil)))
		_ = b.Do(ctx, fail(classify.Poison(inboxkit.ReasonMalformedPayload, nil)))
		_ = b.Do(ctx, fail(context.Canceled))
	}
	if b.State() != breaker.StateClosed {
		t.Fatalf("state = %s after rejects, poison and cancels; want closed", b.State())
	}
	// A success in between resets the consecutive count.
	_ = b.Do(ctx, fail(errors.New("x")))
	_ = b.Do(ctx, fail(nil))
	_ = b.Do(ctx, fail(errors.New("x")))
	if b.State() != breaker.StateClosed {
		t.Fatalf("state = %s; failures were not consecutive", b.State())
	}
	_ = b.Do(ctx, fail(errors.New("x")))
	if !b.Open() {
		t.Fatalf("state = %s after 2 consecutive failures, want open", b.State())
	}
}

func TestBreakerIsFailureFunc(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, breaker.Config{MaxFailures: 1, IsFailureFunc: func(error) bool { return false }})
	_ = b.Do(context.Background(), fail(errors.New("x")))
	if b.State() != breaker.StateClosed {
		t.Fatalf("state = %s, want closed", b.State())
	}
}

func TestBreakerConcurrentHalfOpen(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, breaker.Config{MaxFailures: 1, OpenTimeout: 20 * time.Millisecond, HalfOpenMaxCalls: 2})
	ctx := context.Background()
	_ = b.Do(ctx, fail(errors.New("x")))
	waitState(t, b, breaker.StateHalfOpen)

	release := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open int
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.Do(ctx, func(context.Context) error { <-release; return nil })
			if classify.Of(err).Reason == inboxkit.ReasonCircuitOpen {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	// Four of the six calls are refused at once; two wait for release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := open
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls refused, want 4", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	if b.State() != breaker.StateClosed {
		t.Fatalf("state = %s after 2 successful trials, want closed", b.State())
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg   breaker.Config
		field string
	}{
		{breaker.Config{MaxFailures: -1}, "MaxFailures"},
		{breaker.Config{OpenTimeout: -1}, "OpenTimeout"},
		{breaker.Config{HalfOpenMaxCalls: -1}, "HalfOpenMaxCalls"},
	} {
		if _, err := breaker.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.field)
		}
	}
	b := newBreaker(t, breaker.Config{})
	if b.Name() != "breaker" || b.State() != breaker.StateClosed {
		t.Errorf("zero config: name %q state %s", b.Name(), b.State())
	}
}

// Do around a Breaker: the open circuit is returned at once, not
// retried in process.
func TestDoWithOpenBreaker(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, breaker.Config{MaxFailures: 1, OpenTimeout: time.Hour})
	ctx := context.Background()
	_ = b.Do(ctx, fail(classify.Retry(errors.New("down"))))
	calls := 0
	err := classify.Do(ctx, fast, nil, func(ctx context.Context) error {
		calls++
		return b.Do(ctx, fail(nil))
	})
	if calls != 1 || !errors.Is(err, breaker.ErrOpen) || !classify.Of(err).NoAttempt {
		t.Errorf("Do = %v after %d calls; want CIRCUIT_OPEN after 1", err, calls)
	}
}
