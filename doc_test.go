package inboxkit_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocListsEveryPackage: the package list of doc.go names every package
// of the module, so a new package cannot be left out of it.
func TestDocListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var missing []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == "." {
			return nil
		}
		name := d.Name()
		if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // a module of its own (bench)
		}
		if !hasPackage(t, path) {
			return nil
		}
		rel := filepath.ToSlash(path)
		if !regexp.MustCompile(`(^|[\s,(])` + regexp.QuoteMeta(rel) + `([\s,.:;)]|$)`).MatchString(text) {
			missing = append(missing, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("doc.go's package list does not name %s: add a line for each to the list in doc.go", strings.Join(missing, ", "))
	}

	// And it names no package that is gone.
	_, list, ok := strings.Cut(text, "# Packages")
	if !ok {
		t.Fatal(`doc.go has no "# Packages" section`)
	}
	for _, p := range regexp.MustCompile(`[a-z][a-z0-9_-]*(?:/[a-z0-9_.-]+)+`).FindAllString(list, -1) {
		if strings.Contains(p, ".") {
			continue // a file (docs/when-not.md), not a package
		}
		if fi, err := os.Stat(strings.Split(p, "/")[0]); err != nil || !fi.IsDir() {
			continue // not a path in this module (database/sql)
		}
		if fi, err := os.Stat(filepath.FromSlash(p)); err != nil || !fi.IsDir() || !hasPackage(t, p) {
			t.Errorf("doc.go's package list names %s, which is not a package of the module: take it out of the list", p)
		}
	}
}

// hasPackage reports whether dir holds a Go file that is not a test.
func hasPackage(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}
