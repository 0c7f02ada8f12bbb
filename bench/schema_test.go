package main

import (
	"context"
	"database/sql"
	"testing"
)

// TestStoreSchemaDropsWhatItCreatedOnFailure: when the inbox cannot be
// migrated in the schema storeSchema created (here a table of that name
// already there, with none of the inbox's columns), the schema goes again
// with the error.
func TestStoreSchemaDropsWhatItCreatedOnFailure(t *testing.T) {
	ctx := context.Background()
	dsn := envOr("INBOXKIT_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := "inboxbench_fail_" + suffix()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("PostgreSQL at %s (start it: pg_ctlcluster <version> main start): %v", dsn, err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE") })
	if _, err := admin.ExecContext(ctx, "CREATE TABLE "+name+".INBOX_EVENT_PROCESSING (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := storeSchema(ctx, admin, dsn, name, 2); err == nil {
		t.Fatal("storeSchema over a table without the inbox's columns: no error")
	}
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("schema %s left behind after the failure", name)
	}
}
