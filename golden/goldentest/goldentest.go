// Package goldentest runs the approval corpus of package golden inside
// go test: one parallel subtest per case, a unified diff and the command
// that approves on a mismatch. It is the part of the harness that needs
// package testing, kept apart so that programs using golden (inboxctl
// golden verify|approve) do not link it.
//
//	func TestInvoice(t *testing.T) {
//		goldentest.Run(t, "testdata/golden", invoicegolden.Refactored(nil), golden.Label("refactored"))
//	}
//
// Importing goldentest defines the -update test flag (unless the test
// package defined one first): go test ./... -update, or
// INBOXKIT_UPDATE_GOLDEN=1, writes the approved files; with CI=true they are
// never written and a missing one fails (see golden.Updating).
package goldentest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/golden"
)

func init() {
	// Only once: a test package may define its own -update first.
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "golden: write received transcripts as approved files")
	}
}

// Run runs every case under dir (or dir itself, when it is a case) as a
// parallel subtest named after the case directory, on every backend, and
// fails each case whose transcript differs from its approved file, with a
// unified diff and the command that approves it. With -update or
// INBOXKIT_UPDATE_GOLDEN=1 it writes the approved files first; in CI
// (CI=true) it never writes them and a missing one fails.
func Run(t *testing.T, dir string, f golden.Factory, opts ...golden.Option) {
	t.Helper()
	run(t, dir, opts, func(t *testing.T, caseDir string) (*golden.Mismatch, *golden.Transcript, error) {
		return golden.CheckCase(t.Context(), caseDir, f, golden.Updating(), opts...)
	})
}

// RunBlackBox is Run for a process: every case under dir (or dir itself)
// is recorded against bb as a parallel subtest and compared with its
// approved file (label from the options; set one, e.g. "java-legacy").
// Without bb.Log, the subtest logs what the processes are told.
func RunBlackBox(t *testing.T, dir string, bb golden.BlackBox, opts ...golden.Option) {
	t.Helper()
	run(t, dir, opts, func(t *testing.T, caseDir string) (*golden.Mismatch, *golden.Transcript, error) {
		b := bb
		if b.Log == nil {
			b.Log = logWriter{t}
		}
		return golden.CheckBlackBoxCase(t.Context(), caseDir, b, golden.Updating(), opts...)
	})
}

// logWriter writes to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type checkFunc func(t *testing.T, caseDir string) (*golden.Mismatch, *golden.Transcript, error)

func run(t *testing.T, dir string, opts []golden.Option, check checkFunc) {
	t.Helper()
	cases, err := golden.SelectCases(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(filepath.Base(c), func(t *testing.T) {
			t.Parallel()
			m, tr, err := check(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if tr != nil && tr.Elapsed > 0 {
				t.Logf("recorded in %s", tr.Elapsed.Round(100*time.Millisecond))
			}
			if m == nil {
				return
			}
			how := approveCommand(t.Name())
			if m.Missing {
				t.Fatalf("no approved transcript %s\nreceived (%s): %s\nreview it, then approve with:\n\t%s", m.Approved, m.Backend, m.Received, how)
			}
			t.Fatalf("transcript differs from %s (backend %s); received: %s\n%s\nif the change is intended, approve it with:\n\t%s", m.Approved, m.Backend, m.Received, m.Diff, how)
		})
	}
}

// approveCommand is the exact command that approves the test called name.
func approveCommand(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	pkg := "."
	if wd, err := os.Getwd(); err == nil {
		if root := moduleRoot(wd); root != "" {
			if rel, err := filepath.Rel(root, wd); err == nil {
				pkg = "./" + filepath.ToSlash(rel)
				if rel == "." {
					pkg = "."
				}
				return fmt.Sprintf("(cd %s && go test %s -run '%s' -update)", root, pkg, strings.Join(parts, "/"))
			}
		}
	}
	return fmt.Sprintf("go test %s -run '%s' -update", pkg, strings.Join(parts, "/"))
}

func moduleRoot(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
