package golden

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
)

// Side is one database of a reconciliation.
type Side struct {
	// DB holds the side's tables.
	DB *sql.DB
	// Dialect is DB's SQL dialect.
	Dialect inbox.Dialect
	// Name is shown in the report (a redacted URL).
	Name string
}

// noKey is the key of a row whose key column is NULL.
const noKey = "(no key)"

// field is one compared value of a row.
type field struct{ name, value string }

// rrow is one row of an effect, its fields sorted by name, the noise
// scrubbed.
type rrow struct {
	fields []field
	canon  string // the fields joined: equal rows, equal strings
}

// srow is a row as a stream delivers it.
type srow struct {
	key string
	at  time.Time
	row rrow
}

// stream reads one effect of one side, ordered by key byte for byte, in a
// goroutine of its own that sends batches.
type stream struct {
	eff, side int
	name      string // "legacy shipping_letters", for errors
	ch        chan []srow
	errc      chan error
	buf       []srow
	pos       int
	done      bool
	last      string
}

// keyOrder returns the key expression as text (NULL: noKey) and the ORDER
// BY expression that sorts it byte for byte, as Go compares strings, in the
// side's dialect: the merge of the two sides depends on one order.
func keyOrder(d inbox.Dialect, key string) (sel, order string) {
	switch d.Name() {
	case "postgres":
		sel = fmt.Sprintf("COALESCE(CAST((%s) AS TEXT), '%s')", key, noKey)
		return sel, sel + ` COLLATE "C"`
	case "mysql":
		sel = fmt.Sprintf("COALESCE(CAST((%s) AS CHAR), '%s')", key, noKey)
		return sel, "CAST(" + sel + " AS BINARY)"
	case "oracle":
		sel = fmt.Sprintf("COALESCE(TO_CHAR(%s), '%s')", key, noKey)
		return sel, "NLSSORT(" + sel + ", 'NLS_SORT=BINARY')"
	}
	sel = fmt.Sprintf("COALESCE(CAST((%s) AS TEXT), '%s')", key, noKey)
	return sel, sel
}

// query is the SELECT of a source: the key, the time (or NULL), the
// compared columns in order.
func (s *Source) query(d inbox.Dialect) string {
	sel, order := keyOrder(d, s.Key)
	at := "NULL"
	if s.Time != "" {
		at = s.Time
	}
	cols := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		expr, name := column(c)
		cols[i] = expr + " AS " + name
	}
	from := s.Table
	if s.SQL != "" {
		from = "(" + s.SQL + ") src"
	}
	return fmt.Sprintf("SELECT %s AS inboxkit_key, %s AS inboxkit_at, %s FROM %s ORDER BY %s", sel, at, strings.Join(cols, ", "), from, order)
}

const streamBatch = 512

// sortMemory is PostgreSQL's work_mem for a stream's ORDER BY.
const sortMemory = "64MB"

// open starts the stream's query and its reading goroutine.
// A calibration reads the legacy source on both sides (two legacy copies).
func (c *ReconcileConfig) open(ctx context.Context, eff, side int, sd Side, calibrate bool) (*stream, error) {
	e := &c.Effects[eff]
	src, label := &e.Legacy, "legacy"
	if side == 1 {
		src, label = e.Shadow, "shadow"
		if calibrate {
			src, label = &e.Legacy, "legacy copy"
		}
	}
	st := &stream{eff: eff, side: side, name: label + " " + e.Name, ch: make(chan []srow, 4), errc: make(chan error, 1)}
	q := src.query(sd.Dialect)
	names := columnNames(src.Columns)
	isJSON := make([]bool, len(names))
	for i, n := range names {
		isJSON[i] = slices.Contains(e.JSON, n)
	}
	go c.read(ctx, st, sd, q, e, src.KeyPrefix, names, isJSON)
	return st, nil
}

