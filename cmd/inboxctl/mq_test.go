package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

const mqFixtures = "internal/mqsc/testdata/"

// Issue 23.6: `inboxctl mq lint FILE` reads saved DISPLAY QLOCAL(*) ALL
// output (or a dmpmqcfg script) and exits 1 naming each queue with
// BOTHRESH(0), no BOQNAME, or a BOQNAME not defined in the file, with the
// --max-attempts that matches each queue's BOTHRESH. The fixtures are
// hand-written from IBM's documented formats (no queue manager here).
func TestMQLint(t *testing.T) {
	t.Parallel()
	r := inboxctl(t, "", "mq", "lint", mqFixtures+"display-qlocal-all.txt")
	wantCode(t, r, exitFindings,
		"4 queue(s) checked, 6 left out",
		"PROBLEM ORDER.EVENTS (line 163): BOTHRESH(0)",
		"PROBLEM PAYMENT.EVENTS (line 225): BOQNAME(PAYMENT.EVENTS.BO) is not defined in this file",
		"PROBLEM SHIPPING.EVENTS (line 257): no BOQNAME",
		"SYSTEM.DEAD.LETTER.QUEUE (an IBM MQ system queue)", "QM.PARTNER (a transmission queue)",
		"3 problem(s)")
	for _, row := range []string{
		`INVOICE\.EVENTS\s+5\s+INVOICE\.EVENTS\.BACKOUT\s+5\s+ok`,
		`ORDER\.EVENTS\s+0\s+ORDER\.EVENTS\.BACKOUT\s+-\s+1 problem`,
		`SHIPPING\.EVENTS\s+10\s+-\s+10\s+1 problem`,
	} {
		wantMatch(t, r.stdout, row)
	}

	stdin, err := os.ReadFile(mqFixtures + "dmpmqcfg.mqsc")
	if err != nil {
		t.Fatal(err)
	}
	r = inboxctl(t, string(stdin), "mq", "lint", "-", "-o", "json")
	wantCode(t, r, exitFindings)
	var rep struct {
		Problems int
		Queues   []struct {
			Queue       string
			Bothresh    int
			MaxAttempts int
			Problems    []string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	got := map[string]int{}
	for _, q := range rep.Queues {
		got[q.Queue] = len(q.Problems)
		if q.Problems == nil {
			t.Errorf("%s: problems null, want []", q.Queue)
		}
	}
	if rep.Problems != 3 || got["CLAIMS"] != 2 || got["LETTERS"] != 1 || got["app.orders"] != 0 || got["INVOICE.EVENTS"] != 0 {
		t.Errorf("dmpmqcfg script: %+v", rep)
	}

	wantCode(t, inboxctl(t, "", "mq", "lint", mqFixtures+"display-clean.txt"), 0, "2 queue(s) checked", "no problems")
	help := inboxctl(t, "", "mq", "lint", "--help")
	wantCode(t, help, 0, "BOTHRESH(n) is --max-attempts n", "BackoutCount is inboxkit's ATTEMPTS - 1")

	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	broken := filepath.Join(dir, "broken.mqsc")
	if err := os.WriteFile(empty, []byte("AMQ8147E: IBM MQ object INVOICES not found.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("DEFINE QLOCAL('A') +\n  DESCR('no end) +\n  BOTHRESH(5)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "mq", "lint", empty), exitUsage, "holds no queue definition", "DISPLAY QLOCAL(*) ALL")
	wantCode(t, inboxctl(t, "", "mq", "lint", broken), exitUsage, "line 1: DESCR(: a quoted value has no closing quote", "nothing was checked")
	wantCode(t, inboxctl(t, "", "mq", "lint", filepath.Join(dir, "missing.txt")), exitUsage, "no such file")
	wantCode(t, inboxctl(t, "", "mq", "lint"), exitUsage, "accepts 1 arg")
}

// wantMatch wants the regular expression re to match s.
func wantMatch(t *testing.T, s, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		t.Errorf("no line matches %s in:\n%s", re, s)
	}
}
