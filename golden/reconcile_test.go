package golden

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// ruleConfig has one effect of each kind, as the invoice consumer's.
func ruleConfig(t *testing.T, extra string) *ReconcileConfig {
	t.Helper()
	c, err := ParseReconcileConfig([]byte(`{"effects":[
		{"name":"letters_table","legacy":{"table":"l","key":"k","columns":["invoice","amount"]}},
		{"name":"calls","kind":"call","legacy":{"table":"c","key":"k","columns":["amount"]}},
		{"name":"outcome","kind":"outcome","legacy":{"table":"o","key":"k","columns":["status","reason"]}}
	]` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rows builds rows of "col=value,col=value" specs.
func rows(specs ...string) []rrow {
	var out []rrow
	for _, s := range specs {
		var fs []field
		for _, kv := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(kv, "=")
			fs = append(fs, field{k, v})
		}
		out = append(out, newRow(fs))
	}
	return out
}

const (
	letter = "invoice=INV-1,amount=10.50"
	call   = "amount=10.50"
)

// TestBuiltinRules: each rule explains its difference and nothing near it.
func TestBuiltinRules(t *testing.T) {
	c := ruleConfig(t, "")
	type sides struct{ l, s []string }
	tests := []struct {
		name                    string
		letters, calls, outcome sides
		want                    string // rule, "" identical, "unexpected"
	}{
		{"identical", sides{[]string{letter}, []string{letter}}, sides{[]string{call}, []string{call}}, sides{}, ""},
		{"duplicate suppressed", sides{[]string{letter, letter}, []string{letter}}, sides{[]string{call, call}, []string{call}}, sides{}, RuleDuplicateSuppressed},
		{"duplicate, second letter differs", sides{[]string{letter, "invoice=INV-1,amount=11"}, []string{letter}}, sides{[]string{call, call}, []string{call}}, sides{}, "unexpected"},
		{"duplicate on the shadow side", sides{[]string{letter}, []string{letter, letter}}, sides{[]string{call}, []string{call, call}}, sides{}, "unexpected"},
		{"duplicate, shadow outcome rejected", sides{[]string{letter, letter}, []string{letter}}, sides{[]string{call, call}, []string{call}}, sides{nil, []string{"status=REJECTED,reason=X"}}, "unexpected"},
		{"sent once", sides{[]string{letter}, []string{letter}}, sides{[]string{call, call, call}, []string{call}}, sides{}, RuleSentOnce},
		{"sent once, amount differs", sides{[]string{letter}, []string{letter}}, sides{[]string{call, call}, []string{"amount=10"}}, sides{}, "unexpected"},
		{"sent once, shadow sent none", sides{[]string{letter}, []string{letter}}, sides{[]string{call, call}, nil}, sides{}, "unexpected"},
		{"rejection not retried", sides{}, sides{}, sides{[]string{"status=DEAD_LETTERED,reason=NULL"}, []string{"status=REJECTED,reason=CUSTOMER_UNKNOWN"}}, RuleRejectionNotRetried},
		{"rejection, but the legacy side wrote a letter", sides{[]string{letter}, nil}, sides{}, sides{[]string{"status=DEAD_LETTERED,reason=NULL"}, []string{"status=REJECTED,reason=CUSTOMER_UNKNOWN"}}, "unexpected"},
		{"rejection the legacy side processed", sides{}, sides{}, sides{nil, []string{"status=REJECTED,reason=CUSTOMER_UNKNOWN"}}, "unexpected"},
		{"poison at once", sides{}, sides{}, sides{[]string{"status=DEAD_LETTERED,reason=NULL"}, []string{"status=DEAD_LETTERED,reason=MALFORMED_PAYLOAD"}}, RulePoisonAtOnce},
		{"poison, shadow processed it", sides{}, sides{}, sides{[]string{"status=DEAD_LETTERED,reason=NULL"}, []string{"status=PROCESSED,reason=NULL"}}, "unexpected"},
		{"poison, shadow sent a letter", sides{}, sides{nil, []string{call}}, sides{[]string{"status=DEAD_LETTERED,reason=NULL"}, []string{"status=DEAD_LETTERED,reason=MALFORMED_PAYLOAD"}}, "unexpected"},
		{"shadow lost the event", sides{[]string{letter}, nil}, sides{[]string{call}, nil}, sides{}, "unexpected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := &event{key: "E-1", rows: [][2][]rrow{
				{rows(tt.letters.l...), rows(tt.letters.s...)},
				{rows(tt.calls.l...), rows(tt.calls.s...)},
				{rows(tt.outcome.l...), rows(tt.outcome.s...)},
			}}
			fillAbsent(ev, c.absentRows(false))
			rule, diffs, identical, ok := c.classify(ev)
			got := rule
			switch {
			case identical:
				got = ""
			case !ok:
				got = "unexpected"
			}
			if got != tt.want {
				t.Fatalf("classified %q (%v), want %q", got, diffs, tt.want)
			}
			if got == "unexpected" && len(diffs) == 0 {
				t.Fatal("unexpected without differences")
			}
		})
	}
}

