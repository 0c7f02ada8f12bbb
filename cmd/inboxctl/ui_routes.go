package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
)

//go:embed ui
var uiFiles embed.FS

// route is one route of the console: what docs/console-openapi.yaml lists
// (TestConsoleOpenAPI holds the two to each other).
type route struct {
	method string
	path   string // as the OpenAPI file writes it: /failures/{id}
	h      http.HandlerFunc
}

func (rt route) api() bool { return strings.HasPrefix(rt.path, "/api/") }

// pattern is the http.ServeMux pattern: "/" matches only itself.
func (rt route) pattern() string {
	if rt.path == "/" {
		return rt.method + " /{$}"
	}
	return rt.method + " " + rt.path
}

// routes are every route the console serves. A page renders the report of
// the command whose -o json its /api/ twin returns, built by the same
// function (collectStats, failureGroups, auditCase, replayDLQ,
// archiveGroup). An action on a group is two routes here (its
// confirmation and its POST, which calls the command's function and
// records the operator), a form on the group page and its entries in
// docs/console-openapi.yaml.
func (c *console) routes() []route {
	return []route{
		{"GET", "/", c.overviewPage},
		{"GET", "/failures", c.failuresPage},
		{"GET", "/failures/{id}", c.groupPage},
		{"GET", "/failures/{id}/replay", c.groupReplayConfirm},
		{"POST", "/failures/{id}/replay", c.groupReplay},
		{"GET", "/failures/{id}/archive", c.groupArchiveConfirm(true)},
		{"POST", "/failures/{id}/archive", c.groupArchive(true)},
		{"GET", "/failures/{id}/restore", c.groupArchiveConfirm(false)},
		{"POST", "/failures/{id}/restore", c.groupArchive(false)},
		{"GET", "/messages/{eventId}", c.messagePage},
		{"GET", "/messages/{eventId}/replay", c.messageReplayConfirm},
		{"POST", "/messages/{eventId}/replay", c.messageReplay},
		{"GET", "/search", c.searchPage},
		{"GET", "/replays/{n}", c.replayPage},
		{"GET", "/login", c.loginPage},
		{"POST", "/login", c.loginPost},
		{"GET", "/static/{name}", c.static},
		{"GET", "/api/session", c.apiSession},
		{"GET", "/api/stats", c.apiStats},
		{"GET", "/api/readiness", c.apiReadiness},
		{"GET", "/api/failures/groups", c.apiGroups},
		{"GET", "/api/audit", c.apiAudit},
		{"GET", "/api/dlq", c.apiDLQ},
		{"POST", "/api/dlq/replay", c.apiReplay},
		{"POST", "/api/failures/archive", c.apiArchive(true)},
		{"POST", "/api/failures/restore", c.apiArchive(false)},
	}
}

// ---- the reports: one function each, for the page and the API ----

// stats is 'inboxctl stats -o json' with the console's --dlq.
func (c *console) stats(ctx context.Context) (statsReport, error) {
	r, err := collectStats(ctx, c.st, c.b, c.dlq)
	if err == nil {
		r.Outbox, err = collectOutboxStats(ctx, c.st.DB(), c.t, c.of, r.At)
	}
	return r, err
}

// readiness asks each --readyz URL, at once.
func (c *console) readiness(ctx context.Context) []readiness {
	out := make([]readiness, len(c.readyz))
	var wg sync.WaitGroup
	for i, rz := range c.readyz {
		wg.Go(func() {
			r := readiness{Name: rz.name, URL: rz.url}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, rz.url, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = c.client.Do(req); err == nil {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
					r.Status, r.Body, r.Ready = resp.StatusCode, strings.TrimSpace(string(b)), resp.StatusCode == http.StatusOK
				}
			}
			if err != nil {
				r.Error = err.Error()
			}
			out[i] = r
		})
	}
	wg.Wait()
	return out
}

