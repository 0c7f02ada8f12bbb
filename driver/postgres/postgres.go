// Package postgres links PostgreSQL support: the pgx database/sql driver,
// registered as "pgx", and the same driver as DriverName ("inboxkit-pgx"),
// which sends a transaction's BEGIN with its first statement, an
// outbox.Store.Add's INSERT with its transaction's next statement or
// COMMIT, and an inbox delivery's attempt marker with the BEGIN and the
// claim after it, instead of each in a round trip of its own. Use either
// with inbox.Postgres:
//
//	import "github.com/inboxkit/inboxkit/driver/postgres"
//
//	db, err := sql.Open(postgres.DriverName, "postgres://user@host:5432/db?sslmode=disable")
//	store, err := inbox.New(db, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
//
// The inbox and the classifier read PostgreSQL errors through their
// SQLState() method, so a program that imports
// _ "github.com/jackc/pgx/v5/stdlib" and opens "pgx" gets the same
// results, with a round trip more per transaction, per outbox write and
// per delivery the broker does not mark as a first delivery.
package postgres

import _ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