// TestTeamRules: a config rule covers the differences it names, by column
// and value pattern, and no others.
func TestTeamRules(t *testing.T) {
	c := ruleConfig(t, `,"rules":[{"name":"amount-two-decimals","effect":"calls","columns":["amount"],"legacy":"\\d+\\.\\d","shadow":"\\d+\\.\\d0"},
		{"name":"extra-audit-letter","effect":"letters_table","rows":"shadow-only"}]`)
	classify := func(calls, shadowCalls, shadowLetters []string) string {
		ev := &event{key: "E-1", rows: [][2][]rrow{{rows(letter), rows(shadowLetters...)}, {rows(calls...), rows(shadowCalls...)}, {}}}
		fillAbsent(ev, c.absentRows(false))
		rule, _, identical, ok := c.classify(ev)
		switch {
		case identical:
			return ""
		case !ok:
			return "unexpected"
		}
		return rule
	}
	if got := classify([]string{"amount=10.5"}, []string{"amount=10.50"}, []string{letter}); got != "amount-two-decimals" {
		t.Fatalf("covered value: %q", got)
	}
	if got := classify([]string{"amount=10.5"}, []string{"amount=10.51"}, []string{letter}); got != "unexpected" {
		t.Fatalf("value the pattern does not cover: %q", got)
	}
	if got := classify([]string{"amount=10.5"}, []string{"amount=10.50"}, []string{letter, "invoice=AUDIT,amount=0"}); got != "amount-two-decimals+extra-audit-letter" {
		t.Fatalf("two rules: %q", got)
	}
	if got := classify([]string{call}, []string{call}, nil); got != "unexpected" {
		t.Fatalf("a legacy-only row the rule does not cover: %q", got)
	}
}

