package golden

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// ReconcileOptions tune a reconciliation.
type ReconcileOptions struct {
	// Samples is how many events per category the report shows with their
	// differences (default 10).
	Samples int
	// Calibrate compares two copies of the legacy side: every column that
	// differs is noise (Report.Noise), no rule applies.
	Calibrate bool
	// LegacyEvents compares only the events the legacy side has a row of
	// (in any effect, before an outcome's absent row is filled in); the
	// others are counted in Counts.Skipped. The reverse shadow's diff: the
	// legacy bean on the copy saw only the messages since it started,
	// production holds every event before them too (docs/shadow.md,
	// "Switch over"). An event the legacy side has and production lacks
	// is still compared, and unexpected.
	LegacyEvents bool
}

// ReconcileReport is what Reconcile found; `inboxctl shadow diff -o json`
// prints it, `inboxctl cutover check --shadow-report` reads it.
type ReconcileReport struct {
	Consumer string `json:"consumer,omitempty"`
	Legacy   string `json:"legacy"`
	Shadow   string `json:"shadow"`
	// Calibration is set for a report of legacy against a legacy copy.
	Calibration bool `json:"calibration,omitempty"`
	// GeneratedAt is when the reconciliation ran.
	GeneratedAt time.Time `json:"generatedAt"`
	Counts      Counts    `json:"counts"`
	// Rules counts the expected events per rule.
	Rules map[string]int64 `json:"rules"`
	// Span is the time span of the rows compared (the sources' "time").
	Span *Span `json:"span,omitempty"`
	// Samples are events of each category with their differences:
	// "unexpected", and per rule.
	Samples map[string][]EventSample `json:"samples"`
	// UnexpectedEvents lists the unexpected events' keys (at most 1000).
	UnexpectedEvents []string `json:"unexpectedEvents"`
	// Noise (calibration) are the columns that differ between the legacy
	// copies, with the number of events they differ in.
	Noise []Noise `json:"noise,omitempty"`
	// Scrub (calibration) is the config's scrub list with the noise added.
	Scrub []string `json:"scrub,omitempty"`
	// RowDifferences (calibration) counts events whose legacy copies hold
	// different rows, not only different values: not noise a scrub hides.
	RowDifferences int64 `json:"rowDifferences,omitempty"`
}

// Counts are the events of a report per category.
type Counts struct {
	Events     int64 `json:"events"`
	Identical  int64 `json:"identical"`
	Expected   int64 `json:"expected"`
	Unexpected int64 `json:"unexpected"`
	// Skipped counts the events left out by ReconcileOptions.LegacyEvents
	// (not in Events).
	Skipped int64 `json:"skipped,omitempty"`
}

// Span is a time span.
type Span struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// EventSample is one event with its differences.
type EventSample struct {
	Event       string       `json:"event"`
	Rule        string       `json:"rule,omitempty"`
	Differences []Difference `json:"differences"`
}

// Noise is a column that differs between two copies of the legacy side.
type Noise struct {
	Column string `json:"column"`
	Events int64  `json:"events"`
}

const maxUnexpectedKeys = 1000

// textEvents is how many unexpected events the text report names.
const textEvents = 20