// read runs a stream's query q and sends its rows in batches, then closes
// its channel (an error first goes to errc); it stops when ctx ends.
func (c *ReconcileConfig) read(ctx context.Context, st *stream, sd Side, q string, e *Effect, prefix string, names []string, isJSON []bool) {
	defer close(st.ch)
	fail := func(err error, hint string) {
		st.errc <- fmt.Errorf("shadow diff: read %s from %s: %w%s", st.name, sd.Name, err, hint)
	}
	// A read-only transaction of its own: on PostgreSQL it gives the
	// sort more memory than the default 4 MB (SET LOCAL: this transaction
	// only), so that a million rows sort in memory, not on disk.
	tx, err := sd.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: sd.Dialect.Name() != "sqlite"})
	if err != nil {
		fail(err, "")
		return
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to keep
	if sd.Dialect.Name() == "postgres" {
		if _, err := tx.ExecContext(ctx, "SET LOCAL work_mem = '"+sortMemory+"'"); err != nil {
			fail(err, "")
			return
		}
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		fail(err, "\n\tquery: "+q+"\n\tcheck the effect's table, key and columns in the config")
		return
	}
	defer rows.Close()
	n := 2 + len(names)
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	batch := make([]srow, 0, streamBatch)
	send := func() bool {
		select {
		case st.ch <- batch:
			batch = make([]srow, 0, streamBatch)
			return true
		case <-ctx.Done():
			return false
		}
	}
	var fields []field
	// Per stream: the names of JSON fields ("body" + "." + key) and
	// whether a column is scrubbed, computed once, not per row.
	fieldNames := map[string]string{}
	isScrubbed := map[string]bool{}
	scrubbed := func(col string) bool {
		v, ok := isScrubbed[col]
		if !ok {
			v = c.scrubbed(e.Name, col)
			isScrubbed[col] = v
		}
		return v
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			st.errc <- fmt.Errorf("shadow diff: read %s: %w", st.name, err)
			return
		}
		r := srow{key: prefix + rawString(vals[0]), at: timeOf(vals[1])}
		fields = fields[:0]
		for i, name := range names {
			v := vals[2+i]
			if isJSON[i] {
				n := len(fields)
				fs, ok := appendJSONFields(fields, name, v, fieldNames)
				fields = fs[:n]
				if ok { // filtered in place: writes never pass reads
					for _, f := range fs[n:] {
						if !scrubbed(f.name) {
							fields = append(fields, f)
						}
					}
					continue
				}
			}
			if !scrubbed(name) {
				fields = append(fields, field{name, cell(v)})
			}
		}
		r.row = newRow(fields)
		batch = append(batch, r)
		if len(batch) == streamBatch && !send() {
			return
		}
	}
	if err := rows.Err(); err != nil {
		st.errc <- fmt.Errorf("shadow diff: read %s: %w", st.name, err)
		return
	}
	if len(batch) > 0 {
		send()
	}
}

