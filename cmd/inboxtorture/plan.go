package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// kind is what an event is meant to end as.
type kind int

const (
	valid  kind = iota // one shipping letter, PROCESSED
	reject             // REJECTED (CUSTOMER_UNKNOWN), no letter
	poison             // DEAD_LETTERED (MALFORMED_PAYLOAD), in the DLQ
)

func (k kind) String() string {
	return [...]string{"valid", "reject", "poison"}[k]
}

// event is one event of the plan; resends publish the same line again.
type event struct {
	id, invoice string
	kind        kind
	line        []byte // the JSON line for inboxctl publish
}

// plan is what the rig publishes: every event once, in random order, with
// in-flight resends mixed in shortly after their first copy; late resends
// are published once their first copy has a final row.
type plan struct {
	events   []event
	byID     map[string]*event
	order    []int // indexes into events: first copies and in-flight resends
	late     []int // resent after the first copy reached a final state
	inFlight int   // in-flight resends in order
}

func newPlan(run string, n, rejects, poisons, resendPct int, rnd *rand.Rand) (*plan, error) {
	if rejects+poisons > n {
		return nil, fmt.Errorf("--rejects %d + --poison %d is more than --messages %d", rejects, poisons, n)
	}
	p := &plan{byID: map[string]*event{}}
	for i := 0; i < n; i++ {
		k := valid
		switch {
		case i < rejects:
			k = reject
		case i < rejects+poisons:
			k = poison
		}
		ev := event{id: fmt.Sprintf("tt-%s-%06d", run, i), invoice: fmt.Sprintf("INV-%s-%06d", run, i), kind: k}
		ev.line = eventLine(ev, rnd)
		p.events = append(p.events, ev)
	}
	for i := range p.events {
		p.byID[p.events[i].id] = &p.events[i]
	}
	first := rnd.Perm(n)
	resends := n * resendPct / 100
	pick := rnd.Perm(n)[:resends]
	// Half the resends go out while the first copy is likely in flight: a
	// few positions after it; the other half after it is finished.
	pos := map[int]int{}
	for i, e := range first {
		pos[e] = i
	}
	type ins struct{ at, e int }
	var inserts []ins
	for i, e := range pick {
		if i%2 == 0 {
			inserts = append(inserts, ins{pos[e] + 1 + rnd.IntN(8), e})
		} else {
			p.late = append(p.late, e)
		}
	}
	after := map[int][]int{}
	for _, x := range inserts {
		after[x.at] = append(after[x.at], x.e)
	}
	for i, e := range first {
		p.order = append(p.order, after[i]...)
		p.order = append(p.order, e)
	}
	for at := n; at <= n+8; at++ {
		p.order = append(p.order, after[at]...)
	}
	p.inFlight = len(inserts)
	return p, nil
}

func eventLine(ev event, rnd *rand.Rand) []byte {
	headers := map[string]string{"eventId": ev.id, "correlationId": "order-" + ev.invoice}
	var body any
	switch ev.kind {
	case valid:
		body = map[string]string{"invoiceNo": ev.invoice, "customerNo": []string{"K-100", "K-200"}[rnd.IntN(2)],
			"amount": fmt.Sprintf("%d.%02d", 1+rnd.IntN(5000), rnd.IntN(100)), "currency": "EUR", "issuedAt": "2026-01-05"}
	case reject:
		body = map[string]string{"invoiceNo": ev.invoice, "customerNo": "K-999", "amount": "10.00", "currency": "EUR", "issuedAt": "2026-01-05"}
	case poison:
		body = `{"invoiceNo": "` + ev.invoice + `", broken`
	}
	b, err := json.Marshal(map[string]any{"headers": headers, "body": body})
	if err != nil {
		panic(err) // only strings and maps of strings
	}
	return b
}

func (p *plan) count(k kind) int {
	n := 0
	for _, e := range p.events {
		if e.kind == k {
			n++
		}
	}
	return n
}