// dlqEntries is 'inboxctl dlq list -o json' of the console's --dlq.
func (c *console) dlqEntries(ctx context.Context, limit int) ([]dlqEntry, error) {
	if c.b == nil {
		return nil, usageErr("no dead-letter queue: start the console with --broker URL --dlq NAME")
	}
	if err := c.b.requireQueue(ctx, c.dlq); err != nil {
		return nil, err
	}
	ms, err := c.b.Browse(ctx, c.dlq, limit)
	if err != nil {
		return nil, err
	}
	es := make([]dlqEntry, 0, len(ms))
	for _, m := range ms {
		es = append(es, dlqEntryOf(m))
	}
	return es, nil
}

// audit is 'inboxctl audit -o json' (with the console's --broker and --dlq).
func (c *console) audit(ctx context.Context, q auditQuery) (auditReport, error) {
	return auditCase(ctx, c.st, c.t, c.of, q, c.b, []string{c.dlq}, io.Discard)
}

// ---- the API ----

func writeAPIJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = writeJSON(w, v)
}

func writeAPIError(w http.ResponseWriter, status int, err error) {
	writeAPIJSON(w, status, map[string]string{"error": err.Error()})
}

// statusOf is the HTTP status of a command's error: a usage error (exit
// 2 worded as bad input) is 400, "not found" 404, anything else 500.
func statusOf(err error) int {
	var ee *exitError
	switch {
	case errors.Is(err, inbox.ErrNoSuchGroup):
		return http.StatusNotFound
	case errors.As(err, &ee) && ee.code == exitFindings:
		return http.StatusNotFound
	case errors.As(err, &ee) && ee.code == exitUsage && !strings.Contains(err.Error(), "unreachable"):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func (c *console) apiSession(w http.ResponseWriter, r *http.Request) {
	writeAPIJSON(w, http.StatusOK, map[string]string{"operator": who(r), "csrfToken": c.csrf})
}

func (c *console) apiStats(w http.ResponseWriter, r *http.Request) {
	rep, err := c.stats(r.Context())
	if err != nil {
		writeAPIError(w, statusOf(err), err)
		return
	}
	writeAPIJSON(w, http.StatusOK, rep)
}

func (c *console) apiReadiness(w http.ResponseWriter, r *http.Request) {
	writeAPIJSON(w, http.StatusOK, c.readiness(r.Context()))
}

// groupsDLQ is the dead-letter queue the failure groups join: the
// console's --dlq (none without), at failures groups' default --browse.
func (c *console) groupsDLQ() dlqSource {
	return dlqSource{b: c.b, queue: c.dlq, browse: defaultGroupsBrowse}
}

func (c *console) apiGroups(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rep, err := failureGroups(r.Context(), c.st, q.Get("consumer"), q.Get("since"), archivedOf(r), time.Now().UTC(), c.groupsDLQ())
	if err != nil {
		writeAPIError(w, statusOf(err), err)
		return
	}
	writeAPIJSON(w, http.StatusOK, rep)
}

func (c *console) apiAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aq := auditQuery{CorrelationID: q.Get("correlationId"), EventID: q.Get("eventId"), OrderKey: q.Get("orderKey")}
	if op := q.Get("operator"); op != "" && aq.CorrelationID == "" && aq.OrderKey == "" {
		as, err := c.st.Actions(r.Context(), inbox.ActionFilter{Operator: op, EventID: aq.EventID})
		if err != nil {
			writeAPIError(w, statusOf(err), err)
			return
		}
		writeAPIJSON(w, http.StatusOK, nonNil(as))
		return
	}
	if countSet(aq.CorrelationID != "", aq.EventID != "", aq.OrderKey != "") != 1 {
		writeAPIError(w, http.StatusBadRequest, errors.New("give exactly one of correlationId, eventId, orderKey or operator"))
		return
	}
	rep, err := c.audit(r.Context(), aq)
	if err != nil {
		writeAPIError(w, statusOf(err), err)
		return
	}
	writeAPIJSON(w, http.StatusOK, rep.printed(c.b != nil))
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (c *console) apiDLQ(w http.ResponseWriter, r *http.Request) {
	limit := 1000
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeAPIError(w, http.StatusBadRequest, fmt.Errorf("limit %q: give a positive number", v))
			return
		}
		limit = n
	}
	es, err := c.dlqEntries(r.Context(), limit)
	if err != nil {
		writeAPIError(w, statusOf(err), err)
		return
	}
	writeAPIJSON(w, http.StatusOK, es)
}

