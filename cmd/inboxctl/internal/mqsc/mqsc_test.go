package mqsc

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func parseFile(t *testing.T, name string) []Queue {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	qs, err := Parse(f)
	if err != nil {
		t.Fatalf("Parse %s: %v", name, err)
	}
	return qs
}

func find(qs []Queue, name string) Queue {
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	return Queue{}
}

func TestParseDisplayOutput(t *testing.T) {
	qs := parseFile(t, "display-qlocal-all.txt")
	if len(qs) != 10 {
		t.Fatalf("%d queues, want 10 (the echoed DISPLAY QLOCAL(*) starts none)", len(qs))
	}
	inv := find(qs, "INVOICE.EVENTS")
	for k, want := range map[string]string{"TYPE": "QLOCAL", "BOTHRESH": "5", "BOQNAME": "INVOICE.EVENTS.BACKOUT",
		"DESCR": "Invoice events (from billing, EU)", "CURDEPTH": "12", "USAGE": "NORMAL", "CLUSTER": ""} {
		if got, ok := inv.Attr(k); !ok || got != want {
			t.Errorf("INVOICE.EVENTS %s = %q (%v), want %q", k, got, ok, want)
		}
	}
	if inv.Type != "QLOCAL" || inv.Line != 100 {
		t.Errorf("INVOICE.EVENTS: type %q, line %d", inv.Type, inv.Line)
	}
}

func TestParseScript(t *testing.T) {
	qs := parseFile(t, "dmpmqcfg.mqsc")
	var names []string
	for _, q := range qs {
		names = append(names, q.Type+" "+q.Name)
	}
	want := []string{"QLOCAL SYSTEM.DEAD.LETTER.QUEUE", "QLOCAL INVOICE.EVENTS", "QLOCAL INVOICE.EVENTS.BACKOUT", "QLOCAL app.orders",
		"QALIAS app.orders.parked", "QLOCAL APP.ORDERS.PARKED", "QLOCAL CLAIMS", "QLOCAL LETTERS", "QLOCAL QM.PARTNER"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("queues %q\nwant %q", names, want)
	}
	for _, tc := range []struct{ queue, key, want string }{
		{"INVOICE.EVENTS", "DESCR", "Invoice events from billing  (EU and CH)"}, // '-' keeps the next line's blank
		{"INVOICE.EVENTS", "BOQNAME", "INVOICE.EVENTS.BACKOUT"},
		{"app.orders", "DESCR", "O'Brien's orders; retry 3 times (then park)"},
		{"app.orders.parked", "TARGET", "APP.ORDERS.PARKED"},
		{"LETTERS", "BOTHRESH", "2"}, // lower-case keywords
		{"QM.PARTNER", "USAGE", "XMITQ"},
	} {
		if got, _ := find(qs, tc.queue).Attr(tc.key); got != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.queue, tc.key, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for text, want := range map[string]string{
		"DEFINE QLOCAL('A') DESCR('no end)":      "line 1: DESCR(: a quoted value has no closing quote",
		"\n\nDEFINE QLOCAL('A') BOTHRESH(5":      "line 3: BOTHRESH(: no closing ')' on the line",
		"DEFINE QLOCAL('A') DESCR('x' junk)":     "line 1: DESCR(: a quoted value is not followed by ')'",
		"DEFINE QLOCAL('A') +\n   BOTHRESH(5) +": "line 1: the last line ends in a continuation",
	} {
		_, err := Parse(strings.NewReader(text))
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", text, err, want)
		}
	}
}

