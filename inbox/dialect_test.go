package inbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/schema"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	q := "UPDATE t SET A = ? WHERE B = ? AND C = ?"
	for _, tc := range []struct {
		d    Dialect
		want string
	}{
		{Postgres, "UPDATE t SET A = $1 WHERE B = $2 AND C = $3"},
		{MySQL, q},
		{SQLite, q},
		{Oracle, "UPDATE t SET A = :1 WHERE B = :2 AND C = :3"},
	} {
		if got := tc.d.Rebind(q); got != tc.want {
			t.Errorf("%s: %s", tc.d, got)
		}
	}
}

// No Oracle server runs here: the Oracle statements are checked as text.
func TestOracleStatements(t *testing.T) {
	t.Parallel()
	q := buildQueries(Oracle, "INBOX_EVENT_PROCESSING")
	for name, stmt := range map[string]string{
		"insertStarted": q.insertStarted.text, "startAttempt": q.startAttempt.text, "forgetAttempt": q.forgetAttempt.text, "purgeBatch": q.purgeBatch,
		"stuckFailures": q.stuckFailures, "selectByCorr": q.selectByCorr,
	} {
		if strings.Contains(stmt, "?") || strings.Contains(stmt, "$1") {
			t.Errorf("%s has non-Oracle placeholders: %s", name, stmt)
		}
	}
	if !strings.Contains(q.purgeBatch, "ROWNUM <= :3") || !strings.Contains(q.purgeBatch, "(PROCESSED_AT < :1 OR (PROCESSED_AT IS NULL AND CREATED_AT < :2))") {
		t.Errorf("purge: %s", q.purgeBatch)
	}
	if !strings.Contains(q.stuckFailures, "FETCH FIRST :2 ROWS ONLY") {
		t.Errorf("stuck: %s", q.stuckFailures)
	}
	if !strings.Contains(q.insertStarted.text, "VALUES (:1, :2, 'TECHNICAL_FAILURE', :3, :4, :5, 1, :6, :7, :8)") {
		t.Errorf("insert: %s", q.insertStarted.text)
	}
	if !Oracle.IsDuplicate(errors.New("ORA-00001: unique constraint (APP.INBOX_EVENT_PROCESSING_PK) violated")) {
		t.Error("ORA-00001 not recognised as a duplicate")
	}
	if Oracle.IsDuplicate(errors.New("ORA-00060: deadlock detected while waiting for resource")) {
		t.Error("ORA-00060 taken for a duplicate")
	}
	stmts, err := schema.Statements("oracle", "MY_INBOX")
	if err != nil {
		t.Fatal(err)
	}
	// Version table, table, 4 indexes, the history, action, replay job,
	// replay item and attempt tables, the attempt table's index, one
	// version row per step.
	if want := 12 + SchemaVersion; len(stmts) != want {
		t.Fatalf("oracle DDL: %d statements, want %d", len(stmts), want)
	}
	for _, s := range stmts {
		// Oracle has no IF NOT EXISTS, and a ';' ends no plain statement
		// sent through a driver.
		if strings.Contains(s, "IF NOT EXISTS") || strings.HasSuffix(s, ";") || strings.Contains(s, "VARCHAR(") {
			t.Errorf("oracle statement:\n%s", s)
		}
	}
}

func TestSchemaHasSeedColumns(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"postgres", "mysql", "sqlite", "oracle"} {
		text, err := schema.File(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, col := range []string{"EVENT_ID", "CONSUMER_NAME", "STATUS", "CORRELATION_ID", "REASON_CODE", "PROCESSED_AT", "CREATED_AT",
			"ATTEMPTS", "LAST_ERROR", "UPDATED_AT", "PAYLOAD_HASH", "PAYLOAD", "HEADERS", "LEASE_OWNER", "LEASE_UNTIL", "(EVENT_ID, CONSUMER_NAME)", "(CORRELATION_ID)", "(STATUS, PROCESSED_AT)"} {
			if !strings.Contains(text, col) {
				t.Errorf("%s.sql lacks %s", d, col)
			}
		}
	}
}
