package golden

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Scenario is a parsed scenario file. See the package documentation for
// the format.
type Scenario struct {
	// Queue is the destination the messages are delivered from. Defaults
	// to "events".
	Queue string
	// MaxAttempts is the inbox backout threshold. Defaults to 3.
	MaxAttempts int
	// BrokerMaxDeliveries is the broker's own redelivery limit: a message
	// delivered this many times without an acknowledgement goes to the
	// broker's dead-letter queue (what the legacy consumer relies on).
	// Defaults to 5.
	BrokerMaxDeliveries int
	// Instances is the number of consumer instances. Defaults to 1.
	Instances int
	// BatchSize is the consumer's consumer.Config.BatchSize: up to this
	// many queued deliveries go to instance 1 as one batch
	// (consumer.HandleBatch). Not in the file: set by the BatchSize option,
	// so that one approved transcript holds for every size. 0 or 1: one at
	// a time.
	BatchSize int
	// Messages are the defined messages, in file order.
	Messages []*Message
	// Steps are the steps, in file order.
	Steps []Step
}

// Message is a message a scenario can send.
type Message struct {
	// Name is how steps refer to the message; it is not sent.
	Name string
	// Headers in file order; a name may not repeat.
	Headers []Header
	// Body is the payload.
	Body string
}

// Header is one message header.
type Header struct{ Name, Value string }

// StepKind is the kind of a Step.
type StepKind string

// Step kinds.
const (
	// StepSend: the producer sends the message; the broker delivers until
	// its queue is empty.
	StepSend StepKind = "send"
	// StepFail: the next Count calls of Service fail ("commit": the next
	// Count commits fail with a database error).
	StepFail StepKind = "fail"
	// StepCrash: the next delivery crashes at Point.
	StepCrash StepKind = "crash"
	// StepNote: a comment copied into the transcript.
	StepNote StepKind = "note"
	// StepDatabase: the database becomes unreachable ("database down") or
	// reachable again ("database up"), in Point. Black-box recordings only:
	// the recorder cuts its TCP proxy between the process and the database.
	StepDatabase StepKind = "database"
)

// Crash points.
const (
	// CrashBeforeCommit: the process dies after the handler ran and before
	// the commit; nothing is acknowledged, the broker redelivers.
	CrashBeforeCommit = "before-commit"
	// CrashAfterCommit: the process dies after the commit and before the
	// acknowledgement reached the broker; the broker redelivers.
	CrashAfterCommit = "after-commit"
	// CrashDuring: the process dies inside the next call of Step.Service
	// ("crash during letter-service"): the service got the request (it is
	// recorded as what the service did: sent, or a duplicate of a key it
	// took before) and the caller never sees the answer. The black-box
	// recorder kills the process with SIGKILL from inside the call and
	// starts it again.
	CrashDuring = "during"
)

// ServiceCommit is the Step.Service that makes commits fail.
const ServiceCommit = "commit"

// Step is one line of the scenario's script.
type Step struct {
	Kind StepKind
	// Message names the message of a send.
	Message string
	// Parallel > 1 sends that many copies at once, one to each instance.
	Parallel int
	// With are more messages of a send ("send A B C"), sent together with
	// Message: all are queued before the broker delivers, and their first
	// deliveries happen at the same scenario time, back to back, so that
	// a consumer with a BatchSize above 1 gets them in one batch.
	With []string
	// Service and Count of a fail step; Service of a crash during step.
	Service string
	Count   int
	// Point of a crash step: CrashBeforeCommit, CrashAfterCommit or
	// CrashDuring.
	Point string
	// Text of a note.
	Text string
	// Line is the line number in the file (0 when built in code).
	Line int
}

// SyntaxError is a scenario parse error with its line.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("golden: scenario line %d: %s", e.Line, e.Msg)
}

const maxCount = 1000