// decodeBody decodes an API request's JSON body (64 KiB at most, no
// unknown field) into v; when it cannot, it answers 400 saying the body
// must be what and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeAPIError(w, http.StatusBadRequest, fmt.Errorf("the body must be %s (docs/console-openapi.yaml): %v", what, err))
		return false
	}
	return true
}

// apiReplay replays and answers when done, with what 'dlq replay -o json'
// prints (its error field set, and status 500, when the replay failed
// part-way).
func (c *console) apiReplay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if !decodeBody(w, r, &req, "a JSON replay request") {
		return
	}
	if req.Queue == "" {
		req.Queue = c.dlq
	}
	if c.b == nil {
		writeAPIError(w, http.StatusBadRequest, errors.New("replay needs a broker: start the console with --broker URL --dlq NAME"))
		return
	}
	if _, err := req.check(); err != nil {
		writeAPIError(w, http.StatusBadRequest, err)
		return
	}
	c.replayMu.Lock()
	rep, err := replayDLQ(r.Context(), c.st, c.b, req, who(r), "inboxctl ui API, ")
	c.replayMu.Unlock()
	switch {
	case err != nil && rep.Error == "":
		writeAPIError(w, statusOf(err), err)
	case err != nil:
		writeAPIJSON(w, http.StatusInternalServerError, rep)
	default:
		writeAPIJSON(w, http.StatusOK, rep)
	}
}

// archiveRequest is the body of POST /api/failures/archive and
// /api/failures/restore: the flags of 'inboxctl failures archive|restore'.
type archiveRequest struct {
	Group    string `json:"group"`
	Consumer string `json:"consumer,omitempty"`
}

// apiArchive archives (restores) a group and answers with what 'failures
// archive (restore) -o json' prints (status 500 with its error field set
// when it stopped part-way).
func (c *console) apiArchive(archive bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req archiveRequest
		if !decodeBody(w, r, &req, "a JSON object with group and consumer") {
			return
		}
		if req.Group == "" {
			writeAPIError(w, http.StatusBadRequest, errors.New(`give "group": a failure group's id (GET /api/failures/groups lists them, with archived=1 the archived ones)`))
			return
		}
		rep, err := archiveGroup(r.Context(), c.st, archive, req.Group, req.Consumer, who(r), "inboxctl ui API, ", os.Stderr)
		switch {
		case err != nil && rep.Err == "" && len(rep.IDs) == 0:
			writeAPIError(w, statusOf(err), err)
		case err != nil:
			writeAPIJSON(w, http.StatusInternalServerError, rep)
		default:
			writeAPIJSON(w, http.StatusOK, rep)
		}
	}
}

// ---- replays started from the pages ----

// replayJob is a replay a form started: it runs in the background (the
// page refreshes until it is done), one at a time.
type replayJob struct {
	N        int
	Req      replayRequest
	Operator string
	Started  time.Time

	mu     sync.Mutex
	done   bool
	ended  time.Time
	report replayReport
	err    string
}

// jobView is a job's state for a template.
type jobView struct {
	N        int
	Req      replayRequest
	Operator string
	Started  time.Time
	Done     bool
	Ended    time.Time
	Report   replayReport
	Err      string
}

func (j *replayJob) view() jobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	return jobView{N: j.N, Req: j.Req, Operator: j.Operator, Started: j.Started, Done: j.done, Ended: j.ended, Report: j.report, Err: j.err}
}

// startReplay starts req in the background under the console's context
// (a browser that goes away does not stop it) and returns its job.
func (c *console) startReplay(req replayRequest, operator string) *replayJob {
	c.jobsMu.Lock()
	j := &replayJob{N: len(c.jobs) + 1, Req: req, Operator: operator, Started: time.Now().UTC()}
	c.jobs = append(c.jobs, j)
	c.jobsMu.Unlock()
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		c.replayMu.Lock()
		rep, err := replayDLQ(c.ctx, c.st, c.b, req, operator, "inboxctl ui, ")
		c.replayMu.Unlock()
		j.mu.Lock()
		j.done, j.ended, j.report = true, time.Now().UTC(), rep
		if err != nil {
			j.err = err.Error()
		}
		j.mu.Unlock()
	}()
	return j
}

