package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
)

// The console serves exactly the routes docs/console-openapi.yaml lists,
// and the file lists no route the console lacks.
func TestConsoleOpenAPI(t *testing.T) {
	t.Parallel()
	c := &console{}
	served := map[string]bool{}
	for _, rt := range c.routes() {
		served[strings.ToLower(rt.method)+" "+rt.path] = true
	}
	c.handler() // the patterns are valid and do not conflict (ServeMux panics otherwise)
	documented := openAPIRoutes(t, filepath.Join("..", "..", "docs", "console-openapi.yaml"))
	for r := range served {
		if !documented[r] {
			t.Errorf("the console serves %q, which docs/console-openapi.yaml does not document", r)
		}
	}
	for r := range documented {
		if !served[r] {
			t.Errorf("docs/console-openapi.yaml documents %q, which the console does not serve", r)
		}
	}
	if len(served) < 10 {
		t.Fatalf("only %d routes served: %v", len(served), served)
	}
}

// openAPIRoutes reads "method path" of every operation of an OpenAPI
// file's paths: a path at two spaces' indent, its methods at four.
func openAPIRoutes(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathRe := regexp.MustCompile(`^  (/[^:\s]*):\s*$`)
	methodRe := regexp.MustCompile(`^    (get|put|post|delete|patch|head|options):\s*$`)
	out := map[string]bool{}
	in, cur := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			in = true
		case in && line != "" && !strings.HasPrefix(line, " "):
			in = false
		case in && pathRe.MatchString(line):
			cur = pathRe.FindStringSubmatch(line)[1]
		case in && cur != "" && methodRe.MatchString(line):
			out[methodRe.FindStringSubmatch(line)[1]+" "+cur] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Off loopback the console refuses to start without a token, naming the
// flag; a short token is refused too.
func TestConsoleListenNeedsToken(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "i.db")
	wantCode(t, inboxctl(t, "", "ui", "--db", sqlite, "--listen", "0.0.0.0:16399"), 2, "not a loopback address", "--auth-token-file")
	wantCode(t, inboxctl(t, "", "ui", "--db", sqlite, "--listen", ":16399"), 2, "--auth-token-file")
	short := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "ui", "--db", sqlite, "--listen", "0.0.0.0:16399", "--auth-token-file", short), 2, "give 16 or more")
	wantCode(t, inboxctl(t, "", "ui", "--db", sqlite, "--dlq", "DLQ.x"), 2, "--dlq DLQ.x needs --broker")
	wantCode(t, inboxctl(t, "", "ui", "--db", sqlite, "--readyz", "127.0.0.1:9464"), 2, "give NAME=URL")
}

// startConsole starts `inboxctl ui args...` on a free loopback port and
// returns its base URL (http://127.0.0.1:PORT).
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, logs := startCommand(ctx, t, append([]string{"ui", "--listen", "127.0.0.1:0"}, args...)...)
	re := regexp.MustCompile(`serving the console at (http://[^/\s]+)/`)
	var base string
	waitFor(t, "the console's address in its log", func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, logs)
	return base
}

// call sends a request to the console and returns the status and body.
func call(t *testing.T, method, u string, header http.Header, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func wantStatus(t *testing.T, what string, got, want int, body string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: HTTP %d, want %d\n%s", what, got, want, body)
	}
}

