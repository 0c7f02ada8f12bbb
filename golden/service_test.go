package golden

import (
	"slices"
	"testing"
)

// The scripted service records what it did with each call, not what the
// caller attempted: a call its caller dies in is a duplicate when the
// service took its key before (issue 23 item 14), a failed call is
// answered (nobody dies in it) and a call without a key is always new.
func TestServicesRecordWhatTheServiceDid(t *testing.T) {
	s := newServices("the caller died")
	s.during["letters"] = 3
	s.fails["letters"] = 1
	var got []string
	for _, key := range []string{"K", "K", "K", "K", "", ""} {
		c := s.call("letters", key, "")
		got = append(got, c.Result)
	}
	want := []string{
		"failed (injected fault)",                      // the fault comes first; the crash stays armed
		"sent, the caller died",                        // took K, the caller died
		"duplicate key, nothing sent, the caller died", // K again: nothing sent, the caller died again
		"duplicate key, nothing sent, the caller died",
		"sent",
		"sent",
	}
	if !slices.Equal(got, want) {
		t.Errorf("results\n%q\nwant\n%q", got, want)
	}
	var effects []CallEffect
	for _, c := range s.calls {
		effects = append(effects, c.Effect)
	}
	if want := []CallEffect{CallFailed, CallSent, CallDuplicate, CallDuplicate, CallSent, CallSent}; !slices.Equal(effects, want) {
		t.Errorf("effects %v, want %v", effects, want)
	}
	if fails, during := s.unused(); len(fails)+len(during) != 0 {
		t.Errorf("faults left %v %v, want none", fails, during)
	}
}
