package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentPublishesKeepTheirOwnOutcome: publishes await their
// confirms together, and each still gets its own outcome: the ones to a
// missing queue (not declared) ErrUnroutable, the others nil; every message
// to the real queue arrives.
func TestConcurrentPublishesKeepTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	q, name := testQueue(t)
	dest := name("dest")
	a := open(t, Config{Queue: q})
	publish(t, a, dest, nil, "declare") // declares dest
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := dest
			if i%4 == 0 {
				to = q + ".missing"
			}
			errs[i] = a.publish(ctx, to, map[string]string{"n": fmt.Sprint(i)}, []byte("x"), false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if missing := i%4 == 0; missing != errors.Is(err, ErrUnroutable) || !missing && err != nil {
			t.Errorf("publish %d (to the missing queue: %v) = %v", i, missing, err)
		}
	}
	if got, err := a.Depth(ctx, dest); err != nil || got != 1+n-n/4 {
		t.Errorf("%s holds %d messages (%v), want %d", dest, got, err, 1+n-n/4)
	}
}