// With a token every request needs it (a bearer header or the login's
// cookie), and every POST the CSRF token and a same-site origin.
func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "i.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "s3cret-token-of-the-console"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startConsole(t, "--db", sqlite, "--auth-token-file", tokenFile, "--operator", "proc")
	bearer := http.Header{"Authorization": {"Bearer " + token}}

	code, body, _ := call(t, "GET", base+"/api/stats", nil, "")
	wantStatus(t, "GET /api/stats without the token", code, 401, body)
	code, body, _ = call(t, "GET", base+"/api/stats", http.Header{"Authorization": {"Bearer wrong-token-wrong-token"}}, "")
	wantStatus(t, "GET /api/stats with a wrong token", code, 401, body)
	code, body, h := call(t, "GET", base+"/", nil, "")
	wantStatus(t, "GET / without the token", code, 303, body)
	if h.Get("Location") != "/login" {
		t.Errorf("GET / without the token goes to %q, want /login", h.Get("Location"))
	}
	code, body, _ = call(t, "GET", base+"/api/stats", bearer, "")
	wantStatus(t, "GET /api/stats with the token", code, 200, body)

	code, body, _ = call(t, "GET", base+"/api/session", bearer, "")
	wantStatus(t, "GET /api/session", code, 200, body)
	var s struct{ Operator, CSRFToken string }
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.CSRFToken == "" || s.Operator != "proc" {
		t.Fatalf("session: %v %+v", err, s)
	}
	replay := `{"all":true}`
	code, body, _ = call(t, "POST", base+"/api/dlq/replay", bearer, replay)
	wantStatus(t, "POST without the CSRF token", code, 403, body)
	cross := http.Header{"Authorization": bearer["Authorization"], "X-Csrf-Token": {s.CSRFToken}, "Sec-Fetch-Site": {"cross-site"}}
	code, body, _ = call(t, "POST", base+"/api/dlq/replay", cross, replay)
	wantStatus(t, "POST from another site", code, 403, body)
	origin := http.Header{"Authorization": bearer["Authorization"], "X-Csrf-Token": {s.CSRFToken}, "Origin": {"http://evil.example"}}
	code, body, _ = call(t, "POST", base+"/api/dlq/replay", origin, replay)
	wantStatus(t, "POST with another origin", code, 403, body)
	ok := http.Header{"Authorization": bearer["Authorization"], "X-Csrf-Token": {s.CSRFToken}, "Content-Type": {"application/json"}}
	code, body, _ = call(t, "POST", base+"/api/dlq/replay", ok, replay)
	wantStatus(t, "POST with both (no broker: a usage error)", code, 400, body)
	if !strings.Contains(body, "--broker URL --dlq NAME") {
		t.Errorf("the error does not name the fix: %s", body)
	}

	unconfirmed := http.Header{"Authorization": bearer["Authorization"], "Content-Type": {"application/x-www-form-urlencoded"}}
	code, body, _ = call(t, "POST", base+"/messages/ev-1/replay", unconfirmed, url.Values{"csrf": {s.CSRFToken}}.Encode())
	wantStatus(t, "a replay form without the confirmation", code, 400, body)
	if !strings.Contains(body, "not confirmed") {
		t.Errorf("the refusal does not say why:\n%s", body)
	}

	// The archive and the restore of a group: refused without the token,
	// without the CSRF token, and as a form without the confirmation.
	for _, p := range []string{"/api/failures/archive", "/api/failures/restore"} {
		code, body, _ = call(t, "POST", base+p, http.Header{"X-Csrf-Token": {s.CSRFToken}, "Content-Type": {"application/json"}}, `{"group":"000000000000"}`)
		wantStatus(t, "POST "+p+" without the token", code, 401, body)
		code, body, _ = call(t, "POST", base+p, bearer, `{"group":"000000000000"}`)
		wantStatus(t, "POST "+p+" without the CSRF token", code, 403, body)
		code, body, _ = call(t, "POST", base+p, ok, `{"group":"000000000000"}`)
		wantStatus(t, "POST "+p+" with both (an unknown group)", code, 404, body)
	}
	for _, p := range []string{"/failures/000000000000/archive", "/failures/000000000000/restore"} {
		code, body, _ = call(t, "POST", base+p, unconfirmed, url.Values{"confirm": {"yes"}}.Encode())
		wantStatus(t, "POST "+p+" without the CSRF token", code, 403, body)
		code, body, h := call(t, "POST", base+p, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, url.Values{"csrf": {s.CSRFToken}, "confirm": {"yes"}}.Encode())
		wantStatus(t, "POST "+p+" without the token", code, 303, body)
		if h.Get("Location") != "/login" {
			t.Errorf("POST %s without the token goes to %q, want /login", p, h.Get("Location"))
		}
		code, body, _ = call(t, "POST", base+p, unconfirmed, url.Values{"csrf": {s.CSRFToken}}.Encode())
		wantStatus(t, "POST "+p+" without the confirmation", code, 400, body)
		if !strings.Contains(body, "not confirmed") {
			t.Errorf("the refusal does not say why:\n%s", body)
		}
	}

	form := func(v url.Values) (int, string, http.Header) {
		return call(t, "POST", base+"/login", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, v.Encode())
	}
	code, body, _ = form(url.Values{"operator": {"alice"}, "token": {token}})
	wantStatus(t, "login without the CSRF token", code, 403, body)
	code, body, _ = form(url.Values{"operator": {"alice"}, "token": {"wrong"}, "csrf": {s.CSRFToken}})
	wantStatus(t, "login with a wrong token", code, 401, body)
	code, body, h = form(url.Values{"operator": {"alice"}, "token": {token}, "csrf": {s.CSRFToken}})
	wantStatus(t, "login", code, 303, body)
	cookie := h.Get("Set-Cookie")
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Errorf("session cookie: %s", cookie)
	}
	code, body, _ = call(t, "GET", base+"/", http.Header{"Cookie": {strings.SplitN(cookie, ";", 2)[0]}}, "")
	wantStatus(t, "GET / logged in", code, 200, body)
	if !strings.Contains(body, "operator <b>alice</b>") {
		t.Errorf("the page does not name the login:\n%s", body)
	}
	forged := sessionCookie + "=" + strings.SplitN(strings.SplitN(cookie, "=", 2)[1], ".", 2)[0] + ".00"
	code, body, _ = call(t, "GET", base+"/api/stats", http.Header{"Cookie": {forged}}, "")
	wantStatus(t, "a forged session", code, 401, body)
}

