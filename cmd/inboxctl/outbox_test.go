package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/outbox"
)

// outboxStore opens the outbox of dbURL (a test database inboxctl
// migrated) for the test to write to and read from.
func outboxStore(t *testing.T, db *dbtest.DB) *outbox.Store {
	t.Helper()
	d, err := inbox.DialectByName(db.Backend)
	if err != nil {
		t.Fatal(err)
	}
	st, err := outbox.New(db.DB, d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func outboxStatus(t *testing.T, st *outbox.Store, id string) outbox.Status {
	t.Helper()
	rows, err := st.List(context.Background(), outbox.ListOptions{MessageID: id})
	if err != nil || len(rows) != 1 {
		t.Fatalf("outbox row %s: %v, %v", id, rows, err)
	}
	return rows[0].Status
}

// TestRelayCommand: `inboxctl relay` on PostgreSQL (woken by LISTEN) sends
// an event's outbox messages to JetStream and to an HTTP endpoint; /readyz
// names the endpoint while it answers 503, /metrics counts by destination;
// a message the endpoint refuses is parked, listed, found by check and
// audit, retried; stats shows the outbox; purge deletes the sent rows.
func TestRelayCommand(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.Postgres)
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--no-invoice-tables"), 0, fmt.Sprintf("migrated outbox INBOXKIT_OUTBOX: schema version 0 -> %d", outbox.SchemaVersion))
	wantCode(t, inboxctl(t, "", "migrate", "--db", db.DSN, "--no-invoice-tables"), 0, fmt.Sprintf("migrated outbox INBOXKIT_OUTBOX: schema version %[1]d -> %[1]d", outbox.SchemaVersion))

	var down, refuse atomic.Bool
	down.Store(true)
	refuse.Store(true)
	var letters atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/bad" && refuse.Load():
			http.Error(w, "unknown customer", http.StatusUnprocessableEntity)
		case down.Load():
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		default:
			letters.Add(1)
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()

	// An event handled with the inbox, whose handler writes to the outbox.
	ctx := context.Background()
	ib, err := inbox.New(db.DB, inbox.Postgres, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ob := outboxStore(t, db)
	subject := fmt.Sprintf("inboxctl.outbox.%d", time.Now().UnixNano())
	var ids []string
	hctx := inboxkit.ContextWithMessage(ctx, inboxkit.Message{ID: "evt-1", CorrelationID: "corr-1"})
	res, err := ib.Process(hctx, inbox.Entry{EventID: "evt-1", ConsumerName: "invoice-consumer", CorrelationID: "corr-1"}, func(ctx context.Context, tx *sql.Tx) error {
		for _, m := range []outbox.Message{
			{Destination: subject, Key: "K-100", Body: []byte("1")},
			{Destination: subject, Key: "K-100", Body: []byte("2")},
			{Destination: srv.URL + "/letters", Body: []byte(`{"letter":1}`)},
			{Destination: srv.URL + "/bad", Body: []byte(`{"letter":2}`)},
		} {
			id, err := ob.Add(hctx, tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil || res.Outcome != inboxkit.OutcomeProcessed {
		t.Fatalf("process: %+v, %v", res, err)
	}

	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	relay, logs := startCommand(rctx, t, "relay", "--db", db.DSN, "--broker", "nats://127.0.0.1:4222", "--poll", "1h",
		"--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	base := metricsBase(t, logs)
	waitFor(t, "the JetStream messages SENT and the refused one PARKED", func() bool {
		return outboxStatus(t, ob, ids[1]) == outbox.StatusSent && outboxStatus(t, ob, ids[3]) == outbox.StatusParked
	}, logs)
	var code int
	var body string
	waitFor(t, "/readyz 503 naming the endpoint", func() bool {
		code, body = httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cannot send to "+srv.URL)
	}, dump(func() string { return body }))
	wantOnlyFailing(t, body, "outbox-relay")
	down.Store(false)
	waitFor(t, "the letter SENT and /readyz 200", func() bool {
		code, body = httpGet(t, base+"/readyz")
		return outboxStatus(t, ob, ids[2]) == outbox.StatusSent && code == http.StatusOK
	}, dump(func() string { return body + "\n" + logs.String() }))
	label := strings.TrimPrefix(srv.URL, "")
	metrics := waitForMetrics(t, base, logs, []string{
		`inboxkit_outbox_sent_total{destination="` + subject + `"} 2`,
		`inboxkit_outbox_sent_total{destination="` + label + `"} 1`,
		`inboxkit_outbox_parked_total{destination="` + label + `"} 1`,
		`inboxkit_outbox_parked_rows{destination="` + label + `"} 1`,
	})
	if !strings.Contains(metrics, `inboxkit_outbox_failed_total{destination="`+label+`"}`) || !strings.Contains(metrics, `inboxkit_outbox_relay_lag_seconds_count{destination="`+subject+`"} 2`) {
		t.Errorf("/metrics lacks the failed sends or the lag histogram:\n%s", grepLines(metrics, "inboxkit_outbox"))
	}
	t.Logf("/metrics:\n%s", grepLines(metrics, "inboxkit_outbox_sent", "inboxkit_outbox_failed", "inboxkit_outbox_parked", "inboxkit_outbox_pending", "inboxkit_outbox_oldest"))

	// The operator's view.
	r := inboxctl(t, "", "outbox", "list", "--db", db.DSN, "--parked", "-o", "json")
	var listed struct{ Rows []outbox.Row }
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 || len(listed.Rows) != 1 || listed.Rows[0].ID != ids[3] || !strings.Contains(listed.Rows[0].LastError, "unknown customer") {
		t.Fatalf("outbox list --parked: %v\n%s", err, r)
	}
	wantCode(t, inboxctl(t, "", "check", "--db", db.DSN, "--consumer", "invoice-consumer"), 1, "FOUND outbox-parked", "HTTP_422", "ok    outbox-stuck-pending")
	cfg := filepath.Join(t.TempDir(), "check.json")
	if _, err := db.ExecContext(ctx, `CREATE TABLE letters (event_id VARCHAR(120)); INSERT INTO letters VALUES ('evt-1'), ('evt-2')`); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(`{"consumer": "invoice-consumer", "outboxRowExists": {"name": "letter-without-outbox", "sql": "SELECT event_id FROM letters"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inboxctl(t, "", "check", "--db", db.DSN, "--config", cfg), 1, "FOUND letter-without-outbox", "evt-2")
	wantCode(t, inboxctl(t, "", "audit", "--db", db.DSN, "--event-id", "evt-1"), 0, "outbox messages the events' handling wrote: 4", ids[3], "PARKED", subject)
	wantCode(t, inboxctl(t, "", "stats", "--db", db.DSN), 0, "outbox INBOXKIT_OUTBOX", "parked outbox rows: 1")
	wantCode(t, inboxctl(t, "", "outbox", "drop", "--db", db.DSN, "--key", "nothing-parked"), 1, "no parked outbox message matches")
	refuse.Store(false)
	wantCode(t, inboxctl(t, "", "outbox", "retry", "--db", db.DSN, "--message-id", ids[3]), 0, "retried 1 parked message(s)")
	waitFor(t, "the retried message SENT", func() bool { return outboxStatus(t, ob, ids[3]) == outbox.StatusSent }, logs)
	if n := letters.Load(); n != 2 {
		t.Errorf("the endpoint took %d letters, want 2", n)
	}
	stopRun(t, relay, logs)

	wantCode(t, inboxctl(t, "", "purge", "--db", db.DSN, "--older-than", "168h", "--outbox-older-than", "1ns"), 0, "deleted 4 SENT or DROPPED outbox row(s)")
}

// TestRunRelays: `inboxctl run` sends the outbox's messages with a relay of
// its own; with --no-relay it leaves them.
func TestRunRelays(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, dbtest.SQLite)
	dbURL := "sqlite:" + strings.TrimPrefix(strings.SplitN(db.DSN, "?", 2)[0], "file:")
	wantCode(t, inboxctl(t, "", "migrate", "--db", dbURL), 0, "migrated outbox")
	ob := outboxStore(t, db)
	queue := fmt.Sprintf("inboxctl.run-relay.%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ob.Add(ctx, tx, outbox.Message{Destination: queue + ".out", Body: []byte("x")})
	if err != nil || tx.Commit() != nil {
		t.Fatal(err)
	}
	for _, noRelay := range []bool{true, false} {
		args := []string{"--db", dbURL, "--broker", "nats://127.0.0.1:4222", "--queue", queue, "--log-format", "json"}
		if noRelay {
			args = append(args, "--no-relay")
		}
		run, logs := startRun(ctx, t, args...)
		waitFor(t, "the consumer started", func() bool { return strings.Contains(logs.String(), "consumer started") }, logs)
		if noRelay {
			// run starts its relay before it logs "consumer started".
			if strings.Contains(logs.String(), "outbox relay started") || outboxStatus(t, ob, id) != outbox.StatusPending {
				t.Fatalf("--no-relay: the message is %s\n%s", outboxStatus(t, ob, id), logs)
			}
		} else {
			waitFor(t, "the message SENT by run's relay", func() bool { return outboxStatus(t, ob, id) == outbox.StatusSent }, logs)
		}
		stopRun(t, run, logs)
	}
}

func TestOutboxUsageErrors(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	wantCode(t, inboxctl(t, "", "outbox", "retry", "--db", sqlite), 2, "exactly one of --message-id ID or --key K or --all-parked")
	wantCode(t, inboxctl(t, "", "outbox", "list", "--db", sqlite), 2, "outbox table INBOXKIT_OUTBOX does not exist", "run inboxctl migrate")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	wantCode(t, inboxctl(t, "", "relay", "--db", sqlite, "--on-poison", "later"), 2, `OnPoison "later" is unknown`)
	wantCode(t, inboxctl(t, "", "relay", "--db", sqlite, "--max-attempts", "0"), 2, "must be at least 1")
	wantCode(t, inboxctl(t, "", "outbox", "list", "--db", sqlite, "--outbox-table", "X;Y"), 2, "invalid table name")
	wantCode(t, inboxctl(t, "", "outbox", "list", "--db", sqlite), 0, "no outbox messages")
}