// Parse reads a scenario file.
func Parse(data []byte) (*Scenario, error) {
	s := &Scenario{}
	var cur *Message
	seen := map[string]bool{}
	bodyLines := map[*Message]int{}
	lines := strings.Split(string(data), "\n")
	for i, raw := range lines {
		n := i + 1
		line := strings.TrimRight(raw, "\r")
		fail := func(format string, args ...any) error {
			return &SyntaxError{Line: n, Msg: fmt.Sprintf(format, args...)}
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if cur == nil {
				return nil, fail("indented line outside a message block: %q", trimmed)
			}
			kw, rest, _ := strings.Cut(strings.TrimLeft(line, " \t"), " ")
			switch kw {
			case "header":
				name, value, _ := strings.Cut(rest, " ")
				if name == "" || strings.ContainsAny(name, " \t") {
					return nil, fail("header needs a name: header NAME VALUE")
				}
				if slices.ContainsFunc(cur.Headers, func(h Header) bool { return h.Name == name }) {
					return nil, fail("header %q repeated in message %q", name, cur.Name)
				}
				cur.Headers = append(cur.Headers, Header{Name: name, Value: value})
			case "body":
				if bodyLines[cur] > 0 {
					cur.Body += "\n"
				}
				bodyLines[cur]++
				cur.Body += rest
			default:
				return nil, fail("unknown message line %q: use header NAME VALUE or body TEXT", kw)
			}
			continue
		}
		cur = nil
		f := strings.Fields(trimmed)
		num := func(i int, what string) (int, error) {
			if len(f) <= i {
				return 0, fail("%s needs a number", f[0])
			}
			v, err := strconv.Atoi(f[i])
			if err != nil || v < 1 || v > maxCount {
				return 0, fail("%s: %q is not a number from 1 to %d", what, f[i], maxCount)
			}
			return v, nil
		}
		args := func(min, max int) error {
			if len(f)-1 < min || len(f)-1 > max {
				return fail("%s takes %d to %d arguments, got %d", f[0], min, max, len(f)-1)
			}
			return nil
		}
		var err error
		switch f[0] {
		case "queue":
			if err = args(1, 1); err == nil {
				s.Queue = f[1]
			}
		case "max-attempts":
			if err = args(1, 1); err == nil {
				s.MaxAttempts, err = num(1, "max-attempts")
			}
		case "broker-max-deliveries":
			if err = args(1, 1); err == nil {
				s.BrokerMaxDeliveries, err = num(1, "broker-max-deliveries")
			}
		case "instances":
			if err = args(1, 1); err == nil {
				s.Instances, err = num(1, "instances")
			}
		case "message":
			if err = args(1, 1); err != nil {
				break
			}
			if seen[f[1]] {
				return nil, fail("message %q defined twice", f[1])
			}
			seen[f[1]] = true
			cur = &Message{Name: f[1]}
			s.Messages = append(s.Messages, cur)
		case "send":
			if err = args(1, 16); err != nil {
				break
			}
			st := Step{Kind: StepSend, Message: f[1], Parallel: 1, Line: n}
			switch {
			case len(f) > 2 && f[2] == "parallel":
				if len(f) != 4 {
					return nil, fail("send NAME [parallel N] | send NAME NAME...")
				}
				if st.Parallel, err = num(3, "parallel"); err != nil {
					break
				}
			case len(f) > 2:
				st.With = f[2:]
			}
			s.Steps = append(s.Steps, st)
		case "fail":
			if err = args(2, 2); err != nil {
				break
			}
			st := Step{Kind: StepFail, Service: f[1], Line: n}
			if st.Count, err = num(2, "fail"); err == nil {
				s.Steps = append(s.Steps, st)
			}
		case "crash":
			if err = args(1, 2); err != nil {
				break
			}
			switch {
			case f[1] == CrashDuring && len(f) == 3:
				s.Steps = append(s.Steps, Step{Kind: StepCrash, Point: CrashDuring, Service: f[2], Line: n})
			case (f[1] == CrashBeforeCommit || f[1] == CrashAfterCommit) && len(f) == 2:
				s.Steps = append(s.Steps, Step{Kind: StepCrash, Point: f[1], Line: n})
			default:
				return nil, fail("crash %s: use crash %s, crash %s or crash %s SERVICE", strings.Join(f[1:], " "), CrashBeforeCommit, CrashAfterCommit, CrashDuring)
			}
		case "note":
			s.Steps = append(s.Steps, Step{Kind: StepNote, Text: strings.Join(f[1:], " "), Line: n})
		case "database":
			if err = args(1, 1); err != nil {
				break
			}
			if f[1] != "down" && f[1] != "up" {
				return nil, fail("database %s: use database down or database up", f[1])
			}
			s.Steps = append(s.Steps, Step{Kind: StepDatabase, Point: f[1], Line: n})
		default:
			return nil, fail("unknown directive %q (queue, max-attempts, broker-max-deliveries, instances, message, send, fail, crash, database, note)", f[0])
		}
		if err != nil {
			return nil, err
		}
	}
	s.setDefaults()
	for _, st := range s.Steps {
		if st.Kind != StepSend {
			continue
		}
		for _, name := range append([]string{st.Message}, st.With...) {
			if s.Message(name) == nil {
				return nil, &SyntaxError{Line: st.Line, Msg: fmt.Sprintf("send %s: no message of that name (send NAME [parallel N], or send NAME NAME... for several at once)", name)}
			}
		}
		if st.Parallel > s.Instances {
			return nil, &SyntaxError{Line: st.Line, Msg: fmt.Sprintf("send %s parallel %d: only %d instances (set instances %d)", st.Message, st.Parallel, s.Instances, st.Parallel)}
		}
	}
	return s, nil
}

