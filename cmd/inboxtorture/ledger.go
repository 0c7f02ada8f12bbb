package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// result is the ledger and the figures of a run.
type result struct {
	broker, mode, runID string
	seed                uint64

	messages, rejects, poison             int
	resends, resendsInFlight, resendsLate int
	producerRetries                       int
	kills                                 int
	deaths                                map[death]int
	restarts                              int
	dbRestarts, brokerRestarts            int
	restartErrs                           []string
	faults                                []string // the service faults run (soak.go)
	stopped                               int      // SIGSTOPs
	stopFor                               time.Duration
	garbleAfter                           int   // the hostile STOMP peer's frames per connection (0: none)
	garbled                               int64 // bytes it garbled
	timedOut                              bool
	duration                              time.Duration

	lost, doubled, stuck []string // "event: what", one per event
	validDeadLettered    int      // of lost: valid events DEAD_LETTERED
	dlqCopies            int      // messages in the DLQ
	dlqOther             int      // of them, not of a poison event
	check                string   // inboxctl check output when it found something
	keptDB               string
}

func (r *result) ok() bool {
	return len(r.lost) == 0 && len(r.doubled) == 0 && len(r.stuck) == 0 && r.check == "" && len(r.restartErrs) == 0
}

type row struct {
	status, reason string
	attempts       int
}

