// Package protonbroker runs Apache Qpid Proton's example C broker for
// tests: an AMQP 1.0 peer that answers a receiver's attach with
// snd-settle-mode mixed and sends every delivery pre-settled (at most
// once), as issue 23.12 found. scripts/proton-broker build compiles it
// from Debian's libqpid-proton11-dev-examples; each Start runs a process of
// its own on a private loopback port and stops it by PID at test end.
package protonbroker

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// binary is where scripts/proton-broker build puts the broker, under the
// module root, unless $INBOXKIT_PROTON_BROKER says otherwise.
const binary = "testdata/proton-broker/build/broker"

// Start runs the example broker on 127.0.0.1 and a free port, and returns
// its host:port. A missing binary fails the test with the command that
// builds it.
func Start(t testing.TB) string {
	t.Helper()
	path := os.Getenv("INBOXKIT_PROTON_BROKER")
	if path == "" {
		path = filepath.Join(moduleRoot(t), binary)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("protonbroker: Qpid Proton's example broker is not built (%v): run scripts/proton-broker build", err)
	}
	cmd := exec.Command(path, "127.0.0.1", "0")
	cmd.Dir = t.TempDir() // it looks for ssl-certs/ there, and runs without TLS when there is none
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("protonbroker: start %s: %v", path, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	port := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`^listening on (\d+)$`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
	}()
	select {
	case p := <-port:
		return "127.0.0.1:" + p
	case <-time.After(10 * time.Second):
		t.Fatalf("protonbroker: %s printed no \"listening on PORT\" within 10s", path)
		return ""
	}
}

// moduleRoot is the nearest directory above the working directory that
// holds go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("protonbroker: no go.mod above the working directory")
		}
		dir = parent
	}
}
