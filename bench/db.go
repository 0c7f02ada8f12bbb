package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inboxkit/driver/postgres"
)

// lettersDDL is the business table every contender writes one row to per
// event. No unique constraint on event_id: the check finds a second letter.
const lettersDDL = `CREATE TABLE shipping_letters (
  letter_id   bigserial PRIMARY KEY,
  event_id    varchar(120) NOT NULL,
  invoice_no  varchar(64)  NOT NULL,
  customer_no varchar(64)  NOT NULL,
  created_at  timestamptz  NOT NULL DEFAULT now())`

const insertLetter = `INSERT INTO shipping_letters (event_id, invoice_no, customer_no) VALUES ($1, $2, $3)`

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// schema is a PostgreSQL schema of its own for one measurement.
type schema struct {
	Name string
	DSN  string // base DSN with search_path set to the schema
	DB   *sql.DB
	// Store is the pool inboxkit's stores use: on PostgreSQL opened with
	// storeDriver (inboxkit's driver, as inboxctl opens it), DB's pgx
	// "pgx" being what the raw twins use; on MariaDB DB itself.
	Store *sql.DB
	// dropFunc, when set, drops it instead (a MariaDB database).
	dropFunc func()
}

// newSchema creates schema name unless it exists (then it is reused) and
// opens a pool of conns connections with it as the search path.
func newSchema(ctx context.Context, admin *sql.DB, base, name string, conns int) (*schema, error) {
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+name); err != nil {
		return nil, fmt.Errorf("PostgreSQL: create schema %s: %w", name, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	store, err := sql.Open(storeDriver, u.String())
	if err != nil {
		db.Close()
		return nil, err
	}
	store.SetMaxOpenConns(conns)
	store.SetMaxIdleConns(conns)
	return &schema{Name: name, DSN: u.String(), DB: db, Store: store}, nil
}

// storeDriver is the database/sql driver of a schema's Store pool on
// PostgreSQL (-store-driver).
var storeDriver = postgres.DriverName

func (s *schema) drop(admin *sql.DB) {
	if s.Store != s.DB {
		s.Store.Close()
	}
	s.DB.Close()
	if s.dropFunc != nil {
		s.dropFunc()
		return
	}
	_, _ = admin.Exec("DROP SCHEMA " + s.Name + " CASCADE")
}

// letterCheck counts the letters and the distinct events they are for.
func letterCheck(ctx context.Context, db *sql.DB) (letters, events int, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT event_id) FROM shipping_letters`).Scan(&letters, &events)
	return letters, events, err
}