func TestReconcileConfigErrors(t *testing.T) {
	tests := []struct{ cfg, want string }{
		{`{}`, `"effects" is empty`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"bogus":1}`, `unknown field "bogus"`},
		{`{"effects":[{"legacy":{"table":"t","columns":["a"]}}]}`, `"key" is required`},
		{`{"effects":[{"legacy":{"table":"t","sql":"SELECT 1","key":"k","columns":["a"]}}]}`, `either "table" or "sql"`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]},"shadow":{"table":"t","key":"k","columns":["x AS b"]}}]}`, `name the same columns`},
		{`{"effects":[{"kind":"outcome","legacy":{"table":"t","key":"k","columns":["a"]}}]}`, `a column named "status"`},
		{`{"effects":[{"kind":"other","legacy":{"table":"t","key":"k","columns":["a"]}}]}`, `use business, call or outcome`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"scrub":["u.a"]}`, `scrub entry "u.a"`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"rules":[{"name":"r","effect":"u"}]}`, `effect "u" is not an effect`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"rules":[{"name":"r","effect":"t","legacy":"("}]}`, `rule "r": legacy`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"rules":[{"name":"duplicate-suppressed","effect":"t"}]}`, `built-in rule's`},
		{`{"effects":[{"legacy":{"table":"t","key":"k","columns":["a"]}}],"disableBuiltin":["nope"]}`, `not a built-in rule`},
		{`{"effects":[{"legacy":{"table":"t; DROP","key":"k","columns":["a"]}}]}`, `not a table name`},
	}
	for _, tt := range tests {
		_, err := ParseReconcileConfig([]byte(tt.cfg))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestReconcileKeyOrder: keys whose order differs between a database's
// collation and bytes (case, punctuation, NULL) still meet, on every
// database: each stream is sorted byte for byte.
func TestReconcileKeyOrder(t *testing.T) {
	t.Parallel()
	keys := []string{"b-1", "B-2", "a-1", "_x", "Z", "a-10", "a-9", "é", "e"}
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, s := dbtest.New(t, backend), dbtest.New(t, backend)
			d, err := inbox.DialectByName(backend)
			dbtest.Must(t, err, "dialect")
			for i, db := range []*dbtest.DB{l, s} {
				_, err := db.ExecContext(ctx, `CREATE TABLE fx (k VARCHAR(20), v VARCHAR(20))`)
				dbtest.Must(t, err, "create")
				for j, k := range keys {
					v := "same"
					if k == "Z" && i == 1 {
						v = "changed"
					}
					_, err := db.ExecContext(ctx, d.Rebind(`INSERT INTO fx (k, v) VALUES (?, ?)`), k, v)
					dbtest.Must(t, err, "insert %d", j)
				}
				_, err = db.ExecContext(ctx, `INSERT INTO fx (k, v) VALUES (NULL, 'nokey')`)
				dbtest.Must(t, err, "insert NULL key")
			}
			c, err := ParseReconcileConfig([]byte(`{"effects":[{"legacy":{"table":"fx","key":"k","columns":["v"]}}]}`))
			dbtest.Must(t, err, "config")
			rep, err := Reconcile(ctx, c, Side{DB: l.DB, Dialect: d, Name: "l"}, Side{DB: s.DB, Dialect: d, Name: "s"}, ReconcileOptions{})
			dbtest.Must(t, err, "reconcile")
			want := Counts{Events: int64(len(keys) + 1), Identical: int64(len(keys)), Unexpected: 1}
			if rep.Counts != want || fmt.Sprint(rep.UnexpectedEvents) != "[Z]" {
				t.Fatalf("counts %+v, unexpected %v; want %+v, [Z]", rep.Counts, rep.UnexpectedEvents, want)
			}
			diffs := rep.Samples["unexpected"][0].Differences
			if len(diffs) != 1 || diffs[0] != (Difference{Table: "fx", Column: "v", Legacy: "same", Shadow: "changed"}) {
				t.Fatalf("differences %+v", diffs)
			}
		})
	}
}

