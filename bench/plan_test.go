package main

import (
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	p := newPlan(1000, 0.2, 7)
	if len(p.Messages) != 1000 || p.Resends != 200 || p.Distinct != 800 {
		t.Fatalf("got %d messages, %d resends, %d distinct; want 1000, 200, 800", len(p.Messages), p.Resends, p.Distinct)
	}
	seen := map[string]bool{}
	resends := 0
	for i, m := range p.Messages {
		if seen[m.ID] {
			resends++
			if i == 0 {
				t.Fatal("the first message is a resend")
			}
		}
		seen[m.ID] = true
	}
	if resends != 200 || len(seen) != 800 {
		t.Fatalf("counted %d resends of %d distinct events; want 200 of 800", resends, len(seen))
	}
	if !reflect.DeepEqual(p, newPlan(1000, 0.2, 7)) {
		t.Fatal("the same seed gave another stream")
	}
	if reflect.DeepEqual(p, newPlan(1000, 0.2, 8)) {
		t.Fatal("another seed gave the same stream")
	}
}
