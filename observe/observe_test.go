package observe_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/observe"
)

// recordingPublisher keeps the headers of what it publishes, then
// publishes for real.
type recordingPublisher struct {
	dlq.Publisher
	mu      sync.Mutex
	headers []map[string]string
}

func (r *recordingPublisher) Publish(ctx context.Context, dest string, h map[string]string, body []byte) error {
	r.mu.Lock()
	r.headers = append(r.headers, h)
	r.mu.Unlock()
	return r.Publisher.Publish(ctx, dest, h, body)
}

// mixHandler: body "reject" is a business rejection, "poison" is poison,
// anything else is processed.
func mixHandler(_ context.Context, _ *sql.Tx, m inboxkit.Message) error {
	switch string(m.Body) {
	case "reject":
		return classify.Reject("CUSTOMER_UNKNOWN", nil)
	case "poison":
		return classify.Poison("MALFORMED_PAYLOAD", nil)
	}
	return nil
}

const parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// sendMix starts an embedded JetStream server and an SQLite inbox, and
// publishes the known mix: E-1..E-3 ok, E-1 and E-2 again (duplicates), E-4
// a business rejection, E-5 poison (with a traceparent), one without event id.
func sendMix(ctx context.Context, t *testing.T) (*jetstream.Adapter, *inbox.Store) {
	t.Helper()
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	a, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Stream: "MIX", Subject: "mix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.EnsureStream(ctx, "MIXDLQ", "dlq.mix"); err != nil {
		t.Fatal(err)
	}
	db := dbtest.New(t, dbtest.SQLite)
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{ClassifyFunc: classify.Of})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(id, body string, extra ...string) {
		h := map[string]string{"correlationId": "C-" + id}
		if id != "" {
			h["eventId"] = id
		}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		if err := a.Publish(ctx, "mix", h, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	send("E-1", "ok")
	send("E-2", "ok")
	send("E-3", "ok")
	send("E-1", "ok")
	send("E-2", "ok")
	send("E-4", "reject")
	send("E-5", "poison", "traceparent", "00-"+parentTrace+"-00f067aa0ba902b7-01")
	send("", "no event id")
	return a, store
}

// A known mix of deliveries — 3 processed, 2 duplicates, 1 business
// rejection, 2 poison (one malformed, one without event id) — shows as
// exactly these counts on /metrics, the inbox gauges count the table, and
// every delivery has one span; the dead letter carries the delivery span's
// traceparent, in the trace of the message's own traceparent.
func TestMetricsAndTracesOfAKnownMix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, store := sendMix(ctx, t)
	const total = 8

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := observe.New(observe.Config{Consumer: "mix", Store: store, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	dead := &recordingPublisher{Publisher: a}
	var mu sync.Mutex
	settled := 0
	all := make(chan struct{})
	c, err := consumer.New(consumer.Config{
		Name: "mix", Source: a, Store: store, Handler: mixHandler,
		DeadLetter: observe.TracePublisher(dead), DeadLetterQueue: "dlq.mix",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: counted{obs, func() {
			mu.Lock()
			defer mu.Unlock()
			if settled++; settled == total {
				close(all)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("only %d of %d deliveries settled", settled, total)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := obs.RefreshInbox(ctx); err != nil {
		t.Fatal(err)
	}

	hs := httptest.NewServer(observe.Mux(obs, nil))
	defer hs.Close()
	body := get(t, hs.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`inboxkit_deliveries_total{action="ack",consumer="mix",outcome="PROCESSED",status="PROCESSED"} 3`,
		`inboxkit_deliveries_total{action="ack",consumer="mix",outcome="DUPLICATE",status="PROCESSED"} 2`,
		`inboxkit_deliveries_total{action="reject",consumer="mix",outcome="REJECTED",status="REJECTED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="mix",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="mix",outcome="DEAD_LETTER",status="NONE"} 1`, // no event id, no row
		`inboxkit_duplicates_total{consumer="mix"} 2`,
		`inboxkit_rejections_total{consumer="mix",reason="CUSTOMER_UNKNOWN"} 1`,
		`inboxkit_dead_letters_total{consumer="mix",reason="MALFORMED_PAYLOAD"} 1`,
		`inboxkit_dead_letters_total{consumer="mix",reason="MISSING_EVENT_ID"} 1`,
		`inboxkit_runtime_errors_total{consumer="mix"} 0`,
		`inboxkit_deliveries_in_flight{consumer="mix"} 0`,
		`inboxkit_delivery_duration_seconds_count{consumer="mix"} 8`,
		`inboxkit_handler_duration_seconds_count{consumer="mix"} 5`, // 3 processed, the rejection, the malformed one
		`inboxkit_inbox_rows{consumer="mix",status="PROCESSED"} 3`,
		`inboxkit_inbox_rows{consumer="mix",status="REJECTED"} 1`,
		`inboxkit_inbox_rows{consumer="mix",status="DEAD_LETTERED"} 1`,
		`inboxkit_inbox_rows{consumer="mix",status="TECHNICAL_FAILURE"} 0`,
		`inboxkit_inbox_rows_at_threshold{consumer="mix"} 0`,
		`inboxkit_inbox_oldest_nonterminal_age_seconds{consumer="mix"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", grep(body, "inboxkit_"))
	}

	ended := spans.Ended()
	deliveries := 0
	var poisonSpan sdktrace.ReadOnlySpan
	for _, s := range ended {
		if s.Name() != "inboxkit.delivery" {
			continue
		}
		deliveries++
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["event_id"] == "E-5" {
			poisonSpan = s
			if attrs["outcome"] != "DEAD_LETTER" || attrs["reason"] != "MALFORMED_PAYLOAD" || attrs["correlation_id"] != "C-E-5" || attrs["attempts"] == "" {
				t.Errorf("span of E-5 has attributes %v", attrs)
			}
		}
	}
	if deliveries != total {
		t.Errorf("%d delivery spans, want %d", deliveries, total)
	}
	if poisonSpan == nil {
		t.Fatal("no span for E-5")
	}
	if got := poisonSpan.SpanContext().TraceID().String(); got != parentTrace {
		t.Errorf("span of E-5 is in trace %s, want the message's trace %s", got, parentTrace)
	}
	var tp5 string
	dead.mu.Lock()
	for _, h := range dead.headers {
		if h[dlq.HeaderEventID] == "E-5" {
			tp5 = h["traceparent"]
		}
	}
	dead.mu.Unlock()
	want := "00-" + parentTrace + "-" + poisonSpan.SpanContext().SpanID().String() + "-01"
	if tp5 != want {
		t.Errorf("dead letter of E-5 carries traceparent %q, want the delivery span's %q", tp5, want)
	}
}

func get(t *testing.T, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %d, want %d\n%s", url, resp.StatusCode, code, b)
	}
	return string(b)
}

func grep(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// /readyz is 503 while a check fails and once draining, and says why.
func TestReadiness(t *testing.T) {
	h := observe.NewHealth()
	var mu sync.Mutex
	var dbErr error
	h.Add("database", func(context.Context) error { mu.Lock(); defer mu.Unlock(); return dbErr })
	hs := httptest.NewServer(observe.Mux(nil, h))
	defer hs.Close()
	var r observe.Readiness
	decode := func(s string) {
		t.Helper()
		r = observe.Readiness{}
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
	}
	get(t, hs.URL+"/healthz", http.StatusOK)
	decode(get(t, hs.URL+"/readyz", http.StatusOK))
	if !r.Ready || len(r.Checks) != 1 || !r.Checks[0].OK {
		t.Fatalf("ready: %+v", r)
	}
	mu.Lock()
	dbErr = context.DeadlineExceeded
	mu.Unlock()
	decode(get(t, hs.URL+"/readyz", http.StatusServiceUnavailable))
	if r.Ready || r.Checks[0].OK || r.Checks[0].Error == "" {
		t.Fatalf("during the outage: %+v", r)
	}
	mu.Lock()
	dbErr = nil
	mu.Unlock()
	get(t, hs.URL+"/readyz", http.StatusOK)
	h.SetDraining()
	decode(get(t, hs.URL+"/readyz", http.StatusServiceUnavailable))
	if r.Ready || !r.Draining {
		t.Fatalf("draining: %+v", r)
	}
	get(t, hs.URL+"/healthz", http.StatusOK)
}

// The Grafana dashboard in the repository uses only metrics this package
// registers.
func TestDashboardUsesRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	obs, err := observe.New(observe.Config{Consumer: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// Vectors show once they have a child: settle a dead letter and a rejection.
	for _, s := range []consumer.Settled{
		{Action: inboxkit.ActionDeadLetter, Result: inbox.Result{Outcome: inboxkit.OutcomeDeadLetter, Reason: "R"}},
		{Action: inboxkit.ActionReject, Result: inbox.Result{Outcome: inboxkit.OutcomeRejected, Reason: "R"}},
	} {
		_, done := obs.Delivery(context.Background(), inboxkit.Message{ID: "x"})
		done(s)
	}
	mfs, err := obs.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, mf := range mfs {
		known[mf.GetName()] = true
	}
	used := regexp.MustCompile(`inboxkit_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				n++
				base := strings.TrimSuffix(m, "_bucket")
				if !known[base] {
					t.Errorf("panel %q uses %s, which is not registered", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard uses no inboxkit metric")
	}
}

// Issue 16.1: purge rows and duration reach /metrics through Observer.Purge;
// a dry run records nothing.
func TestPurgeMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, dbtest.SQLite)
	store, err := inbox.New(db.DB, inbox.SQLite, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	old := time.Now().UTC().Add(-40 * 24 * time.Hour).Format("2006-01-02 15:04:05.000000")
	if _, err := db.ExecContext(ctx, `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, PROCESSED_AT) VALUES ('p-1', 'c', 'PROCESSED', ?), ('p-2', 'c', 'REJECTED', ?), ('p-3', 'c', 'TECHNICAL_FAILURE', ?)`, old, old, old); err != nil {
		t.Fatal(err)
	}
	obs, err := observe.New(observe.Config{Consumer: "purger"})
	if err != nil {
		t.Fatal(err)
	}
	read := func() (rows float64, purges uint64) {
		mfs, err := obs.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "inboxkit_purge_rows_total":
				rows = mf.GetMetric()[0].GetCounter().GetValue()
			case "inboxkit_purge_duration_seconds":
				purges = mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return rows, purges
	}
	if n, err := obs.Purge(ctx, store, inbox.PurgeOptions{OlderThan: 720 * time.Hour, DryRun: true}); err != nil || n != 2 {
		t.Fatalf("dry run: %d, %v; want 2 rows", n, err)
	}
	if rows, purges := read(); rows != 0 || purges != 0 {
		t.Errorf("after a dry run: rows %v, purges %d; want 0, 0", rows, purges)
	}
	if n, err := obs.Purge(ctx, store, inbox.PurgeOptions{OlderThan: 720 * time.Hour}); err != nil || n != 2 {
		t.Fatalf("purge: %d, %v; want 2 rows", n, err)
	}
	if rows, purges := read(); rows != 2 || purges != 1 {
		t.Errorf("after the purge: inboxkit_purge_rows_total %v, purges observed %d; want 2, 1", rows, purges)
	}
}

// In store-then-process mode the workers' outcomes are counted too (issue
// 16): the mix's entries show as PROCESSED, REJECTED and DEAD_LETTER
// settlements of the workers beside the receive side's STORED ones. A copy
// is a duplicate only once its entry is finished; one that finds it still
// waiting for a worker is STORED too (issue 23.1).
func TestMetricsOfStoreThenProcessWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, store := sendMix(ctx, t)
	obs, err := observe.New(observe.Config{Consumer: "mix", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{
		Name: "mix", Source: a, Store: store, Handler: mixHandler, Mode: consumer.ModeStoreThenProcess,
		DeadLetter: a, DeadLetterQueue: "dlq.mix", WorkerPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	hs := httptest.NewServer(observe.Mux(obs, nil))
	defer hs.Close()
	want := []string{
		`inboxkit_deliveries_total{action="dead-letter",consumer="mix",outcome="DEAD_LETTER",status="NONE"} 1`, // no event id: never stored
		// the workers:
		`inboxkit_deliveries_total{action="ack",consumer="mix",outcome="PROCESSED",status="PROCESSED"} 3`,
		`inboxkit_deliveries_total{action="reject",consumer="mix",outcome="REJECTED",status="REJECTED"} 1`,
		`inboxkit_deliveries_total{action="dead-letter",consumer="mix",outcome="DEAD_LETTER",status="DEAD_LETTERED"} 1`,
		`inboxkit_rejections_total{consumer="mix",reason="CUSTOMER_UNKNOWN"} 1`,
		`inboxkit_dead_letters_total{consumer="mix",reason="MALFORMED_PAYLOAD"} 1`,
		`inboxkit_dead_letters_total{consumer="mix",reason="MISSING_EVENT_ID"} 1`,
		`inboxkit_runtime_errors_total{consumer="mix"} 0`,
		`inboxkit_delivery_duration_seconds_count{consumer="mix"} 13`, // 8 received, 5 processed by workers
	}
	// The 5 entries and the 2 copies: stored, or duplicates when the
	// copy came after its entry was processed.
	storedOrDup := func(body string) (stored, dups int) {
		for _, l := range strings.Split(body, "\n") {
			// A new entry is stored claimed by a running worker
			// (IN_PROGRESS), or RECEIVED while none runs yet.
			for _, st := range []string{"RECEIVED", "IN_PROGRESS"} {
				if v, ok := strings.CutPrefix(l, `inboxkit_deliveries_total{action="ack",consumer="mix",outcome="STORED",status="`+st+`"} `); ok {
					n, _ := strconv.Atoi(v)
					stored += n
				}
			}
			if v, ok := strings.CutPrefix(l, `inboxkit_duplicates_total{consumer="mix"} `); ok {
				dups, _ = strconv.Atoi(v)
			}
		}
		return stored, dups
	}
	var body string
	for {
		body = get(t, hs.URL+"/metrics", http.StatusOK)
		missing := 0
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing++
			}
		}
		stored, dups := storedOrDup(body)
		if missing == 0 && stored+dups == 7 && stored >= 5 {
			break
		}
		select {
		case <-ctx.Done():
			for _, w := range want {
				if !strings.Contains(body, w+"\n") {
					t.Errorf("/metrics lacks %s", w)
				}
			}
			t.Fatalf("/metrics (want 7 deliveries stored or duplicates, at least 5 stored):\n%s", grep(body, "inboxkit_"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// counted is an Observer that calls settled after the one it wraps saw a
// settlement.
type counted struct {
	consumer.Observer
	settled func()
}

func (c counted) Delivery(ctx context.Context, m inboxkit.Message) (context.Context, func(consumer.Settled)) {
	ctx, done := c.Observer.Delivery(ctx, m)
	return ctx, func(s consumer.Settled) { done(s); c.settled() }
}
