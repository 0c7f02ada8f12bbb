package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/dberr"
	_ "github.com/inboxkit/inboxkit/driver/mysql"    // database/sql driver "mysql" and its errors
	_ "github.com/inboxkit/inboxkit/driver/oracle"   // database/sql driver "oracle" (go-ora), pure Go
	_ "github.com/inboxkit/inboxkit/driver/postgres" // database/sql driver postgres.DriverName
	_ "github.com/inboxkit/inboxkit/driver/sqlite"   // database/sql driver "sqlite"
	"github.com/inboxkit/inboxkit/inbox"
)

const (
	envDB     = "INBOXKIT_DB"
	envBroker = "INBOXKIT_BROKER"
)

// dbFlags are the flags of a command that opens the inbox database.
type dbFlags struct {
	url         string
	table       string
	maxAttempts int
	hasAttempts bool // the command has --max-attempts
	horizon     time.Duration
	redelivery  inboxkit.Backoff // run's --requeue-delay; zero: the default
}

func (f *dbFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.url, "db", "", "database URL: postgres://..., mysql://..., sqlite:PATH, oracle://... (default $"+envDB+", then $"+envDatabaseURL+")")
	c.Flags().StringVar(&f.table, "table", inbox.DefaultTable, "inbox table name")
}

func (f *dbFlags) registerAttempts(c *cobra.Command) {
	f.hasAttempts = true
	c.Flags().IntVar(&f.maxAttempts, "max-attempts", 5, "backout threshold: technical attempts before a message is dead-lettered")
}

// openDB parses the URL, opens and pings the database.
func openDB(ctx context.Context, raw string) (*sql.DB, target.DB, error) {
	t, err := target.ParseDB(raw)
	if err != nil {
		return nil, t, err
	}
	db, err := sql.Open(t.Driver, t.DSN)
	if err != nil {
		return nil, t, &exitError{code: exitUsage, err: fmt.Errorf("database %s: %v", t.Display, err)}
	}
	if t.Driver == "sqlite" {
		db.SetMaxOpenConns(4)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		if authFailed(err) {
			return nil, t, &exitError{code: exitUsage, err: fmt.Errorf("database %s: authentication failed: %w\n\tthe server answered and refused the login: check the user and password in the URL", t.Display, err)}
		}
		return nil, t, unreachable("database", t.Display, "", err)
	}
	return db, t, nil
}

// authFailed reports whether err is a database refusing a login (the
// server answered, so it is not unreachable): PostgreSQL's SQLSTATE class
// 28 (invalid authorization: unknown role, wrong password, no pg_hba
// entry), MySQL/MariaDB's access-denied errors 1044, 1045 and 1698,
// Oracle's ORA-01017 (invalid username/password), ORA-28000 (account
// locked) and ORA-01045 (no CREATE SESSION).
func authFailed(err error) bool {
	if c, ok := dberr.Of(err); ok {
		switch c.Database {
		case dberr.Postgres:
			return strings.HasPrefix(c.SQLState, "28")
		case dberr.MySQL:
			return c.Number == 1044 || c.Number == 1045 || c.Number == 1698
		}
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "ORA-01017") || strings.Contains(msg, "ORA-28000") || strings.Contains(msg, "ORA-01045")
}

// unreachable is the error of a database or broker that cannot be reached:
// exit 2 (configuration), worded apart from "not found" (exit 1), e.g.
// "database postgres://app:xxxxx@db:5432/x unreachable: dial tcp ...".
// kind is "database" or "broker", display the redacted URL, what (may be
// empty) the operation that failed.
func unreachable(kind, display, what string, err error) error {
	if what != "" {
		what = " (" + what + ")"
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("%s %s unreachable%s: %w\n\tcheck the URL and that the %s runs", kind, display, what, err, kind)}
}

// openStore opens the database and the inbox store on it, and checks that
// the schema is at the version this build needs: a schema that is missing,
// behind or drifted is a configuration error (exit 2, "run inboxctl migrate").
func (f *dbFlags) openStore(ctx context.Context) (*inbox.Store, target.DB, error) {
	return f.openChecked(ctx, nil)
}

// openStoreForReading is openStore for the read-only commands (audit,
// stats): a table behind this build's version, the legacy seed table
// included, is read as it is (the columns it lacks as NULL), with a note
// on stderr; a missing table is exit 2 as in openStore.
func (f *dbFlags) openStoreForReading(ctx context.Context, stderr io.Writer) (*inbox.Store, target.DB, error) {
	return f.openChecked(ctx, stderr)
}

// openChecked opens the store and checks its schema; with a note writer,
// a table that exists but is behind is opened for reading (ForReading).
func (f *dbFlags) openChecked(ctx context.Context, note io.Writer) (*inbox.Store, target.DB, error) {
	st, t, err := f.openStoreUnchecked(ctx)
	if err != nil {
		return nil, t, err
	}
	err = st.CheckSchema(ctx)
	var se *inbox.SchemaError
	if note != nil && errors.As(err, &se) && !se.TableMissing {
		if r, rerr := st.ForReading(ctx); rerr != nil {
			err = rerr
		} else {
			fmt.Fprintf(note, "note: %s is at schema version %d, this build needs %d: read as it is (run inboxctl migrate before inboxctl run)\n",
				se.Table, se.Current, se.Latest)
			return r, t, nil
		}
	}
	if err != nil {
		st.DB().Close()
		if errors.Is(err, inbox.ErrSchemaOutdated) {
			return nil, t, &exitError{code: exitUsage, err: fmt.Errorf("database %s: %w", t.Display, err)}
		}
		return nil, t, err
	}
	return st, t, nil
}

// openStoreUnchecked is openStore without the schema check (migrate).
func (f *dbFlags) openStoreUnchecked(ctx context.Context) (*inbox.Store, target.DB, error) {
	if f.hasAttempts && f.maxAttempts < 1 {
		// Like IBM MQ's BOTHRESH(0), a zero threshold would mean "retry forever".
		return nil, target.DB{}, usageErr("--max-attempts must be at least 1 (got %d): a message that always fails must reach the dead-letter queue", f.maxAttempts)
	}
	db, t, err := openDB(ctx, orEnv(orEnv(f.url, envDB), envDatabaseURL))
	if err != nil {
		return nil, t, err
	}
	cfg := inbox.Config{
		Table: f.table, RedeliveryHorizon: f.horizon,
		Retry: inboxkit.RetryPolicy{MaxAttempts: f.maxAttempts, Redelivery: f.redelivery},
	}
	st, err := inbox.New(db, t.Dialect, cfg)
	if err != nil {
		db.Close()
		return nil, t, &exitError{code: exitUsage, err: err}
	}
	return st, t, nil
}

// orEnv returns v, or the environment variable name when v is empty. Flag
// defaults are not taken from the environment, so that a password in it
// never shows in --help.
func orEnv(v, name string) string {
	if v != "" {
		return v
	}
	return os.Getenv(name)
}