// Reconcile compares the legacy side's effects with the shadow's per key:
// it streams every effect of both sides ordered by key and merges them
// (memory holds one key's rows, not the tables), and sorts each key into
// identical, expected (a built-in rule or one of the config's) or
// unexpected. An event counts once, whatever its number of rows.
func Reconcile(ctx context.Context, c *ReconcileConfig, legacy, shadow Side, opt ReconcileOptions) (*ReconcileReport, error) {
	if opt.Samples <= 0 {
		opt.Samples = 10
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var streams []*stream
	for i := range c.Effects {
		for side, sd := range []Side{legacy, shadow} {
			st, err := c.open(ctx, i, side, sd, opt.Calibrate)
			if err != nil {
				return nil, err
			}
			streams = append(streams, st)
		}
	}
	rep := &ReconcileReport{Consumer: c.Consumer, Legacy: legacy.Name, Shadow: shadow.Name, Calibration: opt.Calibrate,
		GeneratedAt: time.Now().UTC(), Rules: map[string]int64{}, Samples: map[string][]EventSample{}, UnexpectedEvents: []string{}}
	noise := map[string]int64{}
	absent := c.absentRows(opt.Calibrate)
	ev := &event{rows: make([][2][]rrow, len(c.Effects))}
	for {
		// The smallest key at the head of a stream is the next event.
		key, found := "", false
		for _, st := range streams {
			h, err := st.head()
			if err != nil {
				return nil, err
			}
			if h != nil && (!found || h.key < key) {
				key, found = h.key, true
			}
		}
		if !found {
			break
		}
		ev.key = key
		for i := range ev.rows {
			for side := range 2 {
				r := ev.rows[i][side]
				if len(r) > 0 && len(absent[i][side]) > 0 && &r[0] == &absent[i][side][0] {
					r = nil // the shared absent row: never appended to
				}
				ev.rows[i][side] = r[:0]
			}
		}
		for _, st := range streams {
			for {
				h, err := st.head()
				if err != nil {
					return nil, err
				}
				if h == nil || h.key != key {
					break
				}
				ev.rows[st.eff][st.side] = append(ev.rows[st.eff][st.side], h.row)
				if !h.at.IsZero() {
					rep.span(h.at)
				}
				st.take()
			}
		}
		if opt.LegacyEvents && !hasLegacyRow(ev) {
			rep.Counts.Skipped++
			continue
		}
		fillAbsent(ev, absent)
		rep.Counts.Events++
		if opt.Calibrate {
			rep.calibrate(c, ev, noise, opt.Samples)
			continue
		}
		rule, diffs, identical, ok := c.classify(ev)
		switch {
		case identical:
			rep.Counts.Identical++
		case ok:
			rep.Counts.Expected++
			rep.Rules[rule]++
			if len(rep.Samples[rule]) < opt.Samples {
				if diffs == nil {
					diffs = c.differences(ev)
				}
				rep.Samples[rule] = append(rep.Samples[rule], EventSample{Event: key, Rule: rule, Differences: diffs})
			}
		default:
			rep.Counts.Unexpected++
			if len(rep.UnexpectedEvents) < maxUnexpectedKeys {
				rep.UnexpectedEvents = append(rep.UnexpectedEvents, key)
			}
			if len(rep.Samples["unexpected"]) < opt.Samples {
				rep.Samples["unexpected"] = append(rep.Samples["unexpected"], EventSample{Event: key, Differences: diffs})
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opt.Calibrate {
		for _, col := range slices.Sorted(maps.Keys(noise)) {
			rep.Noise = append(rep.Noise, Noise{Column: col, Events: noise[col]})
		}
		rep.Scrub = slices.Clone(c.Scrub)
		for _, n := range rep.Noise {
			if !slices.Contains(rep.Scrub, n.Column) {
				rep.Scrub = append(rep.Scrub, n.Column)
			}
		}
	}
	return rep, nil
}

// absentRows are, per outcome effect and side, the row a side without
// one is taken to have (the effect's Absent); nil for other effects.
func (c *ReconcileConfig) absentRows(calibrate bool) [][2][]rrow {
	out := make([][2][]rrow, len(c.Effects))
	for i, e := range c.Effects {
		if e.Kind != KindOutcome {
			continue
		}
		for side := range 2 {
			src := &e.Legacy
			if side == 1 && !calibrate {
				src = e.Shadow
			}
			var fs []field
			for _, n := range columnNames(src.Columns) {
				if c.scrubbed(e.Name, n) {
					continue
				}
				v, ok := e.Absent[n]
				if !ok {
					v = "NULL"
				}
				fs = append(fs, field{n, v})
			}
			out[i][side] = []rrow{newRow(fs)}
		}
	}
	return out
}

// hasLegacyRow says whether the legacy side has a row of ev in any
// effect (called before fillAbsent).
func hasLegacyRow(ev *event) bool {
	for i := range ev.rows {
		if len(ev.rows[i][0]) > 0 {
			return true
		}
	}
	return false
}

// fillAbsent gives an outcome effect's side without a row its absent row.
func fillAbsent(ev *event, absent [][2][]rrow) {
	for i := range ev.rows {
		for side := range 2 {
			if len(ev.rows[i][side]) == 0 && absent[i][side] != nil {
				ev.rows[i][side] = absent[i][side]
			}
		}
	}
}

func (r *ReconcileReport) span(t time.Time) {
	if r.Span == nil {
		r.Span = &Span{From: t, To: t}
		return
	}
	if t.Before(r.Span.From) {
		r.Span.From = t
	}
	if t.After(r.Span.To) {
		r.Span.To = t
	}
}

// calibrate counts an event of a calibration: the columns that differ are
// noise; rows on one side only are not.
func (r *ReconcileReport) calibrate(c *ReconcileConfig, ev *event, noise map[string]int64, samples int) {
	diffs := c.differences(ev)
	if len(diffs) == 0 {
		r.Counts.Identical++
		return
	}
	seen := map[string]bool{}
	rows := false
	for _, d := range diffs {
		if d.Rows != "" {
			rows = true
			continue
		}
		col := d.Table + "." + d.Column
		if !seen[col] {
			seen[col] = true
			noise[col]++
		}
	}
	if rows {
		r.RowDifferences++
		r.Counts.Unexpected++
		if len(r.UnexpectedEvents) < maxUnexpectedKeys {
			r.UnexpectedEvents = append(r.UnexpectedEvents, ev.key)
		}
		if len(r.Samples["unexpected"]) < samples {
			r.Samples["unexpected"] = append(r.Samples["unexpected"], EventSample{Event: ev.key, Differences: diffs})
		}
		return
	}
	r.Counts.Expected++
	if len(r.Samples["noise"]) < samples {
		r.Samples["noise"] = append(r.Samples["noise"], EventSample{Event: ev.key, Differences: diffs})
	}
}

// WriteText writes the report for a person: the counts, the rules, the
// samples with their differing columns, and what to do.
func (r *ReconcileReport) WriteText(w io.Writer, c *ReconcileConfig) {
	if r.Calibration {
		fmt.Fprintf(w, "shadow diff --calibrate: legacy %s, legacy copy %s\n", r.Legacy, r.Shadow)
	} else {
		fmt.Fprintf(w, "shadow diff: legacy %s, shadow %s\n", r.Legacy, r.Shadow)
	}
	if r.Span != nil {
		fmt.Fprintf(w, "rows written from %s to %s\n", r.Span.From.Format(time.RFC3339), r.Span.To.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "events %d: identical %d, expected %d, unexpected %d\n", r.Counts.Events, r.Counts.Identical, r.Counts.Expected, r.Counts.Unexpected)
	if r.Counts.Skipped > 0 {
		fmt.Fprintf(w, "skipped %d events only the shadow side has (--legacy-events)\n", r.Counts.Skipped)
	}
	if r.Calibration {
		if len(r.Noise) == 0 {
			fmt.Fprintln(w, "no noise: the legacy copies agree on every compared column")
		} else {
			fmt.Fprintln(w, "noise (columns that differ between the legacy copies; events):")
			for _, n := range r.Noise {
				fmt.Fprintf(w, "  %-40s %d\n", n.Column, n.Events)
			}
			fmt.Fprintln(w, "scrub them in the config (or run again with --write to put them there):")
			fmt.Fprintf(w, "  \"scrub\": [%s]\n", quoteList(r.Scrub))
		}
		if r.RowDifferences > 0 {
			fmt.Fprintf(w, "%d events hold different rows on the two legacy copies (not noise a scrub can hide):\n", r.RowDifferences)
			writeSamples(w, r.Samples["unexpected"])
		}
		return
	}
	for _, name := range slices.Sorted(maps.Keys(r.Rules)) {
		fmt.Fprintf(w, "  expected %-30s %d  (%s)\n", name, r.Rules[name], c.RuleMeaning(name))
	}
	if r.Counts.Unexpected == 0 {
		fmt.Fprintln(w, "no unexpected differences")
		return
	}
	ids := r.UnexpectedEvents
	more := ""
	if len(ids) > textEvents {
		ids = ids[:textEvents]
	}
	if n := r.Counts.Unexpected - int64(len(ids)); n > 0 {
		more = fmt.Sprintf(" and %d more (-o json lists up to %d)", n, maxUnexpectedKeys)
	}
	fmt.Fprintf(w, "unexpected differences in %d events: %s%s\n", r.Counts.Unexpected, strings.Join(ids, ", "), more)
	writeSamples(w, r.Samples["unexpected"])
}

func writeSamples(w io.Writer, samples []EventSample) {
	for _, s := range samples {
		fmt.Fprintf(w, "  event %s\n", s.Event)
		for _, d := range s.Differences {
			fmt.Fprintf(w, "    %s.%s: legacy %s, shadow %s\n", d.Table, d.Column, d.Legacy, d.Shadow)
		}
	}
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
