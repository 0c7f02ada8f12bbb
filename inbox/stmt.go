package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
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

// args are the values of a statement's named parameters.
type args map[string]any

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
		v, ok := a[n]
		if !ok {
			panic(fmt.Sprintf("inbox: statement parameter @%s has no value: %s", n, st.text))
		}
		out[i] = v
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
// with more.
func (e Entry) key(more args) args {
	if more == nil {
		more = args{}
	}
	more["event"], more["consumer"] = e.EventID, e.ConsumerName
	return more
}

// row is key with the entry's other columns (@corr, @hash, @source, @okey).
func (e Entry) row(more args) args {
	a := e.key(more)
	a["corr"], a["hash"], a["source"] = nullString(e.CorrelationID), nullString(e.PayloadHash), sourceArg(e.EventIDSource)
	a["okey"] = nullString(e.OrderKey)
	return a
}
