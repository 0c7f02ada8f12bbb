//go:build !failpoints

package failpoint

import (
	"os/exec"
	"strings"
	"testing"
)

// The default build must not contain the failpoints: Hit ignores the
// environment, and the armed file is not compiled.
func TestDefaultBuildHasNoFailpoints(t *testing.T) {
	t.Setenv(EnvVar, "mid-handler:1,after-commit-before-ack:1,after-dlq-publish-before-mark:1")
	for _, name := range Known {
		Hit(name) // would kill the test binary if armed
	}
	if Enabled {
		t.Fatal("Enabled is true in a build without the failpoints tag")
	}
	out, err := exec.Command("go", "list", "-f", "{{.GoFiles}} {{.IgnoredGoFiles}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	compiled, ignored, _ := strings.Cut(strings.TrimSpace(string(out)), "] [")
	if strings.Contains(compiled, "on.go") || !strings.Contains(ignored, "on.go") {
		t.Fatalf("on.go (the armed failpoints) is compiled without the tag: go list says %s", out)
	}
}
