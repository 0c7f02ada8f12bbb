package golden

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
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
	rows, err := sd.DB.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("shadow diff: read %s from %s: %w\n\tquery: %s\n\tcheck the effect's table, key and columns in the config", st.name, sd.Name, err, q)
	}
	names := columnNames(src.Columns)
	isJSON := make([]bool, len(names))
	for i, n := range names {
		isJSON[i] = slices.Contains(e.JSON, n)
	}
	go func() {
		defer close(st.ch)
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
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				st.errc <- fmt.Errorf("shadow diff: read %s: %w", st.name, err)
				return
			}
			r := srow{key: src.KeyPrefix + rawString(vals[0]), at: timeOf(vals[1])}
			fields = fields[:0]
			for i, name := range names {
				v := vals[2+i]
				if isJSON[i] {
					if fs, ok := jsonFields(name, v); ok {
						for _, f := range fs {
							if !c.scrubbed(e.Name, f.name) {
								fields = append(fields, f)
							}
						}
						continue
					}
				}
				if !c.scrubbed(e.Name, name) {
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
	}()
	return st, nil
}

// newRow sorts fields by name (a copy) and joins them.
func newRow(fields []field) rrow {
	fs := slices.Clone(fields)
	slices.SortFunc(fs, func(a, b field) int { return strings.Compare(a.name, b.name) })
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

// jsonFields expands a JSON object into name.FIELD fields (strings as
// they are, other values as JSON); ok is false when v holds no object.
func jsonFields(name string, v any) ([]field, bool) {
	var raw []byte
	switch x := v.(type) {
	case []byte:
		raw = x
	case string:
		raw = []byte(x)
	default:
		return nil, false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, false
	}
	out := make([]field, 0, len(obj))
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		val := string(obj[k])
		var s string
		if err := json.Unmarshal(obj[k], &s); err == nil {
			val = cellString(s)
		} else if val == "null" {
			val = "NULL"
		}
		out = append(out, field{name + "." + k, val})
	}
	return out, true
}