func (c *console) job(n string) *replayJob {
	i, err := strconv.Atoi(n)
	c.jobsMu.Lock()
	defer c.jobsMu.Unlock()
	if err != nil || i < 1 || i > len(c.jobs) {
		return nil
	}
	return c.jobs[i-1]
}

func (c *console) recentJobs() []jobView {
	c.jobsMu.Lock()
	js := append([]*replayJob(nil), c.jobs...)
	c.jobsMu.Unlock()
	var out []jobView
	for i := len(js) - 1; i >= 0 && len(out) < 5; i-- {
		out = append(out, js[i].view())
	}
	return out
}

// ---- pages ----

// page is what every template gets: the report of the page, and the
// console's state for the layout.
type page struct {
	Title    string
	Operator string
	CSRF     string
	Queue    string // the --dlq; "" reading only
	Err      string
	Data     any
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"when": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				if v.IsZero() {
					return "-"
				}
				return v.UTC().Format("2006-01-02 15:04:05")
			case *time.Time:
				if v == nil {
					return "-"
				}
				return v.UTC().Format("2006-01-02 15:04:05")
			}
			return fmt.Sprint(t)
		},
		"pretty": prettyBody,
		"dash":   orDash,
		"join":   strings.Join,
		"letterOf": func(qs []queueEntry, eventID string) bool {
			for _, q := range qs {
				if q.EventID == eventID && !q.NotEnvelope {
					return true
				}
			}
			return false
		},
	}
	names, err := fs.Glob(uiFiles, "ui/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(uiFiles, "ui/layout.html", n)
		if err != nil {
			return nil, err
		}
		pages[strings.TrimSuffix(base, ".html")] = t
	}
	return pages, nil
}

// prettyBody indents a JSON body; any other body is shown as it is.
func prettyBody(body string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(body), "", "  ") == nil {
		return b.String()
	}
	return body
}

func (c *console) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	p.Operator, p.CSRF, p.Queue = who(r), c.csrf, c.dlq
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, p); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = b.WriteTo(w)
}

func (c *console) fail(w http.ResponseWriter, r *http.Request, title string, err error) {
	c.render(w, r, "error", statusOf(err), page{Title: title, Err: err.Error()})
}

func (c *console) overviewPage(w http.ResponseWriter, r *http.Request) {
	rep, err := c.stats(r.Context())
	if err != nil {
		c.fail(w, r, "Overview", err)
		return
	}
	c.render(w, r, "overview", http.StatusOK, page{Title: "Overview", Data: struct {
		Stats     statsReport
		Readiness []readiness
		Jobs      []jobView
	}{rep, c.readiness(r.Context()), c.recentJobs()}})
}

func (c *console) failuresPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rep, err := failureGroups(r.Context(), c.st, q.Get("consumer"), q.Get("since"), archivedOf(r), time.Now().UTC(), c.groupsDLQ())
	title := "Failure groups"
	if archivedOf(r) {
		title = "Archived failure groups"
	}
	if err != nil {
		c.fail(w, r, title, err)
		return
	}
	c.render(w, r, "failures", http.StatusOK, page{Title: title, Data: rep})
}

// archivedOf is the archived parameter of failures groups' --archived:
// 1 or true.
func archivedOf(r *http.Request) bool {
	v := r.FormValue("archived")
	return v == "1" || v == "true"
}

// groupData is the group page's and its confirmations' data.
type groupData struct {
	EventID  string // none: the confirmation page is a group's
	Group    inbox.FailureGroup
	Archived bool // the group of archived rows (failures groups --archived)
	Consumer string
	Events   []string
	More     int
	Rate     string
	Limit    int
}

