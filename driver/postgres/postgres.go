// Package postgres links PostgreSQL support: the pgx database/sql driver,
// registered as "pgx". Use it with inbox.Postgres:
//
//	import _ "github.com/inboxkit/inboxkit/driver/postgres"
//
//	db, err := sql.Open("pgx", "postgres://user@host:5432/db?sslmode=disable")
//	store, err := inbox.New(db, inbox.Postgres, inbox.Config{ClassifyFunc: classify.Of})
//
// The inbox and the classifier read PostgreSQL errors through their
// SQLState() method, so a program that imports
// _ "github.com/jackc/pgx/v5/stdlib" instead gets the same behaviour; this
// package is the uniform spelling of that import.
package postgres

import _ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