func (s *Scenario) setDefaults() {
	if s.Queue == "" {
		s.Queue = "events"
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 3
	}
	if s.BrokerMaxDeliveries == 0 {
		s.BrokerMaxDeliveries = 5
	}
	if s.Instances == 0 {
		s.Instances = 1
	}
}

// Message returns the message called name, or nil.
func (s *Scenario) Message(name string) *Message {
	for _, m := range s.Messages {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Format writes s back in the scenario format; Parse(Format(s)) equals s
// (apart from Step.Line and bodies with leading or trailing line breaks).
func Format(s *Scenario) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "queue %s\nmax-attempts %d\nbroker-max-deliveries %d\ninstances %d\n", s.Queue, s.MaxAttempts, s.BrokerMaxDeliveries, s.Instances)
	for _, m := range s.Messages {
		fmt.Fprintf(&b, "message %s\n", m.Name)
		for _, h := range m.Headers {
			fmt.Fprintf(&b, "  header %s %s\n", h.Name, h.Value)
		}
		if m.Body != "" {
			for _, l := range strings.Split(m.Body, "\n") {
				fmt.Fprintf(&b, "  body %s\n", l)
			}
		}
	}
	for _, st := range s.Steps {
		switch st.Kind {
		case StepSend:
			if st.Parallel > 1 {
				fmt.Fprintf(&b, "send %s parallel %d\n", st.Message, st.Parallel)
			} else {
				fmt.Fprintf(&b, "send %s\n", strings.Join(append([]string{st.Message}, st.With...), " "))
			}
		case StepFail:
			fmt.Fprintf(&b, "fail %s %d\n", st.Service, st.Count)
		case StepCrash:
			if st.Point == CrashDuring {
				fmt.Fprintf(&b, "crash %s %s\n", st.Point, st.Service)
			} else {
				fmt.Fprintf(&b, "crash %s\n", st.Point)
			}
		case StepNote:
			fmt.Fprintf(&b, "note %s\n", st.Text)
		case StepDatabase:
			fmt.Fprintf(&b, "database %s\n", st.Point)
		}
	}
	return b.Bytes()
}
