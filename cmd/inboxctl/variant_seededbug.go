//go:build inboxkit_seededbug

package main

// A test build: `run` uses roundingHandler, the refactored handler with the
// seeded bug of issue 26, item 5, and refuses to run without --shadow.
func init() { handlerVariant = roundingHandler }
