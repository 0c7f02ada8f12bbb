package golden

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Reconciliation (`inboxctl shadow diff`): the legacy consumer and the
// refactored one, run as a shadow on a copy of the same messages, each left
// its effects in its own database. Reconcile compares them per event, in the
// harness's normalized form (the cells of a transcript's tables, formatted
// by the same function for every driver), and sorts every event into
// identical, an expected difference (a named rule) or unexpected.
//
// The configuration (JSON, ReconcileConfig) names the effects to compare:
// per effect a source on each side, a key per row (the event id, or a
// business key for legacy rows without one) and the columns compared by
// name. An effect is of a kind: "business" (the consumer's own tables),
// "call" (outgoing messages and calls, as recorded: the legacy side's call
// log, the shadow's outbox) or "outcome" (the inbox status, the legacy
// side's dead letters: a column named "status", and the row an event
// without one is taken to have, Absent). The kinds are what the built-in
// rules read.

// Effect kinds.
const (
	KindBusiness = "business"
	KindCall     = "call"
	KindOutcome  = "outcome"
)

// ReconcileConfig is the configuration of a reconciliation, as read from
// JSON by ParseReconcileConfig. See docs/shadow.md for an example.
type ReconcileConfig struct {
	// Consumer names the consumer (report only).
	Consumer string `json:"consumer,omitempty"`
	// Effects are compared per key. At least one.
	Effects []Effect `json:"effects"`
	// Scrub lists the columns that are noise ("EFFECT.COLUMN", a JSON field
	// "EFFECT.COLUMN.FIELD"; a trailing ".*" takes every field): not
	// compared, not counted. `shadow diff --calibrate` prints them.
	Scrub []string `json:"scrub,omitempty"`
	// Rules are the team's own expected differences, tried after the
	// built-in ones.
	Rules []Rule `json:"rules,omitempty"`
	// DisableBuiltin names built-in rules not to apply.
	DisableBuiltin []string `json:"disableBuiltin,omitempty"`
}

// Effect is one kind of effect of an event, read from each side.
type Effect struct {
	// Name names the effect in the report ("table"); defaults to the
	// legacy source's table.
	Name string `json:"name,omitempty"`
	// Kind is KindBusiness (default), KindCall or KindOutcome.
	Kind string `json:"kind,omitempty"`
	// Legacy is where the legacy side keeps it.
	Legacy Source `json:"legacy"`
	// Shadow is where the shadow keeps it; omitted: as Legacy.
	Shadow *Source `json:"shadow,omitempty"`
	// JSON lists the compared columns that hold a JSON object: each of its
	// top-level fields is compared as a column of its own, COLUMN.FIELD.
	JSON []string `json:"json,omitempty"`
	// Absent is the row an event without a row of this effect is taken to
	// have, per column name (outcome effects: {"status": "PROCESSED"} by
	// default; a column not named is NULL). Business and call effects have
	// none: a missing row is a difference.
	Absent map[string]string `json:"absent,omitempty"`
}

// Source is a table (or a SELECT) on one side.
type Source struct {
	// Table is the table to read, or
	Table string `json:"table,omitempty"`
	// SQL is a SELECT whose columns Key and Columns name.
	SQL string `json:"sql,omitempty"`
	// Key is the column (or SQL expression) holding the key of the row:
	// the event id, or a business key ("invoice_no"). Required. A NULL key
	// is the key "(no key)".
	Key string `json:"key"`
	// KeyPrefix is put before every key of this source in the report
	// ("invoice:"), so that business keys and event ids never meet.
	KeyPrefix string `json:"keyPrefix,omitempty"`
	// Columns are the compared columns: a column name, or "EXPR AS name".
	// Both sides of an effect must name the same columns.
	Columns []string `json:"columns"`
	// Time, optional, is a column (or expression) holding when the row was
	// written: the report's time span.
	Time string `json:"time,omitempty"`
}

// Rule is a team's expected difference: every difference of an event
// that a rule covers is expected; an event whose differences all are
// covered is "expected" under the rules' names.
type Rule struct {
	// Name names the rule in the report. Required.
	Name string `json:"name"`
	// Meaning says why the difference is expected (report only).
	Meaning string `json:"meaning,omitempty"`
	// Effect is the effect ("table") the rule covers. Required.
	Effect string `json:"effect"`
	// Columns are the columns whose differing values it covers (empty:
	// every column of the effect).
	Columns []string `json:"columns,omitempty"`
	// Legacy and Shadow, optional, are regular expressions the whole value
	// on that side must match ("NULL" for SQL NULL).
	Legacy string `json:"legacy,omitempty"`
	Shadow string `json:"shadow,omitempty"`
	// Rows, optional, covers whole rows present on one side only:
	// "legacy-only" or "shadow-only". Without it the rule covers differing
	// values of rows present on both sides.
	Rows string `json:"rows,omitempty"`

	legacyRe, shadowRe *regexp.Regexp
}