// TestJSONFields: the top-level scan agrees with encoding/json, and what
// is not one JSON object is left a plain column.
func TestJSONFields(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":"x","a":1.50,"c":null,"d":{"e":[1,"}"]},"f":true}`, `[{body.a 1.50} {body.b x} {body.c NULL} {body.d {"e":[1,"}"]}} {body.f true}]`},
		{` { "k\"q" : "a\nb\u00e9" } `, `[{body.k"q "a\nbé"}]`},
		{`{}`, `[]`},
		{`{"a":"x"} trailing`, `not`},
		{`{"a":}`, `not`},
		{`{"a":"x"`, `not`},
		{`["a"]`, `not`},
		{`plain text`, `not`},
	}
	for _, tt := range tests {
		fs, ok := jsonFields("body", tt.in)
		got := "not"
		if ok {
			got = fmt.Sprint(fs)
			if fs == nil {
				got = "[]"
			}
		}
		if got != tt.want {
			t.Errorf("jsonFields(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestShadowDocConfig: the config and the rules of docs/shadow.md parse.
func TestShadowDocConfig(t *testing.T) {
	b, err := os.ReadFile("../docs/shadow.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```json\n")[1:]
	if len(blocks) != 2 {
		t.Fatalf("docs/shadow.md: %d json blocks, want the config and the rules", len(blocks))
	}
	cfg, _, _ := strings.Cut(blocks[0], "```")
	rules, _, _ := strings.Cut(blocks[1], "```")
	c, err := ParseReconcileConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("the config: %v", err)
	}
	withRules := strings.TrimSuffix(strings.TrimSpace(cfg), "}") + ",\n" + rules + "}"
	if c2, err := ParseReconcileConfig([]byte(withRules)); err != nil || len(c2.Rules) != 2 || len(c.Effects) != 4 {
		t.Fatalf("the rules: %v\n%s", err, withRules)
	}
	want, err := os.ReadFile("../cmd/inboxctl/testdata/shadow-invoice.json")
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseReconcileConfig(want)
	if err != nil {
		t.Fatal(err)
	}
	we, _ := json.Marshal(w.Effects)
	ce, _ := json.Marshal(c.Effects)
	if string(we) != string(ce) {
		t.Fatalf("docs/shadow.md's config is not the one TestShadowDiffInvoice runs (cmd/inboxctl/testdata/shadow-invoice.json)")
	}
}

// TestReconcileBadQuery: a column the table lacks is an error naming the
// effect, the query and the fix.
func TestReconcileBadQuery(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	_, err := db.Exec(`CREATE TABLE fx (k VARCHAR(20), v VARCHAR(20))`)
	dbtest.Must(t, err, "create")
	c, err := ParseReconcileConfig([]byte(`{"effects":[{"legacy":{"table":"fx","key":"k","columns":["nope"]}}]}`))
	dbtest.Must(t, err, "config")
	sd := Side{DB: db.DB, Dialect: inbox.SQLite, Name: "sqlite:x"}
	_, err = Reconcile(context.Background(), c, sd, sd, ReconcileOptions{})
	if err == nil || !strings.Contains(err.Error(), "read legacy fx from sqlite:x") || !strings.Contains(err.Error(), "check the effect's table, key and columns") {
		t.Fatalf("error %v", err)
	}
}

// TestCalibrate: columns that differ between two legacy copies are noise,
// with their event counts; a row one copy lacks is not.
func TestCalibrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := dbtest.New(t, dbtest.SQLite), dbtest.New(t, dbtest.SQLite)
	for i, db := range []*dbtest.DB{a, b} {
		_, err := db.ExecContext(ctx, `CREATE TABLE fx (k VARCHAR(20), gen VARCHAR(20), v VARCHAR(20))`)
		dbtest.Must(t, err, "create")
		for j := range 3 {
			_, err := db.ExecContext(ctx, `INSERT INTO fx VALUES (?, ?, 'same')`, fmt.Sprintf("E-%d", j), fmt.Sprintf("id-%d-%d", i, j))
			dbtest.Must(t, err, "insert")
		}
		if i == 1 {
			_, err := db.ExecContext(ctx, `INSERT INTO fx VALUES ('E-9', 'x', 'only in the copy')`)
			dbtest.Must(t, err, "insert")
		}
	}
	c, err := ParseReconcileConfig([]byte(`{"effects":[{"legacy":{"table":"fx","key":"k","columns":["gen","v"]}}],"scrub":["fx.other"]}`))
	dbtest.Must(t, err, "config")
	rep, err := Reconcile(ctx, c, Side{DB: a.DB, Dialect: inbox.SQLite}, Side{DB: b.DB, Dialect: inbox.SQLite}, ReconcileOptions{Calibrate: true})
	dbtest.Must(t, err, "calibrate")
	if fmt.Sprint(rep.Noise) != "[{fx.gen 3}]" || fmt.Sprint(rep.Scrub) != "[fx.other fx.gen]" || rep.RowDifferences != 1 || fmt.Sprint(rep.UnexpectedEvents) != "[E-9]" {
		t.Fatalf("noise %v, scrub %v, row differences %d (%v)", rep.Noise, rep.Scrub, rep.RowDifferences, rep.UnexpectedEvents)
	}
}
