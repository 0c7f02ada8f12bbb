package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify/breaker"
)

func Example() {
	b, err := breaker.New(breaker.Config{
		Name:        "letters",
		MaxFailures: 2,
		OpenTimeout: 30 * time.Second,
		OnStateChangeFunc: func(name string, from, to breaker.State) {
			fmt.Printf("%s: %s -> %s\n", name, from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	sendLetter := func(ctx context.Context) error { return errors.New("letter service: 503") }

	for range 3 {
		err = b.Do(context.Background(), sendLetter)
	}
	d := inboxkit.DecisionOf(err)
	fmt.Println(b.Open(), d.Reason, d.NoAttempt)
	fmt.Println(err)
	// Output:
	// letters: closed -> open
	// true CIRCUIT_OPEN true
	// technical CIRCUIT_OPEN (retry after 30s): circuit breaker "letters" is open
}