// ledger checks every event of the plan against the inbox rows, the
// business tables and the dead-letter queue.
func (r *rig) ledger(ctx context.Context) (*result, error) {
	res := &result{}
	rows := map[string]row{}
	q, err := r.db.QueryContext(ctx, `SELECT EVENT_ID, CONSUMER_NAME, STATUS, COALESCE(REASON_CODE, ''), ATTEMPTS FROM INBOX_EVENT_PROCESSING`)
	if err != nil {
		return nil, fmt.Errorf("ledger: read inbox: %v", err)
	}
	for q.Next() {
		var id, name string
		var x row
		if err := q.Scan(&id, &name, &x.status, &x.reason, &x.attempts); err != nil {
			q.Close()
			return nil, fmt.Errorf("ledger: read inbox: %v", err)
		}
		if name != consumerName || r.plan.byID[id] == nil {
			res.doubled = append(res.doubled, fmt.Sprintf("%s/%s: an inbox row for an event the rig never published", id, name))
			continue
		}
		rows[id] = x
	}
	q.Close()
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read inbox: %w", err)
	}
	letters, err := r.countBy(ctx, `SELECT event_id, COUNT(*) FROM shipping_letters GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	docs, err := r.countBy(ctx, `SELECT invoice_no, COUNT(*) FROM archived_documents GROUP BY invoice_no`)
	if err != nil {
		return nil, err
	}
	inDLQ, err := r.dlqIDs(ctx)
	if err != nil {
		return nil, err
	}
	for id, n := range inDLQ {
		res.dlqCopies += n
		if ev := r.plan.byID[id]; ev == nil || ev.kind != poison {
			res.dlqOther += n
		}
	}
	for _, ev := range r.plan.events {
		x, has := rows[ev.id]
		l, d := letters[ev.id], docs[ev.invoice]
		where := fmt.Sprintf("%s (%s): row %s %s attempts %d, %d letter(s), %d document(s), %d DLQ copies", ev.id, ev.kind, orNone(x.status), x.reason, x.attempts, l, d, inDLQ[ev.id])
		switch {
		case has && x.status != "PROCESSED" && x.status != "REJECTED" && x.status != "DEAD_LETTERED":
			res.stuck = append(res.stuck, where)
		case ev.kind == valid && (l > 1 || d > 1):
			res.doubled = append(res.doubled, where)
		case ev.kind == valid && (l == 0 || d == 0 || x.status != "PROCESSED"):
			res.lost = append(res.lost, where)
			if x.status == "DEAD_LETTERED" {
				res.validDeadLettered++
			}
		case ev.kind != valid && (l > 0 || d > 0):
			res.doubled = append(res.doubled, where)
		case ev.kind == reject && x.status != "REJECTED":
			res.lost = append(res.lost, where)
		case ev.kind == poison && (x.status != "DEAD_LETTERED" || inDLQ[ev.id] == 0):
			res.lost = append(res.lost, where)
		}
	}
	out, err := r.inboxctlRun(ctx, "check", "--db", r.dbURL, "--max-attempts", fmt.Sprint(r.cfg.maxAttempts))
	if err != nil {
		res.check = strings.TrimSpace(string(out))
		if res.check == "" {
			res.check = err.Error()
		}
	}
	return res, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (r *rig) countBy(ctx context.Context, query string) (map[string]int, error) {
	out := map[string]int{}
	q, err := r.db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: %v", query, err)
	}
	defer q.Close()
	for q.Next() {
		var k *string
		var n int
		if err := q.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("ledger: %s: %v", query, err)
		}
		if k != nil {
			out[*k] += n
		}
	}
	return out, q.Err()
}

// dlqListLimit is the --limit of the ledger's dlq list for a run of n
// events: above every copy the run can make (each poison event
// dead-lettered once, and again after each failpoint death between the
// publish and the mark), so that the list is never cut short. On
// RabbitMQ and JetStream a browse reads at most brokerurl.BrowseAll
// (65535) messages, far above a run's copies; ActiveMQ's browser stops at
// the queue's maxBrowsePageSize, which scripts/activemq raises.
func dlqListLimit(n int) int { return max(1000, 2*n) }

// dlqIDs lists the dead-letter queue with inboxctl dlq list: copies per event id.
func (r *rig) dlqIDs(ctx context.Context) (map[string]int, error) {
	var lastErr error
	for try := 0; try < 5; try++ {
		out, err := r.inboxctlRun(ctx, "dlq", "list", "--broker", r.cfg.brokerURL, "--queue", r.dlq, "--json", "--limit", strconv.Itoa(dlqListLimit(r.cfg.messages)))
		if err != nil {
			lastErr = fmt.Errorf("inboxctl dlq list: %v: %s", err, out)
			time.Sleep(2 * time.Second)
			continue
		}
		var es []struct {
			EventID string `json:"eventId"`
		}
		if err := json.Unmarshal(out, &es); err != nil {
			return nil, fmt.Errorf("inboxctl dlq list --json: %v", err)
		}
		m := map[string]int{}
		for _, e := range es {
			m[e.EventID]++
		}
		return m, nil
	}
	return nil, lastErr
}

// print writes the one table, then the details of anything wrong.
func (r *result) print(w io.Writer) {
	kinds := []string{}
	for k := range r.deaths {
		if k != deathKill {
			kinds = append(kinds, string(k))
		}
	}
	sort.Strings(kinds)
	var other []string
	for _, k := range kinds {
		other = append(other, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "failpoint "), r.deaths[death(k)]))
	}
	if len(other) == 0 {
		other = []string{"-"}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "broker\tmode\tmessages\tresends\tkill -9\tother deaths\trestarts\tdb/broker restarts\tlost\tdoubled\tstuck\tcheck\tduration\t")
	check := "clean"
	if r.check != "" {
		check = "FINDINGS"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d/%d\t%d\t%d\t%d\t%s\t%.1fs\t\n", r.broker, r.mode, r.messages, r.resends, r.deaths[deathKill],
		strings.Join(other, ", "), r.restarts, r.dbRestarts, r.brokerRestarts, len(r.lost), len(r.doubled), len(r.stuck), check, r.duration.Seconds())
	tw.Flush()
	fmt.Fprintf(w, "messages: %d valid, %d rejects, %d poison; resends: %d in flight, %d after the first copy was final, %d more from re-sent chunks; %d DLQ copies (%d not of poison events); seed %d\n",
		r.messages-r.rejects-r.poison, r.rejects, r.poison, r.resendsInFlight, r.resendsLate, r.producerRetries, r.dlqCopies, r.dlqOther, r.seed)
	fmt.Fprintf(w, "valid events dead-lettered: %d (counted in lost)\n", r.validDeadLettered)
	if r.stopped > 0 {
		fmt.Fprintf(w, "SIGSTOP: %d consumer(s) stopped for %v each, then continued\n", r.stopped, r.stopFor)
	}
	if r.garbleAfter > 0 {
		fmt.Fprintf(w, "hostile STOMP peer: consumer 0's connections garbage after %d frames; %d bytes garbled\n", r.garbleAfter, r.garbled)
	}
	for _, f := range r.faults {
		fmt.Fprintln(w, "fault:", f)
	}
	if r.timedOut {
		fmt.Fprintln(w, "TIMEOUT: the inbox was not quiet in time; what was open counts as stuck")
	}
	for _, e := range r.restartErrs {
		fmt.Fprintln(w, "RESTART FAILED:", e)
	}
	printIDs(w, "LOST", r.lost)
	printIDs(w, "DOUBLED", r.doubled)
	printIDs(w, "STUCK", r.stuck)
	if r.check != "" {
		fmt.Fprintf(w, "inboxctl check:\n%s\n", r.check)
	}
	if r.keptDB != "" {
		fmt.Fprintf(w, "database %s kept for inspection\n", r.keptDB)
	}
}

// printIDs writes one line per id under name, the first 20 of them.
func printIDs(w io.Writer, name string, ids []string) {
	for i, s := range ids {
		if i == 20 {
			fmt.Fprintf(w, "%s: ... and %d more\n", name, len(ids)-20)
			return
		}
		fmt.Fprintf(w, "%s: %s\n", name, s)
	}
}
