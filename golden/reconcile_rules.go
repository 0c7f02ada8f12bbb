package golden

import (
	"slices"
	"strings"
)

// The built-in rules: differences every migration from a legacy bean to an
// inboxkit consumer shows on purpose. Each reads the effects by kind; none
// applies to an event with a difference it does not explain.
const (
	// RuleDuplicateSuppressed: the legacy side applied a resent (or
	// redelivered) event more than once, the shadow once. Every business
	// and call effect holds the same distinct rows on both sides, the
	// shadow each once, and some business row more than once on the legacy
	// side; the outcomes are equal.
	RuleDuplicateSuppressed = "duplicate-suppressed"
	// RuleRejectionNotRetried: a business rejection (unknown customer)
	// that the legacy bean threw back until the broker's redelivery limit
	// dead-lettered it, the shadow rejected at once: the legacy outcome
	// DEAD_LETTERED, the shadow's REJECTED, no business or call rows on
	// either side.
	RuleRejectionNotRetried = "rejection-not-retried"
	// RulePoisonAtOnce: a poison message (malformed) dead-lettered by the
	// shadow at once instead of after the broker's limit: DEAD_LETTERED on
	// both sides, no business or call rows, the outcomes differing in
	// other columns only (the reason, the attempts).
	RulePoisonAtOnce = "poison-dead-lettered-at-once"
	// RuleSentOnce: the letter (any call) sent once instead of once per
	// retry: the legacy bean called before its commit, the commit failed
	// and the redelivery called again. The business effects and outcomes
	// are equal; every call effect holds the same distinct rows, the
	// shadow each once, the legacy side some more than once.
	RuleSentOnce = "sent-once-not-per-retry"
)

// BuiltinRules are the built-in rules in the order they are tried.
var BuiltinRules = []string{RuleDuplicateSuppressed, RuleRejectionNotRetried, RulePoisonAtOnce, RuleSentOnce}

var builtinMeaning = map[string]string{
	RuleDuplicateSuppressed: "legacy applied a resend or redelivery more than once, the shadow once",
	RuleRejectionNotRetried: "a business rejection: legacy retried it into the broker's dead-letter queue, the shadow rejected it at once",
	RulePoisonAtOnce:        "a poison message: the shadow dead-lettered it at once, legacy after the broker's redelivery limit",
	RuleSentOnce:            "a call (the letter) sent once instead of once per retry",
}

// RuleMeaning says what a rule (built-in or the config's) means.
func (c *ReconcileConfig) RuleMeaning(name string) string {
	if m, ok := builtinMeaning[name]; ok {
		return m
	}
	for _, r := range c.Rules {
		if r.Name == name {
			return r.Meaning
		}
	}
	return ""
}

// event is one key's rows: per effect, [0] legacy, [1] shadow.
type event struct {
	key  string
	rows [][2][]rrow
}

// counts is a multiset of rows.
func counts(rows []rrow) map[string]int {
	m := make(map[string]int, len(rows))
	for _, r := range rows {
		m[r.canon]++
	}
	return m
}

// sameRows reports whether two row lists are equal as multisets.
func sameRows(a, b []rrow) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 1 {
		return a[0].canon == b[0].canon
	}
	ca := counts(a)
	for _, r := range b {
		ca[r.canon]--
	}
	for _, n := range ca {
		if n != 0 {
			return false
		}
	}
	return true
}

// multiplied reports whether legacy holds the shadow's distinct rows, the
// shadow each once, and more says whether legacy holds some more than once.
func multiplied(legacy, shadow []rrow) (ok, more bool) {
	cl, cs := counts(legacy), counts(shadow)
	if len(cl) != len(cs) {
		return false, false
	}
	for k, n := range cs {
		if n != 1 || cl[k] == 0 {
			return false, false
		}
		more = more || cl[k] > 1
	}
	return true, more
}

// status is the "status" of a side's only outcome row ("" if not one row).
func status(rows []rrow) string {
	if len(rows) != 1 {
		return ""
	}
	for _, f := range rows[0].fields {
		if f.name == "status" {
			return f.value
		}
	}
	return ""
}

// builtin reports whether the built-in rule name explains the event.
func (c *ReconcileConfig) builtin(name string, ev *event) bool {
	switch name {
	case RuleDuplicateSuppressed, RuleSentOnce:
		moreBusiness, moreCalls := false, false
		for i, e := range c.Effects {
			l, s := ev.rows[i][0], ev.rows[i][1]
			switch {
			case e.Kind == KindOutcome:
				if !sameRows(l, s) {
					return false
				}
			case e.Kind == KindBusiness && name == RuleSentOnce:
				if !sameRows(l, s) {
					return false
				}
			default:
				ok, more := multiplied(l, s)
				if !ok {
					return false
				}
				if e.Kind == KindBusiness {
					moreBusiness = moreBusiness || more
				} else {
					moreCalls = moreCalls || more
				}
			}
		}
		if name == RuleDuplicateSuppressed {
			return moreBusiness
		}
		return moreCalls
	case RuleRejectionNotRetried, RulePoisonAtOnce:
		want := "REJECTED"
		if name == RulePoisonAtOnce {
			want = "DEAD_LETTERED"
		}
		outcomes := 0
		for i, e := range c.Effects {
			l, s := ev.rows[i][0], ev.rows[i][1]
			if e.Kind != KindOutcome {
				if len(l) > 0 || len(s) > 0 {
					return false
				}
				continue
			}
			outcomes++
			if status(l) != "DEAD_LETTERED" || status(s) != want {
				return false
			}
		}
		return outcomes > 0
	}
	return false
}

