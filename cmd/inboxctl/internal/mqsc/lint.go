package mqsc

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Backout is the lint of one local queue's backout settings.
type Backout struct {
	Queue string `json:"queue"`
	// Threshold is BOTHRESH (0 when the text does not set it: MQ's
	// default).
	Threshold int `json:"bothresh"`
	// RequeueQueue is BOQNAME ("" when blank or not set).
	RequeueQueue string `json:"boqname"`
	// MaxAttempts is the inboxkit --max-attempts that gives a message as
	// many tries as BOTHRESH does (see MaxAttempts); 0 when there is none
	// (BOTHRESH(0)).
	MaxAttempts int `json:"maxAttempts"`
	// Problems are what is wrong, each with what to do; empty when none.
	Problems []string `json:"problems"`
	// Line is where the queue's definition starts.
	Line int `json:"line"`
}

// Skipped is a local queue the lint leaves out, and why.
type Skipped struct {
	Queue  string `json:"queue"`
	Reason string `json:"reason"`
}

// Report is the lint of the local queues of one MQSC text.
type Report struct {
	Queues  []Backout `json:"queues"`
	Skipped []Skipped `json:"skipped"`
}

// Problems counts the problems of every queue.
func (r Report) Problems() int {
	n := 0
	for _, q := range r.Queues {
		n += len(q.Problems)
	}
	return n
}

// MaxAttempts is the inboxkit --max-attempts that matches BOTHRESH(n).
//
// MQ counts backouts, inboxkit counts attempts. IBM MQ classes for JMS
// hand a message to the application while its MQMD BackoutCount is below
// BOTHRESH, and move it to BOQNAME when it is not: BackoutCount is 0 on the
// first delivery and rises by one with each rollback, so BOTHRESH(n) gives a
// message n deliveries, and the one after the n-th rollback is moved
// without reaching the application. inboxkit's ATTEMPTS counts the handler
// runs (rule 5): --max-attempts n dead-letters the message when its n-th
// attempt fails. So the numbers are equal, and at the moment of the
// decision MQ's BackoutCount is ATTEMPTS - 1. BOTHRESH(0) has no
// counterpart: MQ then never moves a failing message (it is redelivered for
// ever), while inboxkit needs at least one attempt; MaxAttempts is 0.
func MaxAttempts(bothresh int) int {
	if bothresh < 1 {
		return 0
	}
	return bothresh
}

// Lint checks the backout settings of every local queue in qs that an
// application reads: BOTHRESH above 0, and a BOQNAME that names a queue
// defined in qs. It leaves out the queues MQ itself uses (SYSTEM.*),
// transmission queues (USAGE(XMITQ)) and the queues that are some queue's
// BOQNAME, directly or as the target of an alias of that name (nothing
// reads them under syncpoint). Queues of other types
// (an alias, a remote queue) only count as defined.
func Lint(qs []Queue) Report {
	defined := map[string]bool{}
	aliasTarget := map[string]string{}
	for _, q := range qs {
		defined[q.Name] = true
		if t, _ := q.Attr("TARGET"); q.Type == "QALIAS" && t != "" {
			aliasTarget[q.Name] = t
		}
	}
	backoutQueues := map[string]string{} // BOQNAME (or the queue its alias resolves to) -> a queue that names it
	for _, q := range qs {
		if b := boqname(q); b != "" {
			if t := aliasTarget[b]; t != "" {
				b = t
			}
			if _, ok := backoutQueues[b]; !ok {
				backoutQueues[b] = q.Name
			}
		}
	}
	rep := Report{Queues: []Backout{}, Skipped: []Skipped{}}
	for _, q := range qs {
		if q.Type != "" && q.Type != "QLOCAL" {
			continue
		}
		if skip := skipReason(q, backoutQueues); skip != "" {
			rep.Skipped = append(rep.Skipped, Skipped{Queue: q.Name, Reason: skip})
			continue
		}
		rep.Queues = append(rep.Queues, lintQueue(q, defined))
	}
	sort.SliceStable(rep.Queues, func(i, j int) bool { return rep.Queues[i].Queue < rep.Queues[j].Queue })
	return rep
}

func skipReason(q Queue, backoutQueues map[string]string) string {
	switch usage, _ := q.Attr("USAGE"); {
	case strings.HasPrefix(q.Name, "SYSTEM."):
		return "an IBM MQ system queue"
	case strings.EqualFold(usage, "XMITQ"):
		return "a transmission queue"
	case backoutQueues[q.Name] != "":
		return "the backout queue of " + backoutQueues[q.Name]
	}
	return ""
}

func lintQueue(q Queue, defined map[string]bool) Backout {
	b := Backout{Queue: q.Name, RequeueQueue: boqname(q), Problems: []string{}, Line: q.Line}
	raw, set := q.Attr("BOTHRESH")
	if set {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			b.Problems = append(b.Problems, fmt.Sprintf("BOTHRESH(%s) is not a number of backouts", raw))
		}
		b.Threshold = n
	}
	b.MaxAttempts = MaxAttempts(b.Threshold)
	if b.Threshold == 0 && len(b.Problems) == 0 {
		how := "BOTHRESH(0)"
		if !set {
			how = "BOTHRESH is not set (MQ's default is 0)"
		}
		b.Problems = append(b.Problems, how+": MQ never moves a message that keeps failing, it is redelivered for ever and blocks the queue; "+
			"set BOTHRESH to the attempts a message gets (the legacy bean's retries), and run inboxkit with that --max-attempts")
	}
	switch {
	case b.RequeueQueue == "":
		b.Problems = append(b.Problems, "no BOQNAME: a message over the threshold goes to the queue manager's dead-letter queue, or is discarded "+
			"(its report options decide), not to a queue of its own; set BOQNAME, and use that queue as inboxkit's --dlq")
	case !defined[b.RequeueQueue]:
		b.Problems = append(b.Problems, fmt.Sprintf("BOQNAME(%s) is not defined in this file: the move fails and the message goes to the dead-letter queue "+
			"or is discarded (check the name; DISPLAY QLOCAL(*) lists local queues only, an alias or remote queue of that name needs DISPLAY QUEUE(*))", b.RequeueQueue))
	}
	return b
}

// boqname is q's BOQNAME, "" when blank or not set.
func boqname(q Queue) string {
	v, _ := q.Attr("BOQNAME")
	return strings.TrimSpace(v)
}
