package classify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
)

func ExampleReject() {
	err := classify.Reject("CUSTOMER_UNKNOWN", errors.New("customer 42 not found"))
	err = fmt.Errorf("invoice event e-1: %w", err) // wrapping keeps the decision

	d := classify.Of(err)
	fmt.Println(d.Class, d.Reason)
	fmt.Println(err)
	// Output:
	// BUSINESS CUSTOMER_UNKNOWN
	// invoice event e-1: rejected CUSTOMER_UNKNOWN: customer 42 not found
}

func ExamplePoison() {
	var invoice struct{ Number string }
	if err := json.Unmarshal([]byte("not json"), &invoice); err != nil {
		err = classify.Poison(inboxkit.ReasonMalformedPayload, err)

		d := classify.Of(err)
		fmt.Println(d.Class, d.Reason)
		fmt.Println(err)
	}
	// Output:
	// POISON MALFORMED_PAYLOAD
	// poison MALFORMED_PAYLOAD: invalid character 'o' in literal null (expecting 'u')
}

func ExampleRetryAfter() {
	err := classify.RetryAfter(2*time.Second, errors.New("letter service: 503"))

	d := classify.Of(err)
	fmt.Println(d.Class, d.Reason, d.RetryAfter, classify.IsTransient(err))
	// Output:
	// TECHNICAL TRANSIENT 2s true
}

func ExampleOf() {
	for _, err := range []error{
		&pgconn.PgError{Code: "40P01"},                     // PostgreSQL deadlock
		&pgconn.PgError{Code: "23505"},                     // PostgreSQL unique violation
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED),       // connection refused
		errors.New("ORA-12541: TNS:no listener"),           // Oracle, by code
		errors.New("nil pointer in the invoice formatter"), // unknown
	} {
		d := classify.Of(err)
		fmt.Printf("%s %q transient=%v\n", d.Class, d.Reason, classify.IsTransient(err))
	}
	// Output:
	// TECHNICAL "DEADLOCK" transient=true
	// TECHNICAL "CONSTRAINT_VIOLATION" transient=false
	// TECHNICAL "CONNECTION" transient=true
	// TECHNICAL "CONNECTION" transient=true
	// TECHNICAL "" transient=false
}

func ExampleDo() {
	p := inboxkit.RetryPolicy{
		InProcessRetries: 3,
		InProcess:        inboxkit.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
	}

	calls := 0
	err := classify.Do(context.Background(), p, nil, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return &pgconn.PgError{Code: "40001"} // serialization failure: retried
		}
		return nil
	})
	fmt.Println(err, calls)

	calls = 0
	err = classify.Do(context.Background(), p, nil, func(ctx context.Context) error {
		calls++
		return classify.Reject("CUSTOMER_UNKNOWN", nil) // never retried
	})
	fmt.Println(err, calls)
	// Output:
	// <nil> 3
	// rejected CUSTOMER_UNKNOWN 1
}
