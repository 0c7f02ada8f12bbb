// Package failpoint kills the process at named points, for the torture rig
// (cmd/inboxtorture). It is armed only in binaries built with the build tag
// "failpoints"; in the default build Hit is an empty function and the
// environment variable is never read.
//
// In a failpoints build, INBOXKIT_FAILPOINTS names the points and the
// probability of dying at each hit:
//
//	INBOXKIT_FAILPOINTS=after-commit-before-ack:0.01,mid-handler:0.01,after-dlq-publish-before-mark:0.05
//
// A point that fires writes one line "inboxkit failpoint: NAME: killing the
// process" to standard error and sends SIGKILL to its own process, so no
// deferred function, no drain and no acknowledgement runs: the same as a
// kill -9 at that point.
package failpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvVar is the environment variable read by a failpoints build.
const EnvVar = "INBOXKIT_FAILPOINTS"

// Names of the points the runtime calls Hit with.
const (
	AfterCommitBeforeAck      = "after-commit-before-ack"
	MidHandler                = "mid-handler"
	AfterDLQPublishBeforeMark = "after-dlq-publish-before-mark"
	// AfterSendBeforeMark is an outbox relay's: the destination confirmed
	// a message that is not yet marked SENT.
	AfterSendBeforeMark = "after-send-before-mark"
	// ReplayAfterReopen is a replay job's: an event's row is reopened and
	// its item recorded, its message not yet sent.
	ReplayAfterReopen = "replay-after-reopen"
	// ReplayAfterSend is a replay job's: the replayed message was
	// confirmed, its item not yet marked SENT.
	ReplayAfterSend = "replay-after-send"
	// ReplayAfterMark is a replay job's: the item is marked SENT, the dead
	// letter not yet acknowledged.
	ReplayAfterMark = "replay-after-mark"
)

// Known lists the point names; Parse refuses others.
var Known = []string{AfterCommitBeforeAck, MidHandler, AfterDLQPublishBeforeMark, AfterSendBeforeMark, ReplayAfterReopen, ReplayAfterSend, ReplayAfterMark}

// Line is the prefix of the line a firing point writes to standard error.
const Line = "inboxkit failpoint: "

// Parse reads a specification "name:probability,..." (probability in
// [0, 1]). An empty specification is no points.
func Parse(spec string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, p, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%s: %q has no probability: write NAME:P, e.g. %s:0.01", EnvVar, part, MidHandler)
		}
		name = strings.TrimSpace(name)
		known := false
		for _, k := range Known {
			known = known || k == name
		}
		if !known {
			return nil, fmt.Errorf("%s: unknown point %q: use one of %s", EnvVar, name, strings.Join(Known, ", "))
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return nil, fmt.Errorf("%s: probability %q of %s must be a number from 0 to 1", EnvVar, p, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: point %s given twice", EnvVar, name)
		}
		out[name] = f
	}
	return out, nil
}
