// Package invoice is the reference consumer of inboxkit: the refactored
// invoice-event consumer (the seed's "Nachher") that turns an InvoiceCreated
// event into a shipping letter and an archived document, exactly once.
// Package invoice/legacy is the consumer it replaces, ported faithfully so
// that approval tests can pin down what it did.
//
// # The event
//
// InvoiceCreated arrives as JSON (see [InvoiceCreated]) with the event id in
// the "eventId" header and the correlation id in "correlationId". [Decode]
// turns a bad body into poison (MALFORMED_PAYLOAD, MISSING_FIELD).
//
// # The tables
//
// invoice_customers, shipping_letters and archived_documents, in one DDL file
// per database (invoice_postgres.sql, invoice_mysql.sql, invoice_sqlite.sql,
// invoice_oracle.sql; Oracle is not tested against a live server).
// [Migrate] applies it; [SeedCustomers] fills demo customers.
//
// # The handler
//
// [NewHandler] returns a consumer.Handler. In the inbox transaction it checks
// the business rules (CUSTOMER_UNKNOWN, INVALID_AMOUNT, CURRENCY_UNSUPPORTED:
// rejections, recorded and never retried), writes the letter and the
// document, and writes the letter request to the outbox (package outbox)
// with the letter id as message id: nothing outside the database is called
// inside the transaction. A relay sends the request after the commit, at
// least once and always with the letter id as Idempotency-Key, so the letter
// provider sends one letter; a slow or failing provider holds no row lock
// and makes no event fail (the relay retries, then parks the request). Ids
// and timestamps come from Config.IDFunc and Config.Clock, so approval
// transcripts are deterministic.
//
//	out, err := outbox.New(db, inbox.SQLite, outbox.Config{})
//	h, err := invoice.NewHandler(invoice.Config{Dialect: inbox.SQLite, Outbox: out,
//		LetterDestination: "https://letters.example/v1/letters"})
//	c, err := consumer.New(consumer.Config{Name: "invoice-consumer", Handler: h, ...})
//	relay, err := outbox.NewRelay(out, outbox.RelayConfig{})    // go relay.Run(ctx)
package invoice
