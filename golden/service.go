package golden

import (
	"fmt"
	"maps"
	"slices"
)

// CallEffect is what a scripted downstream service did with one call.
type CallEffect string

// Call effects.
const (
	// CallSent: the service took the call as new and acted (sent the
	// letter).
	CallSent CallEffect = "sent"
	// CallDuplicate: the service had taken the call's idempotency key
	// before and did nothing again.
	CallDuplicate CallEffect = "duplicate"
	// CallFailed: the service failed (an injected fault) and did nothing.
	CallFailed CallEffect = "failed"
)

// Call is one call to an external service (see Env.Call and BlackBox).
type Call struct {
	Service, Key, Summary string
	// Effect is what the service did, not what the caller attempted.
	Effect CallEffect
	// CallerDied is true when the caller died inside the call ("crash
	// during SERVICE") and never saw the answer.
	CallerDied bool
	// Result is Effect and CallerDied in the transcript's words.
	Result string
	// Relay is true for a call made by the subject's outbox relay after
	// the commit (Subject.Relay), false for a call made inside a delivery.
	// A black-box recording cannot tell: false.
	Relay bool
}

// services are the scripted downstream services of one run, shared by
// its instances, with the faults armed on them. A service that took a key
// (CallSent) answers every later call with that key as CallDuplicate,
// including a call its caller dies in. The run's lock guards it.
type services struct {
	fails  map[string]int             // "fail SERVICE N" left, per service
	during map[string]int             // "crash during SERVICE" left, per service
	seen   map[string]map[string]bool // the keys each service took
	calls  []Call
	died   string // how the transcript says that the caller died in a call
}

func newServices(died string) *services {
	return &services{fails: map[string]int{}, during: map[string]int{}, seen: map[string]map[string]bool{}, died: died}
}

// call records a call of service with key ("": none) and returns what the
// service did, and whether the caller dies in it (an armed "crash during
// service"; a failed call is answered, nobody dies in it).
func (s *services) call(service, key, summary string) Call {
	c := Call{Service: service, Key: key, Summary: summary}
	switch {
	case s.fails[service] > 0:
		s.fails[service]--
		c.Effect = CallFailed
	case key != "" && s.seen[service][key]:
		c.Effect = CallDuplicate
	default:
		c.Effect = CallSent
		if key != "" {
			if s.seen[service] == nil {
				s.seen[service] = map[string]bool{}
			}
			s.seen[service][key] = true
		}
	}
	if c.Effect != CallFailed && s.during[service] > 0 {
		s.during[service]--
		c.CallerDied = true
	}
	c.Result = map[CallEffect]string{CallSent: "sent", CallDuplicate: "duplicate key, nothing sent", CallFailed: "failed (injected fault)"}[c.Effect]
	if c.CallerDied {
		c.Result += ", " + s.died
	}
	s.calls = append(s.calls, c)
	return c
}

// unused lists the faults left: the fails, then the crashes during a call,
// each sorted by service.
func (s *services) unused() (fails, during []string) {
	for _, k := range slices.Sorted(maps.Keys(s.fails)) {
		if s.fails[k] > 0 {
			fails = append(fails, fmt.Sprintf("fail %s: %d left", k, s.fails[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.during)) {
		if s.during[k] > 0 {
			during = append(during, fmt.Sprintf("crash %s %s: %d left", CrashDuring, k, s.during[k]))
		}
	}
	return fails, during
}
