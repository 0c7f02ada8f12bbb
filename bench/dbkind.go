package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	_ "github.com/inboxkit/inboxkit/driver/mysql" // the "mysql" driver and the reader of its errors
	"github.com/inboxkit/inboxkit/inbox"
)

// dbKind is the database the e2e and library sections run on (-db): its
// dialect, the business table, the raw twin's SQL and how a schema of its
// own is made for one measurement.
type dbKind struct {
	name, label  string
	dialect      inbox.Dialect
	lettersDDL   string
	insertLetter string
	// rawInbox: the raw e2e twin's inbox row (event id, correlation id);
	// rawNew: the library twin's (event id, correlation id, payload hash).
	rawInbox, rawNew string
	// rawMark and rawClaim: the library twin of a marked delivery, the
	// attempt marker (event id, correlation id, payload hash) committed
	// on its own, then the claim of its row (event id) in the letter's
	// transaction.
	rawMark, rawClaim string
	// rawResend and rawStatus: the library twin of a resend that tells
	// a processed row from one still to be retried: the inbox INSERT
	// (PostgreSQL: doing nothing on a conflict; MariaDB: failing on
	// it), then the row's STATUS read in the same transaction (event id).
	rawResend, rawStatus string
	isDuplicate          func(error) bool
}

var postgresKind = dbKind{
	name: "postgres", label: "PostgreSQL", dialect: inbox.Postgres,
	lettersDDL: lettersDDL, insertLetter: insertLetter, rawInbox: rawInbox, rawNew: rawNewSQL,
	// As inboxkit's marker, the commit does not wait for its WAL flush.
	rawMark: `WITH sync AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO INBOX_EVENT_PROCESSING AS t (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
SELECT $1, 'bench', 'TECHNICAL_FAILURE', $2, now(), now(), 1, $3 FROM sync
ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO UPDATE SET ATTEMPTS = t.ATTEMPTS + 1, UPDATED_AT = now() WHERE t.STATUS = 'TECHNICAL_FAILURE'`,
	rawClaim: `UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'PROCESSED', PROCESSED_AT = now(), UPDATED_AT = now()
WHERE EVENT_ID = $1 AND CONSUMER_NAME = 'bench' AND STATUS = 'TECHNICAL_FAILURE'`,
	rawResend: rawNewSQL + ` ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO NOTHING`,
	rawStatus: `SELECT STATUS FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = $1 AND CONSUMER_NAME = 'bench'`,
	isDuplicate: func(err error) bool {
		var pg *pgconn.PgError
		return errors.As(err, &pg) && pg.Code == "23505"
	},
}

// mysqlKind is MariaDB (or MySQL) through go-sql-driver/mysql with
// interpolateParams=true: a statement with arguments is one round trip, as
// on PostgreSQL with pgx, instead of a prepare, an execute and a close.
var mysqlKind = dbKind{
	name: "mysql", label: "MariaDB", dialect: inbox.MySQL,
	lettersDDL: `CREATE TABLE shipping_letters (
  letter_id   BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id    VARCHAR(120) NOT NULL,
  invoice_no  VARCHAR(64)  NOT NULL,
  customer_no VARCHAR(64)  NOT NULL,
  created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`,
	insertLetter: `INSERT INTO shipping_letters (event_id, invoice_no, customer_no) VALUES (?, ?, ?)`,
	rawInbox: `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS)
VALUES (?, 'shipping-letters', 'PROCESSED', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1)`,
	rawNew: `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
VALUES (?, 'bench', 'PROCESSED', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1, ?)`,
	rawMark: `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
VALUES (?, 'bench', 'TECHNICAL_FAILURE', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1, ?)
ON DUPLICATE KEY UPDATE ATTEMPTS = IF(STATUS = 'TECHNICAL_FAILURE', ATTEMPTS + 1, ATTEMPTS)`,
	rawClaim: `UPDATE INBOX_EVENT_PROCESSING SET STATUS = 'PROCESSED', PROCESSED_AT = UTC_TIMESTAMP(6), UPDATED_AT = UTC_TIMESTAMP(6)
WHERE EVENT_ID = ? AND CONSUMER_NAME = 'bench' AND STATUS = 'TECHNICAL_FAILURE'`,
	rawResend: `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
VALUES (?, 'bench', 'PROCESSED', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1, ?)`,
	rawStatus: `SELECT STATUS FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = ? AND CONSUMER_NAME = 'bench'`,
	isDuplicate: func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 1062
	},
}

func kindOf(name string) (dbKind, error) {
	switch name {
	case "postgres":
		return postgresKind, nil
	case "mysql":
		return mysqlKind, nil
	}
	return dbKind{}, fmt.Errorf("-db %q: use postgres or mysql", name)
}

// newDB makes a schema of its own for one measurement on o's database: a
// PostgreSQL schema (newSchema) or a MariaDB database.
func newDB(ctx context.Context, admin *sql.DB, o options, name string, conns int) (*schema, error) {
	if o.db.name != "mysql" {
		return newSchema(ctx, admin, o.dsn, name, conns)
	}
	cfg, err := mysql.ParseDSN(o.mysqlDSN)
	if err != nil {
		return nil, fmt.Errorf("-mysql %q: %w", o.mysqlDSN, err)
	}
	madmin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	if _, err := madmin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+name); err != nil {
		madmin.Close()
		return nil, fmt.Errorf("MariaDB at -mysql %s: create database %s: %w (start it: service mariadb start)", o.mysqlDSN, name, err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		madmin.Close()
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return &schema{Name: name, DSN: cfg.FormatDSN(), DB: db, Store: db, dropFunc: func() {
		_, _ = madmin.Exec("DROP DATABASE " + name)
		madmin.Close()
	}}, nil
}

// openStore returns a migrated inbox store of o's dialect on sc, with the
// letters table.
func openStore(ctx context.Context, sc *schema, k dbKind, cfg inbox.Config) (*inbox.Store, error) {
	s, err := inbox.New(sc.Store, k.dialect, cfg)
	if err == nil {
		err = s.Migrate(ctx)
	}
	return s, err
}