// group is the group of the request's id and consumer: of the archived
// rows when archived.
func (c *console) group(r *http.Request, archived bool) (groupData, error) {
	consumer := r.FormValue("consumer")
	g, ids, err := c.st.GroupEvents(r.Context(), r.PathValue("id"), inbox.FailureFilter{Consumer: consumer, Archived: archived})
	if err != nil {
		return groupData{}, err
	}
	d := groupData{Group: g, Archived: archived, Consumer: consumer, Events: ids, Rate: orDefault(r.FormValue("rate"), "10/s")}
	if len(ids) > 200 {
		d.Events, d.More = ids[:200], len(ids)-200
	}
	if v := r.FormValue("limit"); v != "" {
		if d.Limit, err = strconv.Atoi(v); err != nil {
			return d, usageErr("limit %q: give a number (0: no limit)", v)
		}
	}
	return d, nil
}

func (c *console) groupPage(w http.ResponseWriter, r *http.Request) {
	d, err := c.group(r, archivedOf(r))
	if err != nil {
		c.fail(w, r, "Failure group", err)
		return
	}
	c.render(w, r, "group", http.StatusOK, page{Title: "Failure group " + d.Group.ID, Data: d})
}

func (c *console) groupReplayConfirm(w http.ResponseWriter, r *http.Request) {
	d, err := c.group(r, false)
	if err == nil {
		_, err = replayRequest{Queue: c.dlq, Group: d.Group.ID, Rate: d.Rate, Limit: d.Limit}.check()
	}
	if err != nil {
		c.fail(w, r, "Replay a failure group", err)
		return
	}
	c.render(w, r, "confirm", http.StatusOK, page{Title: "Replay failure group " + d.Group.ID, Data: d})
}

func (c *console) groupReplay(w http.ResponseWriter, r *http.Request) {
	limit, _ := strconv.Atoi(r.PostFormValue("limit"))
	req := replayRequest{Queue: c.dlq, Group: r.PathValue("id"), Consumer: r.PostFormValue("consumer"), Rate: r.PostFormValue("rate"), Limit: limit}
	c.replayForm(w, r, req)
}

// replayForm starts the replay of a confirmed form and sends the browser
// to its page.
func (c *console) replayForm(w http.ResponseWriter, r *http.Request, req replayRequest) {
	if r.PostFormValue("confirm") != "yes" {
		c.fail(w, r, "Replay", usageErr("the replay was not confirmed: use the confirmation page's button"))
		return
	}
	if c.b == nil {
		c.fail(w, r, "Replay", usageErr("replay needs a broker: start the console with --broker URL --dlq NAME"))
		return
	}
	if _, err := req.check(); err != nil {
		c.fail(w, r, "Replay", err)
		return
	}
	j := c.startReplay(req, who(r))
	http.Redirect(w, r, fmt.Sprintf("/replays/%d", j.N), http.StatusSeeOther)
}

// archiveData is the data of the archive (restore) confirmation and of
// its result.
type archiveData struct {
	Archive bool
	groupData
	Report *archiveReport // nil: the confirmation
}

// groupArchiveConfirm is the confirmation of an archive (a restore: of
// the archived group).
func (c *console) groupArchiveConfirm(archive bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title := archiveTitle(archive)
		d, err := c.group(r, !archive)
		if err != nil {
			c.fail(w, r, title, err)
			return
		}
		c.render(w, r, "archive", http.StatusOK, page{Title: title + " " + d.Group.ID, Data: archiveData{Archive: archive, groupData: d}})
	}
}

// groupArchive archives (restores) a confirmed group with
// the function of 'failures archive (restore)', recorded as the login, and
// shows how many rows it archived (restored).
func (c *console) groupArchive(archive bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title := archiveTitle(archive)
		if r.PostFormValue("confirm") != "yes" {
			c.fail(w, r, title, usageErr("the %s was not confirmed: use the confirmation page's button", map[bool]string{true: "archive", false: "restore"}[archive]))
			return
		}
		id, consumer := r.PathValue("id"), r.PostFormValue("consumer")
		rep, err := archiveGroup(r.Context(), c.st, archive, id, consumer, who(r), "inboxctl ui, ", os.Stderr)
		if err != nil && rep.Err == "" && len(rep.IDs) == 0 {
			c.fail(w, r, title, err)
			return
		}
		p := page{Title: title + " " + id, Data: archiveData{Archive: archive, groupData: groupData{Group: rep.Group, Consumer: consumer}, Report: &rep}}
		status := http.StatusOK
		if err != nil {
			p.Err, status = err.Error(), http.StatusInternalServerError
		}
		c.render(w, r, "archive", status, p)
	}
}

