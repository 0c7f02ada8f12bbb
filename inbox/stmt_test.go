package inbox

import (
	"reflect"
	"strings"
	"testing"
)

func TestStmtBindsByName(t *testing.T) {
	t.Parallel()
	st := compile(Postgres, `UPDATE t SET A = @x, B = @y WHERE C = @x`)
	if st.text != `UPDATE t SET A = $1, B = $2 WHERE C = $3` {
		t.Errorf("text = %s", st.text)
	}
	if got := st.bind(args{{"y", 2}, {"x", 1}, {"unused", 3}}); !reflect.DeepEqual(got, []any{1, 2, 1}) {
		t.Errorf("bind = %v", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "@y has no value") {
			t.Errorf("a missing value: recovered %v", r)
		}
	}()
	st.bind(args{{"x", 1}})
}

// Every statement of every dialect names only parameters its callers give.
func TestStmtNames(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, n := range strings.Fields(`event consumer corr hash source okey reason class error now attempts delta max marker owner until next uncount n payload headers created`) {
		known[n] = true
	}
	for _, d := range []Dialect{Postgres, MySQL, SQLite, Oracle} {
		var stmts []stmt
		for _, v := range []any{buildQueries(d, DefaultTable), buildQueueQueries(d, DefaultTable)} {
			rv := reflect.ValueOf(v)
			for i := range rv.NumField() {
				if f := rv.Field(i); f.Type() == reflect.TypeFor[stmt]() {
					st := stmt{text: f.Field(0).String()}
					for j := range f.Field(1).Len() {
						st.names = append(st.names, f.Field(1).Index(j).String())
					}
					stmts = append(stmts, st)
				}
			}
		}
		if len(stmts) < 20 {
			t.Fatalf("%s: %d statements found", d, len(stmts))
		}
		for _, st := range stmts {
			if strings.Contains(st.text, "@") {
				t.Errorf("%s: a parameter was not compiled: %s", d, st.text)
			}
			for _, n := range st.names {
				if !known[n] {
					t.Errorf("%s: unknown parameter @%s in %s", d, n, st.text)
				}
			}
		}
	}
}

// A listed statement is the text one compile of its rows gives, and each
// row binds its own values, the others from the head's arguments.
func TestListedBindsEachRow(t *testing.T) {
	t.Parallel()
	st := compileListed(Postgres, `INSERT INTO t (A, B, C) SELECT @x, `, `(@event, @now)`, ` RETURNING A`, 3)
	if want := `INSERT INTO t (A, B, C) SELECT $1, ($2, $3), ($4, $5), ($6, $7) RETURNING A`; st.text != want {
		t.Errorf("text = %s, want %s", st.text, want)
	}
	rows := []args{{{"event", "e0"}}, {{"event", "e1"}, {"now", 8}}, {{"event", "e2"}}}
	got := st.bindRows(args{{"x", 1}, {"now", 9}}, func(i int) args { return rows[i] })
	if want := []any{1, "e0", 9, "e1", 8, "e2", 9}; !reflect.DeepEqual(got, want) {
		t.Errorf("bindRows = %v, want %v", got, want)
	}
	if again := compileListed(Postgres, `INSERT INTO t (A, B, C) SELECT @x, `, `(@event, @now)`, ` RETURNING A`, 3); !reflect.DeepEqual(again, st) {
		t.Errorf("compiled again: %+v", again)
	}
	if v, _ := (args{{"x", 1}}).set("x", 2).get("x"); v != 2 {
		t.Errorf("set x to 2, then x = %v", v)
	}
}