// newRow sorts fields by name (a copy) and joins them.
func newRow(fields []field) rrow {
	fs := make([]field, len(fields))
	copy(fs, fields)
	if !slices.IsSortedFunc(fs, cmpField) {
		slices.SortFunc(fs, cmpField)
	}
	n := 0
	for _, f := range fs {
		n += len(f.name) + len(f.value) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, f := range fs {
		b.WriteString(f.name)
		b.WriteByte(0x1f)
		b.WriteString(f.value)
		b.WriteByte(0x1e)
	}
	return rrow{fields: fs, canon: b.String()}
}

func cmpField(a, b field) int { return strings.Compare(a.name, b.name) }

// head returns the stream's next row without taking it (nil at the end).
func (s *stream) head() (*srow, error) {
	for s.pos >= len(s.buf) {
		if s.done {
			return nil, nil
		}
		b, ok := <-s.ch
		if !ok {
			s.done = true
			select {
			case err := <-s.errc:
				return nil, err
			default:
			}
			return nil, nil
		}
		s.buf, s.pos = b, 0
	}
	r := &s.buf[s.pos]
	if r.key < s.last {
		return nil, fmt.Errorf("shadow diff: %s is not sorted by key byte for byte (%q after %q): its key must be a text column or expression the database sorts as given", s.name, r.key, s.last)
	}
	return r, nil
}

func (s *stream) take() { s.last = s.buf[s.pos].key; s.pos++ }

// rawString is a key's text.
func rawString(v any) string {
	switch x := v.(type) {
	case nil:
		return noKey
	case []byte:
		return string(x)
	case string:
		return x
	}
	return cell(v)
}

// timeOf reads a time column (a time, or text in one of timeLayouts).
func timeOf(v any) time.Time {
	switch x := v.(type) {
	case time.Time:
		return x.UTC()
	case []byte:
		return parseTime(string(x))
	case string:
		return parseTime(x)
	}
	return time.Time{}
}

func parseTime(s string) time.Time {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC()
		}
		if t, err := time.Parse(l, strings.Replace(s, " ", "T", 1)); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// appendJSONFields appends the fields of a JSON object to dst as
// name.FIELD fields (strings as they are, other values as their JSON
// text, null as NULL); ok is false when v holds no JSON object (dst may
// then hold a part: cut it back). It scans the top level itself (no
// reflection): it runs per row. names caches the field names.
func appendJSONFields(dst []field, name string, v any, names map[string]string) ([]field, bool) {
	var raw string
	switch x := v.(type) {
	case []byte:
		raw = string(x)
	case string:
		raw = x
	default:
		return dst, false
	}
	p := jsonScanner{s: raw}
	p.space()
	if !p.eat('{') {
		return dst, false
	}
	p.space()
	if p.eat('}') {
		return dst, p.end()
	}
	for {
		p.space()
		k, ok := p.str()
		if !ok {
			return dst, false
		}
		p.space()
		if !p.eat(':') {
			return dst, false
		}
		p.space()
		var val string
		if p.peek() == '"' {
			s, ok := p.str()
			if !ok {
				return dst, false
			}
			val = cellString(s)
		} else {
			start := p.i
			if !p.skipValue() {
				return dst, false
			}
			val = p.s[start:p.i]
			if val == "null" {
				val = "NULL"
			}
		}
		full, ok := names[k]
		if !ok {
			full = name + "." + k
			names[k] = full
		}
		dst = append(dst, field{full, val})
		p.space()
		if p.eat(',') {
			continue
		}
		if !p.eat('}') || !p.end() {
			return dst, false
		}
		return dst, true
	}
}

// jsonFields is appendJSONFields of one value, sorted by field.
func jsonFields(name string, v any) ([]field, bool) {
	fs, ok := appendJSONFields(nil, name, v, map[string]string{})
	if !ok {
		return nil, false
	}
	slices.SortFunc(fs, cmpField)
	return fs, true
}

// jsonScanner reads the top level of a JSON text.
type jsonScanner struct {
	s string
	i int
}

func (p *jsonScanner) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *jsonScanner) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScanner) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonScanner) end() bool {
	p.space()
	return p.i == len(p.s)
}

// str reads a string; one with escapes is decoded by encoding/json.
func (p *jsonScanner) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start, escaped := p.i, false
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			escaped = true
			p.i += 2
			continue
		case '"':
			lit := p.s[start:p.i]
			p.i++
			if !escaped {
				return lit, true
			}
			var out string
			if err := json.Unmarshal([]byte(p.s[start-1:p.i]), &out); err != nil {
				return "", false
			}
			return out, true
		}
		p.i++
	}
	return "", false
}

// skipValue passes a number, literal, object or array (strings inside
// skipped as strings).
func (p *jsonScanner) skipValue() bool {
	depth := 0
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; c {
		case '"':
			if _, ok := p.str(); !ok {
				return false
			}
			if depth == 0 {
				return true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return p.i > start
			}
			depth--
			if depth == 0 {
				p.i++
				return true
			}
		case ',':
			if depth == 0 {
				return p.i > start
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return p.i > start
			}
		}
		p.i++
	}
	return depth == 0 && p.i > start
}