func TestLint(t *testing.T) {
	for _, tc := range []struct {
		file     string
		problems map[string][]string // queue -> the start of each problem
		attempts map[string]int
		skipped  []string
	}{
		{
			file: "display-qlocal-all.txt",
			problems: map[string][]string{
				"INVOICE.EVENTS":  nil,
				"ORDER.EVENTS":    {"BOTHRESH(0): MQ never moves"},
				"PAYMENT.EVENTS":  {"BOQNAME(PAYMENT.EVENTS.BO) is not defined in this file"},
				"SHIPPING.EVENTS": {"no BOQNAME"},
			},
			attempts: map[string]int{"INVOICE.EVENTS": 5, "ORDER.EVENTS": 0, "PAYMENT.EVENTS": 3, "SHIPPING.EVENTS": 10},
			skipped:  []string{"SYSTEM.ADMIN.COMMAND.QUEUE", "SYSTEM.DEAD.LETTER.QUEUE", "SYSTEM.DEFAULT.LOCAL.QUEUE", "INVOICE.EVENTS.BACKOUT", "ORDER.EVENTS.BACKOUT", "QM.PARTNER"},
		},
		{
			file: "dmpmqcfg.mqsc",
			problems: map[string][]string{
				"INVOICE.EVENTS": nil,
				"app.orders":     nil, // its BOQNAME is an alias defined in the file
				"CLAIMS":         {"BOTHRESH is not set (MQ's default is 0)", "no BOQNAME"},
				"LETTERS":        {"BOQNAME(LETTERS.BO) is not defined"},
			},
			attempts: map[string]int{"INVOICE.EVENTS": 5, "app.orders": 3, "CLAIMS": 0, "LETTERS": 2},
			skipped:  []string{"SYSTEM.DEAD.LETTER.QUEUE", "INVOICE.EVENTS.BACKOUT", "APP.ORDERS.PARKED", "QM.PARTNER"},
		},
		{
			file:     "display-clean.txt",
			problems: map[string][]string{"INVOICE.EVENTS": nil, "ORDER.EVENTS": nil},
			attempts: map[string]int{"INVOICE.EVENTS": 5, "ORDER.EVENTS": 1},
			skipped:  []string{"SYSTEM.DEAD.LETTER.QUEUE", "INVOICE.EVENTS.BACKOUT", "ORDER.EVENTS.BACKOUT"},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rep := Lint(parseFile(t, tc.file))
			if len(rep.Queues) != len(tc.problems) {
				t.Errorf("%d queues linted, want %d: %+v", len(rep.Queues), len(tc.problems), rep.Queues)
			}
			for _, q := range rep.Queues {
				want, ok := tc.problems[q.Queue]
				if !ok {
					t.Errorf("linted %s, which is not an application queue", q.Queue)
					continue
				}
				if len(q.Problems) != len(want) {
					t.Errorf("%s: problems %q, want %q", q.Queue, q.Problems, want)
					continue
				}
				for i := range want {
					if !strings.HasPrefix(q.Problems[i], want[i]) {
						t.Errorf("%s: problem %q, want it to start with %q", q.Queue, q.Problems[i], want[i])
					}
				}
				if q.MaxAttempts != tc.attempts[q.Queue] {
					t.Errorf("%s: --max-attempts %d, want %d", q.Queue, q.MaxAttempts, tc.attempts[q.Queue])
				}
			}
			var skipped []string
			for _, s := range rep.Skipped {
				skipped = append(skipped, s.Queue)
			}
			if !reflect.DeepEqual(skipped, tc.skipped) {
				t.Errorf("skipped %q, want %q", skipped, tc.skipped)
			}
		})
	}
}

// The attempts MQ gives a message under BOTHRESH(n), counted as IBM
// documents it for IBM MQ classes for JMS (delivered while BackoutCount <
// BOTHRESH; BackoutCount 0 at the first delivery, +1 per rollback), are
// the --max-attempts MaxAttempts returns.
func TestMaxAttemptsIsTheDeliveriesMQGives(t *testing.T) {
	for bothresh := 1; bothresh <= 20; bothresh++ {
		deliveries := 0
		for backoutCount := 0; backoutCount < bothresh; backoutCount++ { // each delivery fails and is rolled back
			deliveries++
		}
		if got := MaxAttempts(bothresh); got != deliveries {
			t.Errorf("BOTHRESH(%d): MQ delivers %d times, MaxAttempts = %d", bothresh, deliveries, got)
		}
	}
	if MaxAttempts(0) != 0 {
		t.Error("BOTHRESH(0) has a --max-attempts")
	}
}

// FuzzParse: any text is parsed without a panic, into queues with a name,
// and a queue written back as a DEFINE script (quoted, continued) reads
// the same.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("DEFINE QLOCAL('A') DESCR('x''y') +\n  BOTHRESH(1) -\n BOQNAME( B )")
	f.Add("CSQM401I !MQ01 QUEUE(Z) TYPE(QLOCAL) QSGDISP(QMGR) BOTHRESH(         3) BOQNAME(Z.BO)")
	f.Fuzz(func(t *testing.T, text string) {
		qs, err := Parse(strings.NewReader(text))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 {
				t.Fatalf("error %v is not a ParseError with a line", err)
			}
			return
		}
		for _, q := range qs {
			if q.Name == "" || strings.Contains(q.Name, "*") || q.Line < 1 {
				t.Fatalf("queue %+v", q)
			}
		}
		_ = Lint(qs)
		again, err := Parse(strings.NewReader(script(qs)))
		if err != nil {
			t.Fatalf("the script of %d queues does not parse: %v\n%s", len(qs), err, script(qs))
		}
		if len(again) != len(qs) {
			t.Fatalf("%d queues, %d after a round trip\n%s", len(qs), len(again), script(qs))
		}
		for i := range qs {
			if again[i].Name != qs[i].Name || !reflect.DeepEqual(again[i].Attrs, qs[i].Attrs) {
				t.Fatalf("round trip of %q:\n%+v\n%+v\n%s", qs[i].Name, qs[i], again[i], script(qs))
			}
		}
	})
}

// script writes qs as DEFINE commands, one attribute per continued line.
func script(qs []Queue) string {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	var b strings.Builder
	for _, q := range qs {
		typ := q.Type
		if !queueKeywords[typ] || typ == "QUEUE" {
			typ = "QLOCAL"
		}
		b.WriteString("DEFINE " + typ + "(" + quote(q.Name) + ")")
		for k, v := range q.Attrs {
			b.WriteString(" +\n   " + k + "(" + quote(v) + ")")
		}
		b.WriteString("\n")
	}
	return b.String()
}
