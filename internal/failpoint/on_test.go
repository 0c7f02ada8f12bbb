//go:build failpoints

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A point with probability 1 kills the process with SIGKILL after one line
// on standard error; a point not named does nothing.
func TestHitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit(AfterCommitBeforeAck) // not configured: nothing
		Hit(MidHandler)
		os.Exit(0) // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=mid-handler:1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, out)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\n%s", err, out)
	}
	if !strings.Contains(string(out), Line+MidHandler) {
		t.Fatalf("child output lacks %q:\n%s", Line+MidHandler, out)
	}
}
