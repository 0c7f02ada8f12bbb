//go:build failpoints

package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
)

// Enabled is true: this binary was built with the "failpoints" tag.
const Enabled = true

var points = load()

func load() map[string]float64 {
	p, err := Parse(os.Getenv(EnvVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return p
}

// Hit kills the process with the probability configured for name.
func Hit(name string) {
	p := points[name]
	if p <= 0 || rand.Float64() >= p {
		return
	}
	fmt.Fprintf(os.Stderr, "%s%s: killing the process\n", Line, name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
