package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// stmt is a statement whose parameters are named (@event, @now, ...) and
// bound by name, never by position: its text for the dialect, with
// positional placeholders, and the name of each placeholder in order. A
// name may occur more than once.
type stmt struct {
	text  string
	names []string
	// fails: the statement records a failure verdict on one row
	// (TECHNICAL_FAILURE, REJECTED, DEAD_LETTERED); run through
	// Store.verdict, it writes the attempt's history too.
	fails bool
}

// failing marks st as a failure verdict's statement (see stmt.fails).
func failing(st stmt) stmt {
	st.fails = true
	return st
}

// args are the values of a statement's named parameters, as name and
// value pairs; when a name occurs twice, the later pair holds its value
// (set appends). A statement has about a dozen parameters: bind finds each
// by a scan, which costs less per delivery than a map and its buckets.
type args []arg

// arg is one named parameter's value.
type arg struct {
	name string
	v    any
}

// set gives name the value v.
func (a args) set(name string, v any) args { return append(a, arg{name, v}) }

// get returns the value of name.
func (a args) get(name string) (any, bool) {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i].name == name {
			return a[i].v, true
		}
	}
	return nil, false
}

var paramRe = regexp.MustCompile(`@[a-z_0-9]+`)

// compile turns text with @name parameters into the dialect's statement.
func compile(d Dialect, text string) stmt {
	var names []string
	text = paramRe.ReplaceAllStringFunc(text, func(m string) string {
		names = append(names, m[1:])
		return "?"
	})
	return stmt{text: d.Rebind(text), names: names}
}

// bind returns the values of a in the order of the placeholders. A name
// without a value is a bug of this package: it panics (every statement
// runs in the tests).
func (st stmt) bind(a args) []any {
	out := make([]any, len(st.names))
	for i, n := range st.names {
		v, ok := a.get(n)
		if !ok {
			panic(fmt.Sprintf("inbox: statement parameter @%s has no value: %s", n, st.text))
		}
		out[i] = v
	}
	return out
}

// listed is a statement of head, then n copies of row joined by ", ",
// then tail: the VALUES rows of a multi-row INSERT, the IN list of a
// SELECT. Its text depends on n alone, so it is compiled once per text
// and n (listedStmts); each row binds its own values (bindRows).
type listed struct {
	stmt
	head, per int // how many placeholders head has; one row
}

type listedKey struct {
	dialect         string
	head, row, tail string
	n               int
}

// listedStmts holds the listed statements compiled so far (listedKey →
// listed), for lists of at most maxListed rows; a longer one is compiled
// per call.
var listedStmts sync.Map

const maxListed = 1024

// compileListed returns the listed statement of head, n rows and tail; tail
// has no parameters.
func compileListed(d Dialect, head, row, tail string, n int) listed {
	k := listedKey{d.name, head, row, tail, n}
	if st, ok := listedStmts.Load(k); ok {
		return st.(listed)
	}
	rows := make([]string, n)
	for i := range rows {
		rows[i] = row
	}
	st := listed{stmt: compile(d, head+strings.Join(rows, ", ")+tail), head: len(paramRe.FindAllString(head, -1)), per: len(paramRe.FindAllString(row, -1))}
	if n <= maxListed {
		listedStmts.Store(k, st)
	}
	return st
}

// bindRows returns the values of the placeholders: head's from a, row i's
// from rows(i), or from a where rows(i) has no value of the name. A name
// without a value panics, as in bind.
func (st listed) bindRows(a args, rows func(i int) args) []any {
	out := make([]any, len(st.names))
	cur, row := -1, args(nil)
	for p, n := range st.names {
		v, ok := any(nil), false
		if p >= st.head && st.per > 0 {
			if i := (p - st.head) / st.per; i != cur {
				cur, row = i, rows(i)
			}
			v, ok = row.get(n)
		}
		if !ok {
			v, ok = a.get(n)
		}
		if !ok {
			panic(fmt.Sprintf("inbox: statement parameter @%s has no value: %s", n, st.text))
		}
		out[p] = v
	}
	return out
}

func (st stmt) exec(ctx context.Context, q execer, a args) (sql.Result, error) {
	return q.ExecContext(ctx, st.text, st.bind(a)...)
}

func (st stmt) queryRow(ctx context.Context, q execer, a args) *sql.Row {
	return q.QueryRowContext(ctx, st.text, st.bind(a)...)
}

// key is the named arguments of an entry's row key (@event, @consumer),
// with more. key and row are inlined, so that their arguments live on the
// caller's stack unless the caller keeps them.
func (e Entry) key(more ...arg) args {
	return append(append(make(args, 0, 8), more...), arg{"event", e.EventID}, arg{"consumer", e.ConsumerName})
}

// row is key with the entry's other columns (@corr, @hash, @source, @okey).
func (e Entry) row(more ...arg) args {
	return e.columns(append(make(args, 0, 16), more...))
}

// columns appends the entry's row arguments to a.
func (e *Entry) columns(a args) args {
	return append(a, arg{"event", e.EventID}, arg{"consumer", e.ConsumerName},
		arg{"corr", nullable(e.CorrelationID)}, arg{"hash", nullable(e.PayloadHash)},
		arg{"source", nullable(sourceArg(e.EventIDSource).String)}, arg{"okey", nullable(e.OrderKey)})
}

// null is SQL NULL as nullString binds it, boxed once.
var null any = sql.NullString{}

// nullable is nullString(s) as a statement's value: "" binds NULL.
func nullable(s string) any {
	if s == "" {
		return null
	}
	return sql.NullString{String: s, Valid: true}
}
