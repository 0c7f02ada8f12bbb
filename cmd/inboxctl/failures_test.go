package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
)

// plantFailures inserts failed and healthy rows: two customers unknown
// (one REJECTED group), a dead letter twice with different ids and one
// replayed, a technical failure at the threshold and one below it, a
// PROCESSED row, and another consumer's dead letter changed long ago.
func plantFailures(t *testing.T, db *dbtest.DB) {
	t.Helper()
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(-d).Format("2006-01-02 15:04:05.000000") }
	q := `INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, REASON_CODE, ERROR_CLASS, LAST_ERROR, ATTEMPTS, REPLAY_COUNT, CREATED_AT, UPDATED_AT, FIRST_FAILED_AT) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	for _, r := range []struct {
		id, consumer, status, reason, class, err string
		attempts, replays                        int
		age                                      time.Duration
	}{
		{"r-1", "invoice-consumer", "REJECTED", "CUSTOMER_UNKNOWN", "BUSINESS", "customer K-100 unknown", 1, 0, 2 * time.Hour},
		{"r-2", "invoice-consumer", "REJECTED", "CUSTOMER_UNKNOWN", "BUSINESS", "customer K-200 unknown", 1, 0, time.Hour},
		{"d-1", "invoice-consumer", "DEAD_LETTERED", "MAX_ATTEMPTS", "TECHNICAL", "letter service: HTTP 503 for 'INV-1'", 5, 2, 3 * time.Hour},
		{"d-2", "invoice-consumer", "DEAD_LETTERED", "MAX_ATTEMPTS", "TECHNICAL", "letter service: HTTP 503 for 'INV-2'", 5, 0, time.Hour},
		{"t-1", "invoice-consumer", "TECHNICAL_FAILURE", "", "TECHNICAL", "database timeout after 30s", 5, 0, time.Hour},
		{"t-2", "invoice-consumer", "TECHNICAL_FAILURE", "", "TECHNICAL", "database timeout after 30s", 2, 0, time.Hour},
		{"p-1", "invoice-consumer", "PROCESSED", "", "", "", 1, 0, time.Hour},
		{"o-1", "claims", "DEAD_LETTERED", "POISON", "POISON", "cannot decode body at offset 17", 1, 0, 72 * time.Hour},
	} {
		execSQL(t, db, q, r.id, r.consumer, r.status, nullIfEmpty(r.reason), nullIfEmpty(r.class), nullIfEmpty(r.err),
			r.attempts, r.replays, ts(r.age), ts(r.age), ts(r.age+time.Minute))
	}
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// failures groups: the failed rows by cause on every database, ids
// scrubbed, the threshold, --consumer and --since, text and JSON.
func TestFailureGroups(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.All {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, backend)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			wantCode(t, inboxctl(t, "", "failures", "groups", "--db", url), 0, "no failed rows")
			plantFailures(t, db)
			r := inboxctl(t, "", "failures", "groups", "--db", url)
			wantCode(t, r, 0, "customer <id> unknown", "letter service: HTTP <n> for <q>", "database timeout after <id>",
				"cannot decode body at offset <n>", "6 failed row(s) in 4 group(s)")
			t.Logf("inboxctl failures groups:\n%s", r.stdout)
			groups := func(args ...string) failureGroupsReport {
				t.Helper()
				r := inboxctl(t, "", append([]string{"failures", "groups", "--db", url, "-o", "json"}, args...)...)
				wantCode(t, r, 0)
				var rep failureGroupsReport
				if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
					t.Fatalf("failures groups -o json: %v\n%s", err, r)
				}
				return rep
			}
			rep := groups()
			if rep.Rows != 6 || len(rep.Groups) != 4 {
				t.Fatalf("want 6 rows in 4 groups: %+v", rep)
			}
			var dead inbox.FailureGroup
			for _, g := range rep.Groups {
				if g.Status == "DEAD_LETTERED" && g.ConsumerName == "invoice-consumer" {
					dead = g.FailureGroup
				}
			}
			if rep.Groups[0].Rows != 2 || rep.Groups[3].Rows != 1 {
				t.Errorf("the largest group first: %+v", rep.Groups)
			}
			if dead.Rows != 2 || dead.Status != "DEAD_LETTERED" || dead.ConsumerName != "invoice-consumer" || dead.Replays != 2 || dead.Replayed != 1 ||
				dead.ReasonCode != "MAX_ATTEMPTS" || dead.Example != "letter service: HTTP 503 for 'INV-2'" ||
				dead.LastFailed.Sub(dead.FirstFailed) < 2*time.Hour || len(dead.ID) != 12 {
				t.Errorf("the dead letters of invoice-consumer: %+v", dead)
			}
			for _, g := range rep.Groups {
				if g.Status == "TECHNICAL_FAILURE" && g.Rows != 1 {
					t.Errorf("only the row at the threshold counts: %+v", g)
				}
			}
			if rep := groups("--max-attempts", "2"); rep.Rows != 7 {
				t.Errorf("--max-attempts 2: want 7 rows, got %+v", rep)
			}
			if rep := groups("--consumer", "claims"); rep.Rows != 1 || rep.Groups[0].ReasonCode != "POISON" {
				t.Errorf("--consumer claims: %+v", rep)
			}
			if rep := groups("--since", "24h"); rep.Rows != 5 {
				t.Errorf("--since 24h: want 5 rows, got %+v", rep)
			}
			wantCode(t, inboxctl(t, "", "failures", "groups", "--db", url, "--since", "yesterday"), 2, `--since "yesterday"`)
		})
	}
}

// failures groups --broker --dlq: the dead letters of two groups, a dead
// letter of a PROCESSED row, one whose consumer has no row of its event
// and a message that is not an inboxkit dead letter on the DLQ give each
// group its count and the others theirs; --consumer moves a group's
// dead letters to the others; a --browse under the queue's depth says the
// counts are lower bounds. On PostgreSQL with RabbitMQ and ActiveMQ (STOMP).
func TestFailureGroupsDLQ(t *testing.T) {
	t.Parallel()
	for _, bk := range []struct{ name, url string }{{"rabbitmq", rabbitURL}, {"activemq", "stomp://" + stompAddr}} {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			if bk.name == "activemq" {
				needActiveMQ(t)
			}
			db := dbtest.New(t, dbtest.Postgres)
			url := dbURL(t, db)
			wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
			plantFailures(t, db)
			dlqName := fmt.Sprintf("DLQ.inboxctl.groups.%s.%d", bk.name, time.Now().UnixNano())
			if bk.name == "rabbitmq" {
				rabbittest.Declare(t, dlqName)
			}
			ctx := context.Background()
			b, err := brokerurl.Open(bk.url, brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			pub, err := b.Publisher(ctx)
			if err != nil {
				t.Fatalf("%s publisher (RabbitMQ: rabbitmq-server -detached; ActiveMQ: scripts/activemq start): %v", bk.name, err)
			}
			defer pub.Close()
			for _, l := range []struct{ consumer, event string }{
				{"invoice-consumer", "d-1"}, {"invoice-consumer", "d-2"}, {"claims", "o-1"},
				{"invoice-consumer", "p-1"}, // its row is PROCESSED
				{"invoice-consumer", "o-1"}, // o-1 is claims' row, not invoice-consumer's
			} {
				env := dlq.Envelope{Body: []byte(`{"n":1}`), Original: map[string]string{"eventId": l.event}, Reason: "MAX_ATTEMPTS", Class: "TECHNICAL",
					Error: "failed", Attempts: 5, Consumer: l.consumer, OriginalDestination: "invoices", EventID: l.event, DeadLetteredAt: time.Now().UTC()}
				if err := pub.Publish(ctx, dlqName, env.Headers(), env.Body); err != nil {
					t.Fatal(err)
				}
			}
			if err := pub.Publish(ctx, dlqName, map[string]string{"eventId": "d-1"}, []byte("moved by the broker")); err != nil {
				t.Fatal(err)
			}
			groups := func(args ...string) failureGroupsReport {
				t.Helper()
				r := inboxctl(t, "", append([]string{"failures", "groups", "--db", url, "--broker", bk.url, "--dlq", dlqName, "-o", "json"}, args...)...)
				wantCode(t, r, 0)
				var rep failureGroupsReport
				if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
					t.Fatalf("failures groups -o json: %v\n%s", err, r)
				}
				return rep
			}
			dlqOf := func(rep failureGroupsReport) map[string]int {
				m := map[string]int{}
				for _, g := range rep.Groups {
					if g.DLQMessages == nil {
						t.Fatalf("group %s without dlqMessages: %+v", g.ID, rep)
					}
					m[g.ConsumerName+" "+string(g.Status)] = *g.DLQMessages
				}
				return m
			}
			rep := groups()
			want := map[string]int{"invoice-consumer DEAD_LETTERED": 2, "claims DEAD_LETTERED": 1, "invoice-consumer REJECTED": 0, "invoice-consumer TECHNICAL_FAILURE": 0}
			if got := dlqOf(rep); !maps.Equal(got, want) {
				t.Errorf("dlqMessages: want %v, got %v", want, got)
			}
			if j := rep.DLQ; j == nil || j.Queue != dlqName || j.Limit != defaultGroupsBrowse || j.LimitReached || j.LowerBounds ||
				j.Browsed != 6 || j.Grouped != 3 || j.Ungrouped != 2 || j.NotEnvelope != 1 {
				t.Errorf("dlq: %+v", rep.DLQ)
			}
			if j := rep.DLQ; j != nil && (bk.name == "rabbitmq") != (j.Depth != nil && *j.Depth == 6) {
				t.Errorf("depth: RabbitMQ tells it (6), ActiveMQ is not asked: %+v", j)
			}
			rep = groups("--consumer", "claims")
			if got := dlqOf(rep); !maps.Equal(got, map[string]int{"claims DEAD_LETTERED": 1}) {
				t.Errorf("--consumer claims: %v", got)
			}
			if j := rep.DLQ; j == nil || j.Grouped != 1 || j.Ungrouped != 4 || j.NotEnvelope != 1 || j.LimitReached {
				t.Errorf("--consumer claims: %+v", rep.DLQ)
			}
			rep = groups("--browse", "3")
			if j := rep.DLQ; j == nil || !j.LimitReached || !j.LowerBounds || j.Browsed != 3 || j.Limit != 3 || j.Grouped+j.Ungrouped+j.NotEnvelope != 3 {
				t.Errorf("--browse 3: %+v", rep.DLQ)
			}
			r := inboxctl(t, "", "failures", "groups", "--db", url, "--broker", bk.url, "--dlq", dlqName)
			wantCode(t, r, 0, "  DLQ  ", "dead-letter queue "+dlqName+": 6 message(s) read, 3 in the groups above, 2 inboxkit dead letter(s) whose event has no row in them, 1 not inboxkit dead letter(s)")
			t.Logf("inboxctl failures groups --broker %s --dlq %s:\n%s", bk.url, dlqName, r.stdout)
			r = inboxctl(t, "", "failures", "groups", "--db", url, "--broker", bk.url, "--dlq", dlqName, "--browse", "5")
			wantCode(t, r, 0, "the queue holds more than --browse 5: the counts are lower bounds")
			t.Logf("--browse 5:\n%s", r.stdout)
			// Nothing was taken off the queue.
			if rep := groups(); rep.DLQ == nil || rep.DLQ.Browsed != 6 {
				t.Errorf("after the browses: %+v", rep.DLQ)
			}
		})
	}
	// More than the 1000 unsettled messages a browse of RabbitMQ took
	// before: --browse 1050 reads 1050 and says the queue holds more.
	t.Run("rabbitmq-over-1000", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t, dbtest.Postgres)
		url := dbURL(t, db)
		wantCode(t, inboxctl(t, "", "migrate", "--db", url), 0)
		dlqName := fmt.Sprintf("DLQ.inboxctl.groups.many.%d", time.Now().UnixNano())
		rabbittest.Declare(t, dlqName)
		ctx := context.Background()
		b, err := brokerurl.Open(rabbitURL, brokerurl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		pub, err := b.Publisher(ctx)
		if err != nil {
			t.Fatalf("RabbitMQ publisher (rabbitmq-server -detached): %v", err)
		}
		defer pub.Close()
		for i := range 1100 {
			if err := pub.Publish(ctx, dlqName, map[string]string{"eventId": fmt.Sprint("f-", i)}, []byte("foreign")); err != nil {
				t.Fatal(err)
			}
		}
		r := inboxctl(t, "", "failures", "groups", "--db", url, "--broker", rabbitURL, "--dlq", dlqName, "--browse", "1050", "-o", "json")
		wantCode(t, r, 0)
		var rep failureGroupsReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("failures groups -o json: %v\n%s", err, r)
		}
		if j := rep.DLQ; j == nil || j.Browsed != 1050 || j.NotEnvelope != 1050 || !j.LimitReached || !j.LowerBounds || j.Depth == nil || *j.Depth != 1100 {
			t.Errorf("1100 on the queue, --browse 1050: %+v", rep.DLQ)
		}
	})
	wantCode(t, inboxctl(t, "", "failures", "groups", "--db", "sqlite::memory:", "--broker", rabbitURL), 2, "need --dlq QUEUE")
	wantCode(t, inboxctl(t, "", "failures", "groups", "--db", "sqlite::memory:", "--dlq", "DLQ.x", "--browse", "0"), 2, "--browse 0")
}