// consoleCase is a database with dead letters on RabbitMQ: group A (n
// rows with one error), and one row of another error; their envelopes
// on a DLQ of the test's own.
type consoleCase struct {
	url, queue, dlqName string
	groupA              []string
	other               string
}

const rabbitURL = "amqp://guest:guest@127.0.0.1:5672/"

// deadLetteredRow inserts a dead-lettered row of invoice-consumer: event
// id, correlation id, last error, created, updated, first failed and
// processed at, order key.
const deadLetteredRow = `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, ERROR_CLASS, LAST_ERROR, ATTEMPTS, REPLAY_COUNT, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT, PROCESSED_AT, ORDER_KEY) VALUES (?, 'invoice-consumer', 'DEAD_LETTERED', ?, 'MAX_ATTEMPTS', 'TECHNICAL', ?, 5, 0, ?, ?, ?, ?, ?)`

func newConsoleCase(t *testing.T, db *dbtest.DB, prefix string, n int) consoleCase {
	t.Helper()
	c := consoleCase{url: dbURL(t, db), queue: fmt.Sprintf("inboxctl.ui.%s.%d", prefix, time.Now().UnixNano())}
	c.dlqName = "DLQ." + c.queue
	rabbittest.Declare(t, c.queue)
	rabbittest.Declare(t, c.dlqName)
	wantCode(t, inboxctl(t, "", "migrate", "--db", c.url), 0)
	ctx := context.Background()
	b, err := brokerurl.Open(rabbitURL, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pub, err := b.Publisher(ctx)
	if err != nil {
		t.Fatalf("RabbitMQ publisher (start it with rabbitmq-server -detached): %v", err)
	}
	defer pub.Close()
	now := time.Now().UTC()
	q := deadLetteredRow
	for i := 1; i <= n+1; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		errText := fmt.Sprintf("letter service: HTTP 503 for 'INV-%d'", i)
		if i == n+1 {
			errText, c.other = "customer K-9 locked", id
		} else {
			c.groupA = append(c.groupA, id)
		}
		ts := now.Add(-time.Duration(n+2-i) * time.Minute).Format("2006-01-02 15:04:05.000000")
		execSQL(t, db, q, id, "corr-"+prefix, errText, ts, ts, ts, ts, "K-"+prefix)
		env := dlq.Envelope{Body: []byte(fmt.Sprintf(`{"invoice":"INV-%d","customer":"K-%d","amount":%d.50}`, i, i, 100*i)), Original: map[string]string{"eventId": id, "correlationId": "corr-" + prefix},
			Reason: "MAX_ATTEMPTS", Class: "TECHNICAL", Error: errText, Attempts: 5, Consumer: "invoice-consumer",
			OriginalDestination: c.queue, EventID: id, CorrelationID: "corr-" + prefix, DeadLetteredAt: now}
		if err := pub.Publish(ctx, c.dlqName, env.Headers(), env.Body); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// failedTwiceThenProcessed runs event id through the inbox of db: two
// technical failures, then a success; its history of attempts has two
// rows, its audit the success as a third line.
func failedTwiceThenProcessed(t *testing.T, db *dbtest.DB, id string) {
	t.Helper()
	d, err := inbox.DialectByName(db.Backend)
	if err != nil {
		t.Fatal(err)
	}
	s, err := inbox.New(db.DB, d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := inbox.Entry{EventID: id, ConsumerName: "invoice-consumer", CorrelationID: "corr-" + id}
	for i, herr := range []error{errors.New("letter service: HTTP 503"), errors.New("letter service: timeout"), nil} {
		res, err := s.Process(context.Background(), e, func(context.Context, *sql.Tx) error { return herr })
		if err != nil || (herr == nil) != (res.Status == inboxkit.StatusProcessed) {
			t.Fatalf("process %s, attempt %d: %+v %v", id, i+1, res, err)
		}
	}
}

// wantHistoryOf checks the attempt history of the event's one row: two
// technical failures, then the success.
func wantHistoryOf(t *testing.T, what string, rows []auditRow) {
	t.Helper()
	var got []string
	for _, r := range rows {
		for _, a := range r.AttemptHistory {
			got = append(got, fmt.Sprintf("%d %s %s %s", a.Attempt, a.Status, a.Class, a.Error))
		}
	}
	want := []string{"1 TECHNICAL_FAILURE TECHNICAL letter service: HTTP 503", "2 TECHNICAL_FAILURE TECHNICAL letter service: timeout", "3 PROCESSED  "}
	if !slices.Equal(got, want) {
		t.Errorf("%s: attempt history\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// countOf is the rows of status in a stats report.
func countOf(r statsReport, status string) int64 {
	var n int64
	for _, c := range r.Counts {
		if string(c.Status) == status {
			n += c.Rows
		}
	}
	return n
}

// The JSON API returns what the commands print with -o json, and replays a
// group at a rate, recorded with the operator, on PostgreSQL and MariaDB.
func TestConsoleAPI(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			c := newConsoleCase(t, db, "api"+backend[:2], 3)
			hist := "hist-" + backend
			failedTwiceThenProcessed(t, db, hist)
			ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
			defer ready.Close()
			down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "draining", http.StatusServiceUnavailable) }))
			defer down.Close()
			base := startConsole(t, "--db", c.url, "--broker", rabbitURL, "--dlq", c.dlqName, "--operator", "proc",
				"--readyz", "invoice="+ready.URL+"/readyz", "--readyz", "claims="+down.URL+"/readyz", "--readyz", "gone=http://127.0.0.1:16398/readyz")
			get := func(path string, v any) {
				t.Helper()
				code, body, _ := call(t, "GET", base+path, nil, "")
				wantStatus(t, "GET "+path, code, 200, body)
				if err := json.Unmarshal([]byte(body), v); err != nil {
					t.Fatalf("GET %s: %v\n%s", path, err, body)
				}
			}
			cli := func(v any, args ...string) {
				t.Helper()
				r := inboxctl(t, "", append(args, "-o", "json")...)
				wantCode(t, r, 0)
				if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
					t.Fatalf("inboxctl %v: %v\n%s", args, err, r)
				}
			}

			var rz []readiness
			get("/api/readiness", &rz)
			if len(rz) != 3 || !rz[0].Ready || rz[0].Body != "ok" || rz[1].Ready || rz[1].Status != 503 || rz[2].Ready || rz[2].Error == "" {
				t.Errorf("readiness: %+v", rz)
			}

			var apiStats, cliStats statsReport
			get("/api/stats", &apiStats)
			cli(&cliStats, "stats", "--db", c.url, "--broker", rabbitURL, "--dlq", c.dlqName)
			if !slices.Equal(apiStats.Counts, cliStats.Counts) || *apiStats.DLQ != *cliStats.DLQ || apiStats.DLQ.Depth != 4 {
				t.Errorf("/api/stats and inboxctl stats differ:\n%+v\n%+v", apiStats, cliStats)
			}
			var apiGroups, cliGroups failureGroupsReport
			get("/api/failures/groups", &apiGroups)
			cli(&cliGroups, "failures", "groups", "--db", c.url, "--broker", rabbitURL, "--dlq", c.dlqName)
			apiJSON, _ := json.Marshal([]any{apiGroups.Groups, apiGroups.DLQ})
			cliJSON, _ := json.Marshal([]any{cliGroups.Groups, cliGroups.DLQ})
			if string(apiJSON) != string(cliJSON) || len(apiGroups.Groups) != 2 || apiGroups.Groups[0].Rows != 3 ||
				apiGroups.Groups[0].DLQMessages == nil || *apiGroups.Groups[0].DLQMessages != 3 {
				t.Fatalf("/api/failures/groups and inboxctl failures groups differ:\n%+v\n%+v", apiGroups, cliGroups)
			}
			group := apiGroups.Groups[0].ID
			var apiAudit, cliAudit auditReport
			get("/api/audit?eventId="+c.groupA[0], &apiAudit)
			cli(&cliAudit, "audit", "--db", c.url, "--event-id", c.groupA[0], "--broker", rabbitURL, "--dlq", c.dlqName)
			// The case: the event's row, and the dead letters of its
			// correlation id (all four share one).
			if len(apiAudit.Rows) != 1 || len(apiAudit.Queues) != 4 || apiAudit.Rows[0].EventID != cliAudit.Rows[0].EventID ||
				len(cliAudit.Queues) != 4 || apiAudit.Queues[0].Headers["eventId"] == "" {
				t.Errorf("/api/audit and inboxctl audit differ:\n%+v\n%+v", apiAudit, cliAudit)
			}
			// An event that failed twice, then succeeded: the same history
			// from the API and the command, shown on its page.
			var apiHist, cliHist auditReport
			get("/api/audit?eventId="+hist, &apiHist)
			cli(&cliHist, "audit", "--db", c.url, "--event-id", hist, "--broker", rabbitURL, "--dlq", c.dlqName)
			wantHistoryOf(t, "/api/audit", apiHist.Rows)
			wantCode(t, inboxctl(t, "", "audit", "--db", c.url, "--event-id", hist), 0, "attempts of "+hist+" (invoice-consumer): 3", "letter service: timeout", "PROCESSED")
			if a, b := mustJSON(t, apiHist.Rows), mustJSON(t, cliHist.Rows); a != b {
				t.Errorf("/api/audit and inboxctl audit differ:\n%s\n%s", a, b)
			}
			if code, body, _ := call(t, "GET", base+"/messages/"+hist, nil, ""); code != 200 || !strings.Contains(body, "History of attempts") ||
				strings.Count(body, "<tr><td class=\"n\">") != 3 || !strings.Contains(body, "letter service: timeout") {
				t.Errorf("GET /messages/%s: want the three lines of its history:\n%s", hist, body)
			}
			var byKey, cliByKey auditReport
			get("/api/audit?orderKey=K-api"+backend[:2], &byKey)
			cli(&cliByKey, "audit", "--db", c.url, "--order-key", "K-api"+backend[:2], "--broker", rabbitURL, "--dlq", c.dlqName)
			if len(byKey.Rows) != 4 || len(cliByKey.Rows) != 4 || len(byKey.Queues) != 4 {
				t.Errorf("by business key: want the 4 rows and dead letters, API %+v, CLI %+v", byKey, cliByKey)
			}
			var apiDLQ, cliDLQ []dlqEntry
			get("/api/dlq", &apiDLQ)
			cli(&cliDLQ, "dlq", "list", "--broker", rabbitURL, "--queue", c.dlqName)
			ids := func(es []dlqEntry) []string {
				var out []string
				for _, e := range es {
					out = append(out, e.EventID)
				}
				slices.Sort(out)
				return out
			}
			if !slices.Equal(ids(apiDLQ), ids(cliDLQ)) || len(apiDLQ) != 4 {
				t.Errorf("/api/dlq and inboxctl dlq list differ: %v %v", ids(apiDLQ), ids(cliDLQ))
			}

			// Every page renders the same reports.
			for _, p := range []string{"/", "/failures", "/failures/" + group, "/failures/" + group + "/replay?rate=2/s&limit=1",
				"/messages/" + c.groupA[0], "/messages/" + c.groupA[0] + "/replay", "/search?q=corr-api" + backend[:2], "/login", "/static/live.js"} {
				code, body, _ := call(t, "GET", base+p, nil, "")
				wantStatus(t, "GET "+p, code, 200, body)
			}
			// The groups page shows the DLQ column and line of the same report.
			if code, body, _ := call(t, "GET", base+"/failures", nil, ""); code != 200 || !strings.Contains(body, `<th class="n">DLQ</th>`) ||
				!strings.Contains(body, `<td class="n dlq">3</td>`) || !strings.Contains(body, apiGroups.DLQ.Summary()) {
				t.Errorf("GET /failures: want the DLQ column and %q:\n%s", apiGroups.DLQ.Summary(), body)
			}
			for p, want := range map[string]int{"/failures/000000000000": 404, "/replays/9": 404, "/failures?since=yesterday": 400, "/api/audit": 400} {
				code, body, _ := call(t, "GET", base+p, nil, "")
				wantStatus(t, "GET "+p, code, want, body)
			}

			var sess struct{ CSRFToken string }
			get("/api/session", &sess)
			h := http.Header{"X-Csrf-Token": {sess.CSRFToken}, "X-Operator": {"api-tester"}, "Content-Type": {"application/json"}}
			// While the console runs the group's job, a resume of it from
			// the command line is refused: the console holds the job.
			type answer struct {
				code int
				body string
			}
			done := make(chan answer, 1)
			go func() { // not call: no t.Fatal off the test's goroutine
				req, _ := http.NewRequest("POST", base+"/api/dlq/replay", strings.NewReader(`{"group":"`+group+`","rate":"1/s","limit":0}`))
				req.Header = h.Clone()
				resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
				if err != nil {
					done <- answer{0, err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				done <- answer{resp.StatusCode, string(b)}
			}()
			waitFor(t, "the console's replay job", func() bool {
				var n int
				return db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM INBOXKIT_REPLAY_JOB WHERE STATE = 'RUNNING'`).Scan(&n) == nil && n == 1
			}, &strings.Builder{})
			wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", rabbitURL, "--db", c.url, "--resume", "1"), 2, "replay job 1 is being run (heartbeat ")
			a := <-done
			code, body := a.code, a.body
			wantStatus(t, "replay the group", code, 200, body)
			var rep replayReport
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Fatal(err)
			}
			slices.Sort(rep.Replayed)
			if !slices.Equal(rep.Replayed, c.groupA) || rep.NotSelected != 1 || len(rep.Left) != 0 || rep.DryRun {
				t.Errorf("replay of group %s: %+v, want %v replayed and 1 not selected", group, rep, c.groupA)
			}
			code, body, _ = call(t, "POST", base+"/api/dlq/replay", h, `{"group":"`+group+`","reason":"X"}`)
			wantStatus(t, "two selections", code, 400, body)
			code, body, _ = call(t, "POST", base+"/api/dlq/replay", h, `{"group":"000000000000"}`)
			wantStatus(t, "an unknown group", code, 404, body)

			get("/api/stats", &apiStats)
			if countOf(apiStats, "DEAD_LETTERED") != 1 || countOf(apiStats, "TECHNICAL_FAILURE") != 3 || apiStats.DLQ.Depth != 1 {
				t.Errorf("after the replay: want 1 DEAD_LETTERED, 3 TECHNICAL_FAILURE, DLQ depth 1: %+v", apiStats)
			}
			var as []inbox.Action
			get("/api/audit?operator=api-tester", &as)
			if len(as) != 1 || as[0].Action != "dlq-replay" || as[0].Rows != 3 || !strings.Contains(as[0].Detail, "inboxctl ui API, queue "+c.dlqName+", job ") || !strings.Contains(as[0].Detail, "--group "+group) ||
				!strings.Contains(as[0].Detail, "--rate 1/s") {
				t.Errorf("the replay's action: %+v", as)
			}
			wantCode(t, inboxctl(t, "", "audit", "--db", c.url, "--operator", "api-tester"), 0, "actions of operator api-tester: 1")

			// The other group archived through the API: the groups leave it
			// out, the archived ones list it, recorded with the operator;
			// restored, it is back. Each answer is the command's -o json.
			other := apiGroups.Groups[1].ID
			wantArchiveAPI(t, base, c.url, other, c.other, "--broker", rabbitURL, "--dlq", c.dlqName)
		})
	}
}

// wantArchiveAPI archives group (of the one event) through the console at
// base and restores it, and checks each answer against the list of
// groups, the operator's actions and what 'inboxctl failures
// archive|restore|groups -o json' prints (groups with the console's
// dlqArgs).
func wantArchiveAPI(t *testing.T, base, dbURL, group, event string, dlqArgs ...string) {
	t.Helper()
	code, body, _ := call(t, "GET", base+"/api/session", nil, "")
	wantStatus(t, "GET /api/session", code, 200, body)
	var sess struct{ CSRFToken string }
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Csrf-Token": {sess.CSRFToken}, "X-Operator": {"archivist"}, "Content-Type": {"application/json"}}
	post := func(path, body string, want int) string {
		t.Helper()
		code, got, _ := call(t, "POST", base+path, h, body)
		wantStatus(t, "POST "+path+" "+body, code, want, got)
		return normJSON(t, got)
	}
	groupIDs := func(archived bool) []string {
		t.Helper()
		path, args := "/api/failures/groups", append([]string{"failures", "groups", "--db", dbURL, "-o", "json"}, dlqArgs...)
		if archived {
			path, args = path+"?archived=1", append(args, "--archived")
		}
		code, body, _ := call(t, "GET", base+path, nil, "")
		wantStatus(t, "GET "+path, code, 200, body)
		var api, cli failureGroupsReport
		if err := json.Unmarshal([]byte(body), &api); err != nil {
			t.Fatal(err)
		}
		r := inboxctl(t, "", args...)
		wantCode(t, r, 0)
		if err := json.Unmarshal([]byte(r.stdout), &cli); err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(t, api.Groups), mustJSON(t, cli.Groups); a != b || api.Archived != archived {
			t.Errorf("GET %s and inboxctl %v differ:\n%s\n%s", path, args, a, b)
		}
		var ids []string
		for _, g := range api.Groups {
			ids = append(ids, g.ID)
		}
		return ids
	}
	if !slices.Contains(groupIDs(false), group) || slices.Contains(groupIDs(true), group) {
		t.Fatalf("group %s: want it listed, not archived", group)
	}
	post("/api/failures/archive", `{"group":""}`, 400)
	post("/api/failures/archive", `{"group":"000000000000"}`, 404)
	post("/api/failures/archive", `{"group":"`+group+`","queue":"x"}`, 400)
	post("/api/failures/restore", `{"group":"`+group+`"}`, 404) // not archived

	archived := post("/api/failures/archive", `{"group":"`+group+`"}`, 200)
	var rep struct {
		Group    inbox.FailureGroup
		Archived []string
		Error    string
	}
	if err := json.Unmarshal([]byte(archived), &rep); err != nil || rep.Group.ID != group || !slices.Equal(rep.Archived, []string{event}) || rep.Error != "" {
		t.Fatalf("archive of group %s: %v %s", group, err, archived)
	}
	if slices.Contains(groupIDs(false), group) || !slices.Contains(groupIDs(true), group) {
		t.Fatalf("archived group %s: want it in the archived groups only", group)
	}
	code, body, _ = call(t, "GET", base+"/api/audit?operator=archivist", nil, "")
	wantStatus(t, "GET /api/audit?operator=archivist", code, 200, body)
	var as []inbox.Action
	if err := json.Unmarshal([]byte(body), &as); err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Action != "failures-archive" || as[0].Rows != 1 || !slices.Equal(as[0].EventIDs, []string{event}) ||
		!strings.HasPrefix(as[0].Detail, "inboxctl ui API, --group "+group+" (invoice-consumer DEAD_LETTERED MAX_ATTEMPTS)") {
		t.Errorf("the archive's action: %+v", as)
	}
	for _, p := range []string{"/failures?archived=1", "/failures/" + group + "?archived=1", "/failures/" + group + "/restore"} {
		code, body, _ := call(t, "GET", base+p, nil, "")
		wantStatus(t, "GET "+p, code, 200, body)
		if !strings.Contains(body, group) {
			t.Errorf("GET %s does not show group %s:\n%s", p, group, body)
		}
	}

	// The command restores it, the API archives it again: the same
	// answer as the first archive; restored through the API, the same
	// as the command's.
	r := inboxctl(t, "", "failures", "restore", "--db", dbURL, "--group", group, "--operator", "archivist", "-o", "json")
	wantCode(t, r, 0)
	cliRestored := normJSON(t, r.stdout)
	if again := post("/api/failures/archive", `{"group":"`+group+`","consumer":"invoice-consumer"}`, 200); again != archived {
		t.Errorf("the second archive answers\n%s\nthe first\n%s", again, archived)
	}
	if restored := post("/api/failures/restore", `{"group":"`+group+`"}`, 200); restored != cliRestored || !strings.Contains(restored, `"restored":["`+event+`"]`) {
		t.Errorf("POST /api/failures/restore answers\n%s\ninboxctl failures restore -o json\n%s", restored, cliRestored)
	}
	if !slices.Contains(groupIDs(false), group) || slices.Contains(groupIDs(true), group) {
		t.Fatalf("restored group %s: want it listed again, not archived", group)
	}
	wantCode(t, inboxctl(t, "", "audit", "--db", dbURL, "--operator", "archivist"), 0, "actions of operator archivist: 4", "failures-restore")
}

// normJSON is s as encoding/json writes it again (one line, keys sorted).
func normJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return mustJSON(t, v)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
