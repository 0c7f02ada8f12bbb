package golden

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// inboxShown are the inbox columns a transcript shows, in order.
var inboxShown = []string{"EVENT_ID", "CONSUMER_NAME", "STATUS", "CORRELATION_ID", "REASON_CODE", "ERROR_CLASS", "ATTEMPTS", "LAST_ERROR", "CREATED_AT", "PROCESSED_AT"}

// outboxShown are the outbox table's columns in the transcript (package
// outbox's INBOXKIT_OUTBOX): what was asked to be sent, and what became of it.
var outboxShown = []string{"MESSAGE_ID", "MSG_KEY", "SEQ", "DESTINATION", "STATUS", "ATTEMPTS", "CAUSE_EVENT_ID", "CORRELATION_ID", "LAST_ERROR"}

// writer writes the approval text of a transcript, for the in-process
// runner and the black-box recorder alike, and keeps the same facts in its
// Transcript for programs. The text has two header lines, then blocks
// ("== title") of indented items.
type writer struct {
	b  strings.Builder
	tr *Transcript
}

func newWriter(consumer string) *writer {
	return &writer{tr: &Transcript{Consumer: consumer, Rows: map[string][][]string{}}}
}

// header writes what the transcript is of, then the scenario's settings.
func (w *writer) header(title string, sc *Scenario) {
	fmt.Fprintf(&w.b, "# %s, queue %s\n", title, sc.Queue)
	fmt.Fprintf(&w.b, "# max-attempts %d, broker-max-deliveries %d, instances %d\n", sc.MaxAttempts, sc.BrokerMaxDeliveries, sc.Instances)
}

// section starts a block.
func (w *writer) section(title string) { fmt.Fprintf(&w.b, "\n== %s\n", title) }

// step writes the line of step n.
func (w *writer) step(n int, format string, args ...any) {
	fmt.Fprintf(&w.b, "%d. %s\n", n, fmt.Sprintf(format, args...))
}

// item writes an indented line: an entry of a block, or what a step did.
func (w *writer) item(format string, args ...any) {
	fmt.Fprintf(&w.b, "   %s\n", fmt.Sprintf(format, args...))
}

// raw writes lines made elsewhere (a delivery's).
func (w *writer) raw(lines string) { w.b.WriteString(lines) }

// calls writes the calls to external services, in order.
func (w *writer) calls(calls []Call) {
	w.tr.Calls = calls
	w.section("calls to external services")
	if len(calls) == 0 {
		w.item("(none)")
	}
	for i, c := range calls {
		key := c.Key
		if key == "" {
			key = "(none)"
		}
		by := ""
		if c.Relay {
			by = " [relay, after the commit]"
		}
		w.item("%d. %s key=%s %s -> %s%s", i+1, c.Service, key, c.Summary, c.Result, by)
	}
}

// table writes a table's block: its title with the columns, then a line
// per row, kept in Transcript.Rows[key] too. With norm, each line is
// normalized and the lines are sorted (a black box's ids and times are
// random: only the normalized rows are stable); without, they stay in the
// query's order.
func (w *writer) table(title, key string, cols []string, rows [][]string, norm func(string) string) {
	w.section(fmt.Sprintf("%s (%s)", title, strings.Join(cols, ", ")))
	lines := make([]string, 0, len(rows))
	for _, cells := range rows {
		w.tr.Rows[key] = append(w.tr.Rows[key], cells)
		l := strings.Join(cells, " | ")
		if norm != nil {
			l = norm(l)
		}
		lines = append(lines, l)
	}
	if norm != nil {
		slices.Sort(lines)
	}
	for _, l := range lines {
		w.item("%s", l)
	}
	if len(lines) == 0 {
		w.item("(no rows)")
	}
}

// query writes the table block of query q's rows (see table).
func (w *writer) query(ctx context.Context, db *sql.DB, title, key string, cols []string, q string, norm func(string) string) error {
	rows, err := queryCells(ctx, db, title, len(cols), q)
	if err != nil {
		return err
	}
	w.table(title, key, cols, rows, norm)
	return nil
}

// messages writes the messages of a queue's block: each body, then its
// headers sorted by name.
func (w *writer) messages(msgs []Published) {
	if len(msgs) == 0 {
		w.item("(nothing)")
	}
	for i, m := range msgs {
		w.item("%d. body %s", i+1, strconv.Quote(m.Body))
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			fmt.Fprintf(&w.b, "      %s: %s\n", k, m.Headers[k])
		}
	}
}

// unused writes the faults that never triggered, if any.
func (w *writer) unused(faults []string) {
	if len(faults) == 0 {
		return
	}
	w.section("faults never triggered")
	for _, f := range faults {
		w.item("%s", f)
	}
}

// done sets the transcript's text: what was written, through scrub.
func (w *writer) done(scrub func(string) string) *Transcript {
	w.tr.Text = scrub(w.b.String())
	return w.tr
}

// queryCells runs q and returns each row's n columns formatted by cell.
func queryCells(ctx context.Context, db *sql.DB, title string, n int, q string) ([][]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("golden: dump %s: %w", title, err)
	}
	defer rows.Close()
	var out [][]string
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("golden: dump %s: %w", title, err)
		}
		cells := make([]string, n)
		for i, v := range vals {
			cells[i] = cell(v)
		}
		out = append(out, cells)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("golden: dump %s: %w", title, err)
	}
	return out, nil
}

// cell formats one database value the same way for every driver.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return cellString(string(x))
	case string:
		return cellString(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func cellString(s string) string {
	if s == "" || strings.ContainsAny(s, "|\n\r\t") || s == "NULL" {
		return strconv.Quote(s)
	}
	return s
}