// Difference is one differing value of an event: a column of a row present
// on both sides, or (Column "*") a row present on one side only.
type Difference struct {
	Table  string `json:"table"`
	Column string `json:"column"`
	Legacy string `json:"legacy"`
	Shadow string `json:"shadow"`
	// Rows is "legacy-only" or "shadow-only" for a row on one side only.
	Rows string `json:"rows,omitempty"`
}

// absent is the text of a value missing on a side.
const absent = "(absent)"

// differences pairs the rows of each effect that are not equal on both
// sides (each legacy row with the shadow row it differs least from) and
// lists what differs.
func (c *ReconcileConfig) differences(ev *event) []Difference {
	var out []Difference
	for i, e := range c.Effects {
		l, s := ev.rows[i][0], ev.rows[i][1]
		if sameRows(l, s) {
			continue
		}
		// Take out the rows both sides hold.
		cs := counts(s)
		var ol []rrow
		for _, r := range l {
			if cs[r.canon] > 0 {
				cs[r.canon]--
				continue
			}
			ol = append(ol, r)
		}
		cl := counts(l)
		var os []rrow
		for _, r := range s {
			if cl[r.canon] > 0 {
				cl[r.canon]--
				continue
			}
			os = append(os, r)
		}
		used := make([]bool, len(os))
		for _, lr := range ol {
			best, bestN := -1, 0
			for j, sr := range os {
				if used[j] {
					continue
				}
				if n := len(fieldDiffs(lr, sr)); best < 0 || n < bestN {
					best, bestN = j, n
				}
			}
			if best < 0 {
				out = append(out, Difference{Table: e.Name, Column: "*", Legacy: rowText(lr), Shadow: absent, Rows: "legacy-only"})
				continue
			}
			used[best] = true
			for _, d := range fieldDiffs(lr, os[best]) {
				d.Table = e.Name
				out = append(out, d)
			}
		}
		for j, sr := range os {
			if !used[j] {
				out = append(out, Difference{Table: e.Name, Column: "*", Legacy: absent, Shadow: rowText(sr), Rows: "shadow-only"})
			}
		}
	}
	return out
}

// fieldDiffs lists the columns where two rows differ.
func fieldDiffs(a, b rrow) []Difference {
	var out []Difference
	i, j := 0, 0
	for i < len(a.fields) || j < len(b.fields) {
		switch {
		case j >= len(b.fields) || i < len(a.fields) && a.fields[i].name < b.fields[j].name:
			out = append(out, Difference{Column: a.fields[i].name, Legacy: a.fields[i].value, Shadow: absent})
			i++
		case i >= len(a.fields) || b.fields[j].name < a.fields[i].name:
			out = append(out, Difference{Column: b.fields[j].name, Legacy: absent, Shadow: b.fields[j].value})
			j++
		default:
			if a.fields[i].value != b.fields[j].value {
				out = append(out, Difference{Column: a.fields[i].name, Legacy: a.fields[i].value, Shadow: b.fields[j].value})
			}
			i++
			j++
		}
	}
	return out
}

func rowText(r rrow) string {
	parts := make([]string, len(r.fields))
	for i, f := range r.fields {
		parts[i] = f.name + "=" + f.value
	}
	return strings.Join(parts, " ")
}

// covers reports whether the team's rule r covers difference d.
func (r *Rule) covers(d Difference) bool {
	if d.Table != r.Effect || d.Rows != r.Rows {
		return false
	}
	if d.Rows == "" && len(r.Columns) > 0 && !slices.Contains(r.Columns, d.Column) {
		return false
	}
	if r.legacyRe != nil && !r.legacyRe.MatchString(d.Legacy) {
		return false
	}
	if r.shadowRe != nil && !r.shadowRe.MatchString(d.Shadow) {
		return false
	}
	return true
}

// classify sorts an event: "" identical, else the rule that explains it,
// or unexpected (ok false) with its differences.
func (c *ReconcileConfig) classify(ev *event) (rule string, diffs []Difference, identical, ok bool) {
	same := true
	for i := range c.Effects {
		if !sameRows(ev.rows[i][0], ev.rows[i][1]) {
			same = false
			break
		}
	}
	if same {
		return "", nil, true, true
	}
	for _, name := range BuiltinRules {
		if slices.Contains(c.DisableBuiltin, name) {
			continue
		}
		if c.builtin(name, ev) {
			return name, nil, false, true
		}
	}
	diffs = c.differences(ev)
	used := make([]bool, len(c.Rules))
	for _, d := range diffs {
		covered := false
		for i := range c.Rules {
			if c.Rules[i].covers(d) {
				covered, used[i] = true, true
				break
			}
		}
		if !covered {
			return "", diffs, false, false
		}
	}
	// The names in the config's order: one category per combination.
	var names []string
	for i, u := range used {
		if u {
			names = append(names, c.Rules[i].Name)
		}
	}
	if len(names) == 0 {
		return "", diffs, false, false
	}
	return strings.Join(names, "+"), diffs, false, true
}
