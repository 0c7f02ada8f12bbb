package golden

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"

	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// openDatabase creates the recording's schema on bb.DB, runs bb.SetupFunc
// in it and starts the proxy the processes reach it through ("database
// down" and "database up" cut and restore the proxy; the server is never
// touched).
func (r *bbRun) openDatabase(ctx context.Context) error {
	base, err := url.Parse(r.bb.DB)
	if err != nil || base.Scheme != "postgres" && base.Scheme != "postgresql" {
		return fmt.Errorf("golden: black-box DB %q: want a postgres:// URL", r.bb.DB)
	}
	if r.admin, err = sql.Open("pgx", r.bb.DB); err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.onClose(func() { r.admin.Close() })
	if _, err := r.admin.ExecContext(ctx, "CREATE SCHEMA "+r.schema); err != nil {
		return fmt.Errorf("golden: PostgreSQL at %s does not answer or refuses CREATE SCHEMA: %w", base.Redacted(), err)
	}
	r.onClose(func() { _, _ = r.admin.Exec("DROP SCHEMA " + r.schema + " CASCADE") })
	own := *base
	q := own.Query()
	q.Set("search_path", r.schema)
	own.RawQuery = q.Encode()
	if r.db, err = sql.Open("pgx", own.String()); err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.onClose(func() { r.db.Close() })
	if err := r.bb.SetupFunc(ctx, r.db); err != nil {
		return fmt.Errorf("golden: black-box setup: %w", err)
	}
	port := base.Port()
	if port == "" {
		port = "5432"
	}
	if r.proxy, err = tcpproxy.New(net.JoinHostPort(base.Hostname(), port)); err != nil {
		return fmt.Errorf("golden: database proxy: %w", err)
	}
	r.onClose(r.proxy.Close)
	return nil
}

// databaseEnv tells a process where the recording's schema is: as a
// PostgreSQL URL with search_path (EnvDB) and as a JDBC URL with
// currentSchema (EnvJDBCURL), both through the proxy.
func (r *bbRun) databaseEnv() []string {
	u, _ := url.Parse(r.bb.DB)
	pu := *u
	pu.Host = r.proxy.Addr()
	q := pu.Query()
	q.Set("search_path", r.schema)
	pu.RawQuery = q.Encode()
	jq := url.Values{}
	jq.Set("currentSchema", r.schema)
	if u.User != nil {
		jq.Set("user", u.User.Username())
		if p, ok := u.User.Password(); ok {
			jq.Set("password", p)
		}
	}
	jdbc := "jdbc:postgresql://" + r.proxy.Addr() + u.Path + "?" + jq.Encode()
	return []string{EnvDB + "=" + pu.String(), EnvJDBCURL + "=" + jdbc}
}

// inboxColumns lists the columns of inboxShown that exist in
// the schema's INBOX_EVENT_PROCESSING (none when there is no such table).
func (r *bbRun) inboxColumns(ctx context.Context) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT upper(column_name) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'inbox_event_processing'`, r.schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		have[c] = true
	}
	var out []string
	for _, c := range inboxShown {
		if have[c] {
			out = append(out, c)
		}
	}
	return out, rows.Err()
}

// outboxTable is the outbox table a black-box recording shows when the
// process created it (package outbox's default table).
const outboxTable = "INBOXKIT_OUTBOX"

// hasOutbox reports whether the schema holds the outbox table.
func (r *bbRun) hasOutbox(ctx context.Context) (bool, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = lower($2)`, r.schema, outboxTable).Scan(&n)
	return n > 0, err
}

// outboxPending counts the outbox's PENDING rows (0 without an outbox):
// messages a relay has yet to send.
func (r *bbRun) outboxPending(ctx context.Context) (int, error) {
	ok, err := r.hasOutbox(ctx)
	if err != nil || !ok {
		return 0, err
	}
	var n int
	err = r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+outboxTable+" WHERE STATUS = 'PENDING'").Scan(&n)
	return n, err
}
