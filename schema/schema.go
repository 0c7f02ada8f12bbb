// Package schema holds the DDL of the INBOX_EVENT_PROCESSING table for each
// supported database: the script inbox.Migrate runs on an empty database
// (the version table, the table at the latest version, its indexes and one
// INBOXKIT_SCHEMA_VERSION row per migration step). The files are generated
// from the migration steps in package inbox, and a test keeps them equal.
// To upgrade an existing table (the seed DDL's included) use
// `inboxctl migrate --dry-run`, which prints the steps still pending.
//
// Statements are separated by a semicolon at the end of a line; in
// oracle.sql by a line holding only "/".
package schema

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.sql
var files embed.FS

// TableName is the table name used in the files; Statements replaces it.
const TableName = "INBOX_EVENT_PROCESSING"

// File returns the raw DDL for a dialect: "postgres", "mysql", "sqlite" or "oracle".
func File(dialect string) (string, error) {
	b, err := files.ReadFile(dialect + ".sql")
	if err != nil {
		return "", fmt.Errorf("schema: no DDL for dialect %q (have postgres, mysql, sqlite, oracle)", dialect)
	}
	return string(b), nil
}

// Statements returns the DDL for dialect split into single statements, with
// the table name replaced by table. The caller validates table as an
// identifier before calling.
func Statements(dialect, table string) ([]string, error) {
	text, err := File(dialect)
	if err != nil {
		return nil, err
	}
	return Split(dialect, strings.ReplaceAll(text, TableName, table)), nil
}

// Split splits a DDL text into single statements: a statement ends with ';'
// at the end of a line (the ';' is dropped), except for dialect "oracle",
// where PL/SQL blocks end with a line holding only "/". Blank lines and
// "--" comment lines between statements are skipped. Other packages with
// DDL files of the same layout (invoice) use it too.
func Split(dialect, text string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		switch {
		case dialect == "oracle" && trimmed == "/":
			flush()
		case dialect != "oracle" && strings.HasSuffix(trimmed, ";"):
			cur.WriteString(strings.TrimSuffix(trimmed, ";"))
			flush()
		default:
			cur.WriteString(line)
			cur.WriteString("\n")
		}
	}
	flush()
	return out
}

// OutboxFile returns the DDL of the outbox tables (INBOXKIT_OUTBOX and
// INBOXKIT_OUTBOX_KEY) for a dialect: the script outbox.MigrateDB runs on
// an empty database, generated from package outbox's migration steps (a
// test there keeps them equal). For Oracle it is the text only: the
// outbox's relay runs on PostgreSQL, MySQL/MariaDB and SQLite.
func OutboxFile(dialect string) (string, error) {
	b, err := files.ReadFile("outbox_" + dialect + ".sql")
	if err != nil {
		return "", fmt.Errorf("schema: no outbox DDL for dialect %q (have postgres, mysql, sqlite, oracle)", dialect)
	}
	return string(b), nil
}
