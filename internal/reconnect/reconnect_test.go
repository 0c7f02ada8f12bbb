package reconnect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
)

func TestBackoffDoublesUpToMax(t *testing.T) {
	next := Waits(inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: -1})
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}
	for i, w := range want {
		if got := next(); got != w {
			t.Errorf("wait %d = %v, want %v", i+1, got, w)
		}
	}
	next = Waits(inboxkit.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5})
	for i, w := range want {
		lo, hi := w/2, w*3/2+1
		if got := next(); got < lo || got > hi {
			t.Errorf("jittered wait %d = %v, want within [%v, %v]", i+1, got, lo, hi)
		}
	}
}

// session is a connection that a test ends by hand.
type session struct {
	Life
	closed chan struct{}
}

func (s *session) Close() {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
}

func newSession() *session { return &session{closed: make(chan struct{})} }

// TestSupervisor: a lost session makes Current wait and Ready report the
// outage with the failed attempts; the supervisor closes the dead session,
// reconnects (after a failed attempt), and Close ends everything.
func TestSupervisor(t *testing.T) {
	attempts := make(chan chan *session)
	errClosed := errors.New("test: closed")
	sv := New(Config[*session]{
		Name: "test", URL: "test://host", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: inboxkit.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Closed:  errClosed,
		Connect: func(ctx context.Context) (*session, error) {
			reply := make(chan *session)
			select {
			case attempts <- reply:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if s := <-reply; s != nil {
				return s, nil
			}
			return nil, errors.New("refused")
		},
	})
	first := newSession()
	sv.Start(first)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s, err := sv.Current(ctx); err != nil || s != first {
		t.Fatalf("Current = %v, %v; want the first session", s, err)
	}
	if err := sv.Ready(); err != nil {
		t.Fatalf("Ready while connected = %v", err)
	}

	sv.Lost(first, errors.New("broken pipe"))
	<-first.Dead()
	if err := first.Err(); err == nil || err.Error() != "broken pipe" {
		t.Errorf("Err of the lost session = %v", err)
	}
	(<-attempts) <- nil // the first reconnect attempt fails
	reply := <-attempts // the second is under way: the failure is recorded
	err := sv.Ready()
	if err == nil || !strings.Contains(err.Error(), "1 reconnect attempts failed") || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "test://host") {
		t.Errorf("Ready while reconnecting = %v", err)
	}
	select {
	case <-first.closed:
	default:
		t.Error("the dead session was not closed")
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Millisecond)
	if _, err := sv.Current(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Current while reconnecting = %v, want it to wait", err)
	}
	wcancel()
	second := newSession()
	reply <- second
	if s, err := sv.Current(ctx); err != nil || s != second {
		t.Fatalf("Current after the reconnect = %v, %v; want the second session", s, err)
	}
	if err := sv.Ready(); err != nil {
		t.Errorf("Ready after the reconnect = %v", err)
	}

	sv.Close()
	sv.Close() // idempotent
	<-second.Dead()
	if err := second.Err(); err != errClosed {
		t.Errorf("Err of the session closed by Close = %v, want Config.Closed", err)
	}
	if _, err := sv.Current(ctx); !errors.Is(err, errClosed) {
		t.Errorf("Current after Close = %v, want Config.Closed", err)
	}
	if err := sv.Ready(); !errors.Is(err, errClosed) {
		t.Errorf("Ready after Close = %v, want Config.Closed", err)
	}
}

func TestNewWithoutClosedPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Config.Closed") {
			t.Errorf("New without Closed: recovered %v, want a panic naming Config.Closed", r)
		}
	}()
	New(Config[*session]{Name: "test"})
}