// ParseReconcileConfig reads a configuration and checks it; its errors
// name the field and the fix.
func ParseReconcileConfig(b []byte) (*ReconcileConfig, error) {
	var c ReconcileConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("shadow diff config: %w (see docs/shadow.md, \"Reconcile\", for the format)", err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("shadow diff config: %w", err)
	}
	return &c, nil
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c *ReconcileConfig) check() error {
	if len(c.Effects) == 0 {
		return errors.New(`"effects" is empty: name at least one table to compare`)
	}
	seen := map[string]bool{}
	for i := range c.Effects {
		e := &c.Effects[i]
		if e.Name == "" {
			e.Name = e.Legacy.Table
		}
		if e.Name == "" {
			return fmt.Errorf("effects[%d]: give it a \"name\" (its legacy source is a SELECT)", i)
		}
		if seen[e.Name] {
			return fmt.Errorf("effect %q is named twice", e.Name)
		}
		seen[e.Name] = true
		switch e.Kind {
		case "":
			e.Kind = KindBusiness
		case KindBusiness, KindCall, KindOutcome:
		default:
			return fmt.Errorf("effect %q: kind %q: use business, call or outcome", e.Name, e.Kind)
		}
		if e.Shadow == nil {
			s := e.Legacy
			e.Shadow = &s
		}
		for side, s := range map[string]*Source{"legacy": &e.Legacy, "shadow": e.Shadow} {
			if (s.Table == "") == (s.SQL == "") {
				return fmt.Errorf("effect %q, %s: give either \"table\" or \"sql\"", e.Name, side)
			}
			if s.Table != "" && !identRe.MatchString(strings.ReplaceAll(s.Table, ".", "_")) {
				return fmt.Errorf("effect %q, %s: table %q is not a table name (use \"sql\" for a query)", e.Name, side, s.Table)
			}
			if s.Key == "" {
				return fmt.Errorf("effect %q, %s: \"key\" is required: the column holding the event id (or a business key)", e.Name, side)
			}
			if len(s.Columns) == 0 {
				return fmt.Errorf("effect %q, %s: \"columns\" is empty: name the columns to compare", e.Name, side)
			}
		}
		ln, sn := columnNames(e.Legacy.Columns), columnNames(e.Shadow.Columns)
		if !slices.Equal(sortedCopy(ln), sortedCopy(sn)) {
			return fmt.Errorf("effect %q: the legacy side compares columns %v, the shadow %v: name the same columns on both (\"EXPR AS name\")", e.Name, ln, sn)
		}
		for _, j := range e.JSON {
			if !slices.Contains(ln, j) {
				return fmt.Errorf("effect %q: json column %q is not one of its columns %v", e.Name, j, ln)
			}
		}
		if e.Kind == KindOutcome {
			if !slices.Contains(ln, "status") {
				return fmt.Errorf("effect %q: an outcome effect needs a column named \"status\" (e.g. \"STATUS AS status\")", e.Name)
			}
			if e.Absent == nil {
				e.Absent = map[string]string{"status": "PROCESSED"}
			}
		} else if len(e.Absent) > 0 {
			return fmt.Errorf("effect %q: \"absent\" is for outcome effects only", e.Name)
		}
	}
	for _, s := range c.Scrub {
		name, _, ok := strings.Cut(s, ".")
		if !ok || !seen[name] {
			return fmt.Errorf("scrub entry %q: write EFFECT.COLUMN with an effect of this file", s)
		}
	}
	for _, d := range c.DisableBuiltin {
		if _, ok := builtinMeaning[d]; !ok {
			return fmt.Errorf("disableBuiltin: %q is not a built-in rule (%s)", d, strings.Join(BuiltinRules, ", "))
		}
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		if r.Name == "" {
			return fmt.Errorf("rules[%d]: \"name\" is required", i)
		}
		if _, ok := builtinMeaning[r.Name]; ok {
			return fmt.Errorf("rule %q: the name is a built-in rule's; choose another", r.Name)
		}
		if !seen[r.Effect] {
			return fmt.Errorf("rule %q: effect %q is not an effect of this file", r.Name, r.Effect)
		}
		switch r.Rows {
		case "", "legacy-only", "shadow-only":
		default:
			return fmt.Errorf("rule %q: rows %q: use legacy-only or shadow-only (or leave it out)", r.Name, r.Rows)
		}
		var err error
		if r.Legacy != "" {
			if r.legacyRe, err = regexp.Compile("^(?:" + r.Legacy + ")$"); err != nil {
				return fmt.Errorf("rule %q: legacy: %w", r.Name, err)
			}
		}
		if r.Shadow != "" {
			if r.shadowRe, err = regexp.Compile("^(?:" + r.Shadow + ")$"); err != nil {
				return fmt.Errorf("rule %q: shadow: %w", r.Name, err)
			}
		}
	}
	return nil
}

// asRe splits "EXPR AS name" (case-insensitive AS, the last one).
var asRe = regexp.MustCompile(`(?i)^(.*\S)\s+AS\s+([A-Za-z_][A-Za-z0-9_]*)$`)

// column returns a compared column's expression and its name.
func column(c string) (expr, name string) {
	c = strings.TrimSpace(c)
	if m := asRe.FindStringSubmatch(c); m != nil {
		return m[1], m[2]
	}
	return c, c
}

func columnNames(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		_, out[i] = column(c)
	}
	return out
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// scrubbed reports whether column col (a name, or COLUMN.FIELD) of effect
// eff is noise.
func (c *ReconcileConfig) scrubbed(eff, col string) bool {
	for _, s := range c.Scrub {
		e, rest, _ := strings.Cut(s, ".")
		if e != eff {
			continue
		}
		if rest == col || strings.HasSuffix(rest, ".*") && strings.HasPrefix(col, strings.TrimSuffix(rest, "*")) {
			return true
		}
	}
	return false
}
