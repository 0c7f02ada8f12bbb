//go:build !failpoints

package failpoint

// Enabled is false: this binary was built without the "failpoints" tag.
const Enabled = false

// Hit does nothing in the default build.
func Hit(string) {}
