package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// scripted runs one of the scripts under scripts/ that start private
// servers in a directory of their own (a cluster, a master/slave pair):
// env names the directory and the ports.
type scripted struct {
	path string // the script, seen from this package
	env  []string
}

// newScripted makes a directory under /tmp (prefix), passes it to script
// path in the variable dirVar, with env, and at test end runs the script's
// clean (which stops its servers by PID) and removes the directory.
func newScripted(t *testing.T, path, prefix, dirVar string, env ...string) *scripted {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{path: path, env: append([]string{dirVar + "=" + dir}, env...)}
	t.Cleanup(func() {
		if out, err := s.script("clean"); err != nil {
			t.Errorf("%s clean: %v\n%s", path, err, out)
		}
		_ = os.RemoveAll(dir)
	})
	return s
}

// script runs the script with args and returns its output (stdout and
// stderr together).
func (s *scripted) script(args ...string) (string, error) {
	cmd := exec.Command(s.path, args...)
	cmd.Env = append(os.Environ(), s.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
