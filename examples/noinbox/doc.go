// Package noinbox holds the examples of docs/when-not.md: four consumers
// that are safe against duplicate deliveries without an inbox table, each
// because something else already forbids the duplicate. The examples are
// in example_test.go and run with go test, so the page cannot describe
// code that no longer works.
//
//   - Example_idempotentHandler: the handler sets a state instead of
//     changing it; applying it twice leaves the same row.
//   - Example_idempotencyKey: the receiver has no transactional database;
//     the downstream service takes the event id as its idempotency key.
//   - Example_uniqueBusinessKey: a unique business key (the invoice
//     number) already refuses the second row.
//   - Example_brokerDeduplication: the processing stays inside the broker;
//     JetStream drops a publish whose message id it has seen.
package noinbox
