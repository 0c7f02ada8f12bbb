package inbox

import (
	"strings"
	"testing"
)

// The seed table on Oracle gets plain ALTER TABLE ... ADD statements with
// Oracle types, no IF NOT EXISTS, and the version rows.
func TestOracleUpgradeFromSeed(t *testing.T) {
	t.Parallel()
	seed := schemaState{tableExists: true, columns: map[string]bool{}, indexes: map[string]bool{"PK_INBOX_EVENT": true}}
	for _, c := range steps[0].create {
		seed.columns[c.name] = true
	}
	p := plan(Oracle, DefaultTable, seed)
	text := p.Text()
	for _, want := range []string{
		"CREATE TABLE INBOXKIT_SCHEMA_VERSION (",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD ATTEMPTS NUMBER(10) DEFAULT 0 NOT NULL\n/\nUPDATE INBOX_EVENT_PROCESSING SET ATTEMPTS = 1 WHERE ATTEMPTS = 0\n/",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD LAST_ERROR VARCHAR2(1000)\n/",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD PAYLOAD BLOB\n/",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD HEADERS CLOB\n/",
		"CREATE INDEX INBOX_EVENT_PROCESSING_RET ON INBOX_EVENT_PROCESSING (STATUS, PROCESSED_AT)\n/",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD EVENT_ID_SOURCE VARCHAR2(40)\n/",
		"ALTER TABLE INBOX_EVENT_PROCESSING ADD ORDER_KEY VARCHAR2(120)\n/",
		"INSERT INTO INBOXKIT_SCHEMA_VERSION (TABLE_NAME, VERSION, DESCRIPTION) VALUES ('INBOX_EVENT_PROCESSING', 5, ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Oracle upgrade lacks %q:\n%s", want, text)
		}
	}
	for _, st := range p.Statements() {
		if strings.Contains(st, "IF NOT EXISTS") || strings.Contains(st, "VARCHAR(") || strings.HasSuffix(st, ";") || strings.Contains(st, "CREATE TABLE INBOX_EVENT_PROCESSING") {
			t.Errorf("not an Oracle statement for the upgrade: %s", st)
		}
	}
	cols, ixs, exists := Oracle.schema.columnsQuery, Oracle.schema.indexesQuery, Oracle.schema.existsQuery
	for _, q := range []string{cols, ixs, exists} {
		if !strings.Contains(q, "UPPER(:1)") || !strings.Contains(q, "FROM USER_") {
			t.Errorf("Oracle introspection: %s", q)
		}
	}
	lock, unlock := Oracle.schema.lock, Oracle.schema.unlock
	if !strings.Contains(lock, "DBMS_LOCK.REQUEST") || !strings.Contains(lock, "FALSE") || !strings.Contains(unlock, "DBMS_LOCK.RELEASE") {
		t.Errorf("Oracle lock: %s / %s", lock, unlock)
	}
	// Statements of the store bind :1, :2, ... and page with FETCH FIRST.
	q := buildQueries(Oracle, DefaultTable)
	if !strings.Contains(q.insertStarted.text, ":8)") || strings.Contains(q.insertStarted.text, "?") {
		t.Errorf("insert: %s", q.insertStarted.text)
	}
}
