package inbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inboxkit/schema"
)

// The files in package schema are the create script of the migrations, so a
// DBA reads exactly what Migrate runs on an empty database. Regenerate them
// after adding a step: INBOXKIT_UPDATE_SCHEMA=1 go test ./inbox/ -run TestSchemaFiles
func TestSchemaFilesAreTheCreateScript(t *testing.T) {
	t.Parallel()
	for _, d := range []Dialect{Postgres, MySQL, SQLite, Oracle} {
		want, err := CreateScript(d, "")
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("INBOXKIT_UPDATE_SCHEMA") != "" {
			if err := os.WriteFile(filepath.Join("..", "schema", d.name+".sql"), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := schema.File(d.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("schema/%s.sql is not the create script of the migrations; regenerate: INBOXKIT_UPDATE_SCHEMA=1 go test ./inbox/ -run TestSchemaFiles\n--- file\n%s\n--- script\n%s", d.name, got, want)
		}
	}
}
