package outbox_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/outbox"
	"github.com/inboxkit/inboxkit/schema"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite schema/outbox_<dialect>.sql from the migration steps")

// TestSchemaFilesAreTheMigration keeps schema/outbox_<dialect>.sql equal to
// what MigrateDB runs on an empty database (go test ./outbox -run
// TestSchemaFiles -update-schema rewrites them).
func TestSchemaFilesAreTheMigration(t *testing.T) {
	for _, d := range []inbox.Dialect{inbox.Postgres, inbox.MySQL, inbox.SQLite, inbox.Oracle} {
		want, err := outbox.CreateScript(d, "")
		if err != nil {
			t.Fatal(err)
		}
		if *updateSchema {
			if err := os.WriteFile(filepath.Join("..", "schema", "outbox_"+d.Name()+".sql"), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := schema.OutboxFile(d.Name())
		if err != nil || got != want {
			t.Errorf("schema/outbox_%s.sql differs from the migration (%v): run go test ./outbox -run TestSchemaFiles -update-schema", d.Name(), err)
		}
	}
}

func TestMigrateCreatesOnceAndRecordsTheVersion(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			d, _ := inbox.DialectByName(backend)
			ctx := context.Background()
			st, err := outbox.New(db.DB, d, outbox.Config{Table: "APP_OUTBOX"})
			if err != nil {
				t.Fatal(err)
			}
			var se *outbox.SchemaError
			if err := st.CheckSchema(ctx); !errors.As(err, &se) || !se.Missing || !errors.Is(err, inbox.ErrSchemaOutdated) {
				t.Fatalf("CheckSchema before migrating: %v, want a SchemaError (missing) wrapping inbox.ErrSchemaOutdated", err)
			}
			p, err := st.Migrate(ctx)
			if err != nil || p.Current != 0 || len(p.Steps) != outbox.SchemaVersion {
				t.Fatalf("first migration: %+v, %v", p, err)
			}
			// Beside an inbox migrated into the same version table.
			if _, err := inbox.MigrateDB(ctx, db.DB, d, ""); err != nil {
				t.Fatal(err)
			}
			p, err = st.Migrate(ctx)
			if err != nil || p.Current != outbox.SchemaVersion || len(p.Steps) != 0 {
				t.Fatalf("second migration: %+v, %v: want nothing to do", p, err)
			}
			if err := st.CheckSchema(ctx); err != nil {
				t.Fatalf("CheckSchema after migrating: %v", err)
			}
			if plan, err := st.PlanMigration(ctx); err != nil || len(plan.Steps) != 0 || len(plan.Prelude) != 0 {
				t.Fatalf("plan after migrating: %+v, %v", plan, err)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	db := dbtest.New(t, dbtest.SQLite)
	for _, tc := range []struct {
		d     inbox.Dialect
		table string
	}{
		{inbox.Oracle, ""},
		{inbox.Dialect{}, ""},
		{inbox.SQLite, "X; DROP TABLE Y"},
		{inbox.SQLite, "A_VERY_LONG_OUTBOX_NAME"},
	} {
		if _, err := outbox.New(db.DB, tc.d, outbox.Config{Table: tc.table}); err == nil {
			t.Errorf("New(%q, %q) accepted", tc.d.Name(), tc.table)
		}
	}
}

// TestStep2KeepsKeylessMessagesWrittenBefore: an outbox at version 1 with a
// keyless message pending (its key row, SEQ 1) is upgraded by Migrate; a
// relay then sends it and a keyless message added after the upgrade (its
// own row, no key row), each once.
func TestStep2KeepsKeylessMessagesWrittenBefore(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			st, db := setup(t, backend)
			ctx := context.Background()
			// Back to version 1: steps 3 and 2 undone (step 3's indexes as
			// step 1 made them, step 2's index, columns), with their records.
			undo3 := []string{"DELETE FROM INBOXKIT_SCHEMA_VERSION WHERE TABLE_NAME = 'INBOXKIT_OUTBOX' AND VERSION = 3"}
			if backend == "postgres" {
				undo3 = append(undo3, "CREATE INDEX INBOXKIT_OUTBOX_CAUSE ON INBOXKIT_OUTBOX (CAUSE_EVENT_ID)",
					"DROP INDEX INBOXKIT_OUTBOX_SEQ", "ALTER TABLE INBOXKIT_OUTBOX ADD CONSTRAINT INBOXKIT_OUTBOX_SEQ UNIQUE (MSG_KEY, SEQ)")
			}
			for _, q := range append(undo3,
				map[string]string{"mysql": "DROP INDEX INBOXKIT_OUTBOX_NEXT ON INBOXKIT_OUTBOX"}[backend],
				"ALTER TABLE INBOXKIT_OUTBOX DROP COLUMN NEXT_AT",
				"ALTER TABLE INBOXKIT_OUTBOX DROP COLUMN LEASE_OWNER",
				"DELETE FROM INBOXKIT_SCHEMA_VERSION WHERE TABLE_NAME = 'INBOXKIT_OUTBOX' AND VERSION = 2",
				"INSERT INTO INBOXKIT_OUTBOX (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, BODY, STATUS, ATTEMPTS, CREATED_AT) VALUES ('old', 'old', 1, 'q', NULL, 'PENDING', 0, CURRENT_TIMESTAMP)",
				"INSERT INTO INBOXKIT_OUTBOX_KEY (MSG_KEY, LAST_SEQ, DONE_SEQ, NEXT_AT) VALUES ('old', 1, 0, CURRENT_TIMESTAMP)",
			) {
				if backend != "mysql" && strings.HasPrefix(q, "ALTER TABLE INBOXKIT_OUTBOX DROP COLUMN NEXT_AT") {
					if _, err := db.ExecContext(ctx, "DROP INDEX INBOXKIT_OUTBOX_NEXT"); err != nil {
						t.Fatal(err)
					}
				}
				if q == "" {
					continue
				}
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := st.CheckSchema(ctx); err == nil {
				t.Fatal("CheckSchema at version 1: nil, want a SchemaError")
			}
			if p, err := st.Migrate(ctx); err != nil || p.Current != 1 || len(p.Steps) != 2 {
				t.Fatalf("upgrade: %+v, %v; want steps 2 and 3", p, err)
			}
			add(t, ctx, st, outbox.Message{ID: "new", Destination: "q"})
			dst := &recorder{}
			runRelays(t, func() bool { return countStatus(t, st, outbox.StatusSent) == 2 }, newRelay(t, st, outbox.RelayConfig{SendFunc: dst.send}))
			if sent := dst.sent(); len(sent) != 2 {
				t.Errorf("%d sends, want old and new once each", len(sent))
			}
		})
	}
}

// TestStep3WritesFewerIndexEntries: after the migration the outbox on
// PostgreSQL has no index on CAUSE_EVENT_ID (an index of that name can be
// created again; the other dialects keep theirs), and its key numbers'
// unique index holds only keyed rows (SEQ > 0) and still refuses a key's
// number twice.
func TestStep3WritesFewerIndexEntries(t *testing.T) {
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			_, db := setup(t, backend)
			ctx := context.Background()
			_, err := db.ExecContext(ctx, "CREATE INDEX INBOXKIT_OUTBOX_CAUSE ON INBOXKIT_OUTBOX (CAUSE_EVENT_ID)")
			if backend != "postgres" {
				if err == nil {
					t.Error("the cause index is gone")
				}
				return
			}
			if err != nil {
				t.Errorf("the cause index is still there: %v", err)
			}
			var def string
			if err := db.QueryRowContext(ctx, "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'inboxkit_outbox_seq'").Scan(&def); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(def, "UNIQUE") || !strings.Contains(def, "WHERE (seq > 0)") {
				t.Errorf("INBOXKIT_OUTBOX_SEQ is %q, want unique and partial (seq > 0)", def)
			}
			ins := "INSERT INTO INBOXKIT_OUTBOX (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, STATUS, ATTEMPTS, CREATED_AT) VALUES ($1, 'k', 1, 'q', 'PENDING', 0, CURRENT_TIMESTAMP)"
			if _, err := db.ExecContext(ctx, ins, "a"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, ins, "b"); err == nil {
				t.Error("a second message with key k and number 1 was inserted")
			}
		})
	}
}