func archiveTitle(archive bool) string {
	if archive {
		return "Archive failure group"
	}
	return "Restore failure group"
}

// messageData is the message page's data: audit's report of the event.
type messageData struct {
	EventID string
	Audit   auditReport
	Rate    string
}

func (c *console) messagePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("eventId")
	rep, err := c.audit(r.Context(), auditQuery{EventID: id})
	if err != nil {
		c.fail(w, r, "Message "+id, err)
		return
	}
	status := http.StatusOK
	if len(rep.Rows) == 0 && len(rep.Queues) == 0 {
		status = http.StatusNotFound
	}
	c.render(w, r, "message", status, page{Title: "Message " + id, Data: messageData{EventID: id, Audit: rep, Rate: "1/s"}})
}

func (c *console) messageReplayConfirm(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("eventId")
	if _, err := (replayRequest{Queue: c.dlq, EventID: id}).check(); err != nil {
		c.fail(w, r, "Replay "+id, err)
		return
	}
	c.render(w, r, "confirm", http.StatusOK, page{Title: "Replay message " + id, Data: messageData{EventID: id}})
}

func (c *console) messageReplay(w http.ResponseWriter, r *http.Request) {
	c.replayForm(w, r, replayRequest{Queue: c.dlq, EventID: r.PathValue("eventId")})
}

// searchData is the search page's data: audit's report by each key.
type searchData struct {
	Q       string
	By      string
	Results []searchResult
}

type searchResult struct {
	By   string
	Rows []auditRow
}

func (c *console) searchPage(w http.ResponseWriter, r *http.Request) {
	d := searchData{Q: strings.TrimSpace(r.FormValue("q")), By: orDefault(r.FormValue("by"), "any")}
	if d.Q != "" {
		for _, k := range []struct {
			by string
			q  auditQuery
		}{{"event", auditQuery{EventID: d.Q}}, {"correlation", auditQuery{CorrelationID: d.Q}}, {"key", auditQuery{OrderKey: d.Q}}} {
			if d.By != "any" && d.By != k.by {
				continue
			}
			// The rows only: the queues are on the message page.
			rep, err := auditCase(r.Context(), c.st, c.t, c.of, k.q, nil, nil, io.Discard)
			if err != nil {
				c.fail(w, r, "Search", err)
				return
			}
			d.Results = append(d.Results, searchResult{By: k.q.title(), Rows: rep.Rows})
		}
	}
	c.render(w, r, "search", http.StatusOK, page{Title: "Search", Data: d})
}

func (c *console) replayPage(w http.ResponseWriter, r *http.Request) {
	j := c.job(r.PathValue("n"))
	if j == nil {
		c.fail(w, r, "Replay", &exitError{code: exitFindings, err: fmt.Errorf("no replay %s in this console's run", r.PathValue("n"))})
		return
	}
	v := j.view()
	if !v.Done {
		w.Header().Set("Refresh", "2") // the page follows the replay without a script
	}
	c.render(w, r, "replay", http.StatusOK, page{Title: fmt.Sprintf("Replay %d", j.N), Data: v})
}

func (c *console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", http.StatusOK, page{Title: "Log in", Data: c.token != ""})
}

func (c *console) loginPost(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("operator"))
	token := r.PostFormValue("token")
	if c.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if name == "" || !hmacEqual(token, c.token) {
		c.render(w, r, "login", http.StatusUnauthorized, page{Title: "Log in", Err: "wrong token, or no name: give your name and the content of the console's --auth-token-file", Data: true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: c.session(name), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *console) static(w http.ResponseWriter, r *http.Request) {
	b, err := uiFiles.ReadFile("ui/static/" + path.Base(r.PathValue("name")))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(r.PathValue("name")) {
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	_, _ = w.Write(b)
}
