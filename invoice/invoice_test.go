package invoice_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/outbox"
)

const goodBody = `{"invoiceNo":"INV-1","customerNo":"K-100","amount":"120.50","currency":"EUR","issuedAt":"2026-01-05"}`

func TestDecode(t *testing.T) {
	tests := []struct {
		name, body, reason string
		class              inboxkit.Class
	}{
		{"ok", goodBody, "", ""},
		{"rfc3339", `{"invoiceNo":"I","customerNo":"K","amount":"-1","currency":"EUR","issuedAt":"2026-01-05T10:00:00Z"}`, "", ""},
		{"not json", `<invoice/>`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"truncated", `{"invoiceNo":"INV-1"`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"trailing", goodBody + ` {}`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"number amount", `{"invoiceNo":"I","customerNo":"K","amount":12,"currency":"EUR","issuedAt":"2026-01-05"}`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"bad amount", `{"invoiceNo":"I","customerNo":"K","amount":"12,50","currency":"EUR","issuedAt":"2026-01-05"}`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"exponent amount", `{"invoiceNo":"I","customerNo":"K","amount":"1e9","currency":"EUR","issuedAt":"2026-01-05"}`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"bad date", `{"invoiceNo":"I","customerNo":"K","amount":"1","currency":"EUR","issuedAt":"5.1.2026"}`, inboxkit.ReasonMalformedPayload, inboxkit.ClassPoison},
		{"missing", `{"invoiceNo":"I","amount":"1","issuedAt":"2026-01-05"}`, inboxkit.ReasonMissingField, inboxkit.ClassPoison},
		{"blank", `{"invoiceNo":" ","customerNo":"K","amount":"1","currency":"EUR","issuedAt":"2026-01-05"}`, inboxkit.ReasonMissingField, inboxkit.ClassPoison},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := invoice.Decode([]byte(tt.body))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			d := classify.Of(err)
			if d.Class != tt.class || d.Reason != tt.reason || !errors.Is(err, invoice.ErrDecode) {
				t.Fatalf("Decode(%s) = %v (%+v), want %s %s", tt.body, err, d, tt.class, tt.reason)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(goodBody))
	f.Add([]byte(`{"amount":"0"}`))
	f.Add([]byte(`{"invoiceNo":"I","customerNo":"K","amount":"1/3","currency":"EUR","issuedAt":"2026-01-05"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := invoice.Decode(body)
		if err != nil {
			if d := classify.Of(err); d.Class != inboxkit.ClassPoison {
				t.Fatalf("Decode error %v has class %s, want POISON", err, d.Class)
			}
			return
		}
		if _, err := ev.AmountValue(); err != nil {
			t.Fatalf("decoded event has a bad amount: %v", err)
		}
	})
}

func TestStatementsEveryDialect(t *testing.T) {
	for _, d := range []string{"postgres", "mysql", "sqlite", "oracle"} {
		st, err := invoice.Statements(d)
		if err != nil || len(st) < 3 {
			t.Fatalf("%s: %d statements, %v", d, len(st), err)
		}
	}
	if _, err := invoice.Statements("db2"); err == nil {
		t.Fatal("Statements(db2) succeeded")
	}
}

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// letters is the letter provider the relay sends to: it records what
// arrives, deduplicates by idempotency key (the outbox message id) and
// fails the next fail sends.
type letters struct {
	mu    sync.Mutex
	fail  int
	sent  map[string]int // idempotency key -> letters sent (at most 1)
	got   map[string]invoice.LetterRequest
	calls int
}

func (l *letters) send(_ context.Context, m outbox.Outgoing) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.fail > 0 {
		l.fail--
		return errors.New("letter service unavailable")
	}
	if l.sent == nil {
		l.sent, l.got = map[string]int{}, map[string]invoice.LetterRequest{}
	}
	if l.sent[m.ID] > 0 {
		return nil // the key was seen: nothing sent again
	}
	var r invoice.LetterRequest
	if err := json.Unmarshal(m.Body, &r); err != nil {
		return err
	}
	l.sent[m.ID]++
	l.got[m.ID] = r
	return nil
}

func (l *letters) callCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

type bundle struct {
	db      *dbtest.DB
	d       inbox.Dialect
	store   *inbox.Store
	outbox  *outbox.Store
	relay   *outbox.Relay
	letters *letters
	handler func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error
}

const letterURL = "https://letters.example/v1/letters"

func setup(t *testing.T, db *dbtest.DB) *bundle {
	t.Helper()
	ctx := context.Background()
	d, err := inbox.DialectByName(db.Backend)
	dbtest.Must(t, err, "dialect")
	dbtest.Must(t, invoice.Migrate(ctx, db.DB, db.Backend), "migrate")
	dbtest.Must(t, invoice.Migrate(ctx, db.DB, db.Backend), "migrate again")
	dbtest.Must(t, invoice.SeedCustomers(ctx, db.DB, d), "seed")
	dbtest.Must(t, invoice.SeedCustomers(ctx, db.DB, d), "seed again")
	clock := &stepClock{t: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
	store, err := inbox.New(db.DB, d, inbox.Config{Clock: clock, ClassifyFunc: classify.Of, Retry: inboxkit.RetryPolicy{MaxAttempts: 3}})
	dbtest.Must(t, err, "store")
	dbtest.Must(t, store.Migrate(ctx), "inbox migrate")
	out, err := outbox.New(db.DB, d, outbox.Config{})
	dbtest.Must(t, err, "outbox")
	_, err = out.Migrate(ctx)
	dbtest.Must(t, err, "outbox migrate")
	l := &letters{}
	relay, err := outbox.NewRelay(out, outbox.RelayConfig{SendFunc: l.send, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry: inboxkit.RetryPolicy{MaxAttempts: 5, Redelivery: inboxkit.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}})
	dbtest.Must(t, err, "relay")
	n := 0
	h, err := invoice.NewHandler(invoice.Config{Dialect: d, Outbox: out, LetterDestination: letterURL, Clock: clock,
		IDFunc: func() string { n++; return fmt.Sprintf("id-%d", n) }})
	dbtest.Must(t, err, "handler")
	return &bundle{db: db, d: d, store: store, outbox: out, relay: relay, letters: l, handler: h}
}

// drain runs the relay until nothing is pending (a failed send waits its
// millisecond of backoff).
func (b *bundle) drain(t *testing.T) {
	t.Helper()
	for {
		d, err := b.relay.Drain(context.Background())
		dbtest.Must(t, err, "drain")
		if d.NextDue.IsZero() {
			return
		}
		time.Sleep(time.Until(d.NextDue))
	}
}

func (b *bundle) outboxRows(t *testing.T) []outbox.Row {
	t.Helper()
	rows, err := b.outbox.List(context.Background(), outbox.ListOptions{Statuses: []outbox.Status{outbox.StatusPending, outbox.StatusSent, outbox.StatusParked}})
	dbtest.Must(t, err, "list outbox")
	return rows
}

func (b *bundle) process(t *testing.T, id, body string) inbox.Result {
	t.Helper()
	m := inboxkit.Message{ID: id, Body: []byte(body), Headers: map[string]string{"eventId": id}}
	res, err := b.store.Process(context.Background(), inbox.Entry{EventID: id, ConsumerName: "invoice-consumer"}, func(ctx context.Context, tx *sql.Tx) error {
		return b.handler(ctx, tx, m)
	})
	dbtest.Must(t, err, "process %s", id)
	return res
}

func (b *bundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	dbtest.Must(t, b.db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n), "count %s", table)
	return n
}

func TestHandler(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		b := setup(t, db)
		body := func(cust, amount, cur string) string {
			return fmt.Sprintf(`{"invoiceNo":"INV-%s","customerNo":%q,"amount":%q,"currency":%q,"issuedAt":"2026-01-05"}`, amount, cust, amount, cur)
		}
		for _, tt := range []struct {
			id, body string
			outcome  inboxkit.Outcome
			reason   string
		}{
			{"E-1", body("K-100", "10.00", "EUR"), inboxkit.OutcomeProcessed, ""},
			{"E-1", body("K-100", "10.00", "EUR"), inboxkit.OutcomeDuplicate, ""},
			{"E-2", body("K-999", "10.00", "EUR"), inboxkit.OutcomeRejected, invoice.ReasonCustomerUnknown},
			{"E-3", body("K-100", "0.00", "EUR"), inboxkit.OutcomeRejected, invoice.ReasonInvalidAmount},
			{"E-4", body("K-100", "-5", "EUR"), inboxkit.OutcomeRejected, invoice.ReasonInvalidAmount},
			{"E-5", body("K-200", "5", "JPY"), inboxkit.OutcomeRejected, invoice.ReasonCurrencyUnsupported},
			{"E-6", `{"invoiceNo":`, inboxkit.OutcomeDeadLetter, inboxkit.ReasonMalformedPayload},
			{"E-7", `{"invoiceNo":"I"}`, inboxkit.OutcomeDeadLetter, inboxkit.ReasonMissingField},
		} {
			res := b.process(t, tt.id, tt.body)
			if res.Outcome != tt.outcome || res.Reason != tt.reason {
				t.Errorf("%s: outcome %s %s (%v), want %s %s", tt.id, res.Outcome, res.Reason, res.Err, tt.outcome, tt.reason)
			}
		}
		if got := b.count(t, "shipping_letters"); got != 1 {
			t.Errorf("shipping_letters: %d rows, want 1", got)
		}
		if got := b.count(t, "archived_documents"); got != 1 {
			t.Errorf("archived_documents: %d rows, want 1", got)
		}

		// Nothing was called inside the transactions: the relay sends the
		// one letter request after the commit, with the letter id as key.
		if n := b.letters.callCount(); n != 0 {
			t.Fatalf("the letter service was called %d times before the relay ran", n)
		}
		b.drain(t)
		if id := invoice.LetterIDFor("E-1"); b.letters.sent[id] != 1 || b.letters.got[id].InvoiceNo != "INV-10.00" || b.letters.calls != 1 {
			t.Errorf("after the relay: sent %v, %d calls; want letter %s of INV-10.00 once", b.letters.sent, b.letters.calls, id)
		}

		// A letter service that fails fails no event: E-8 is processed, its
		// request waits in the outbox, and the relay's retry sends it once.
		b.letters.fail = 2
		if res := b.process(t, "E-8", body("K-200", "7", "CHF")); res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("E-8 with a failing letter service: %s (%v), want PROCESSED", res.Outcome, res.Err)
		}
		b.drain(t)
		id := invoice.LetterIDFor("E-8")
		if b.letters.sent[id] != 1 || b.letters.calls != 4 || b.count(t, "shipping_letters") != 2 {
			t.Errorf("E-8: sent %d times in %d calls (want once, in 3 calls after the first letter's 1), %d letters", b.letters.sent[id], b.letters.calls, b.count(t, "shipping_letters"))
		}
		for _, r := range b.outboxRows(t) {
			if r.Status != outbox.StatusSent || r.Key == "" || r.Destination != letterURL {
				t.Errorf("outbox row %+v, want SENT to %s with the customer as key", r, letterURL)
			}
		}
	})
}

// A body that is not valid UTF-8 is poison at its first delivery on every
// database (PostgreSQL refuses it in the archived document's text column;
// it was retried as transient), and nothing is sent (issue 11, item 7).
func TestInvalidUTF8IsPoison(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		b := setup(t, db)
		body := "{\"invoiceNo\":\"INV-\xff\xfe\",\"customerNo\":\"K-100\",\"amount\":\"1\",\"currency\":\"EUR\",\"issuedAt\":\"2026-01-05\"}"
		res := b.process(t, "E-UTF", body)
		if res.Outcome != inboxkit.OutcomeDeadLetter || res.Class != inboxkit.ClassPoison || res.Reason != inboxkit.ReasonInvalidEncoding || res.Attempts != 1 {
			t.Fatalf("result %+v, want DEAD_LETTER POISON %s at attempt 1", res, inboxkit.ReasonInvalidEncoding)
		}
		if rows := b.outboxRows(t); len(rows) != 0 || b.count(t, "shipping_letters") != 0 || b.count(t, "archived_documents") != 0 {
			t.Errorf("%d outbox rows, %d letters, %d documents; want none", len(rows), b.count(t, "shipping_letters"), b.count(t, "archived_documents"))
		}
	})
}

// A crash before the commit sends nothing (the outbox row rolls back with
// the letter); the redelivery commits, and the relay sends the letter it
// stored, with its letter id as message id and idempotency key, keyed by
// the customer (issue 11, item 10; issue 25, item 4).
func TestStoredLetterIsTheLetterSent(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		b := setup(t, db)
		body := `{"invoiceNo":"INV-10","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}`
		m := inboxkit.Message{ID: "E-10", Body: []byte(body), Headers: map[string]string{"eventId": "E-10"}}
		crash := errors.New("process died before the commit")
		res, err := b.store.Process(context.Background(), inbox.Entry{EventID: "E-10", ConsumerName: "invoice-consumer"}, func(ctx context.Context, tx *sql.Tx) error {
			if err := b.handler(ctx, tx, m); err != nil {
				return err
			}
			return crash // the transaction never commits
		})
		dbtest.Must(t, err, "first attempt")
		b.drain(t)
		if res.Outcome != inboxkit.OutcomeRetry || b.letters.callCount() != 0 || len(b.outboxRows(t)) != 0 {
			t.Fatalf("first attempt: %+v, %d calls, %d outbox rows; want RETRY and nothing sent", res, b.letters.callCount(), len(b.outboxRows(t)))
		}
		if res := b.process(t, "E-10", body); res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("redelivery: %+v", res)
		}
		b.drain(t)
		var stored string
		dbtest.Must(t, b.db.QueryRow(b.d.Rebind(`SELECT letter_id FROM shipping_letters WHERE event_id = ?`), "E-10").Scan(&stored), "stored letter")
		if stored != invoice.LetterIDFor("E-10") {
			t.Errorf("stored letter id %q, want LetterIDFor(E-10) = %q", stored, invoice.LetterIDFor("E-10"))
		}
		if got := b.letters.got[stored]; b.letters.sent[stored] != 1 || got.LetterID != stored || got.EventID != "E-10" {
			t.Errorf("sent %v, request %+v; want letter %s sent once, keyed by its id", b.letters.sent, got, stored)
		}
		rows := b.outboxRows(t)
		if len(rows) != 1 || rows[0].ID != stored || rows[0].Key != "K-100" || rows[0].Status != outbox.StatusSent {
			t.Errorf("outbox rows %+v; want one SENT row %s of key K-100", rows, stored)
		}
	})
}

// TestLetterRequestOverHTTP: the relay POSTs the letter request to the
// letter provider's URL as JSON with the letter id as Idempotency-Key.
func TestLetterRequestOverHTTP(t *testing.T) {
	db := dbtest.New(t, dbtest.SQLite)
	b := setup(t, db)
	type got struct {
		key, contentType string
		req              invoice.LetterRequest
	}
	reqs := make(chan got, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g got
		g.key, g.contentType = r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")
		_ = json.NewDecoder(r.Body).Decode(&g.req)
		reqs <- g
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	h, err := invoice.NewHandler(invoice.Config{Dialect: b.d, Outbox: b.outbox, LetterDestination: srv.URL + "/letters"})
	dbtest.Must(t, err, "handler")
	b.handler = h
	if res := b.process(t, "E-11", `{"invoiceNo":"INV-11","customerNo":"K-200","amount":"11.00","currency":"chf","issuedAt":"2026-01-05"}`); res.Outcome != inboxkit.OutcomeProcessed {
		t.Fatalf("process: %+v", res)
	}
	relay, err := outbox.NewRelay(b.outbox, outbox.RelayConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	dbtest.Must(t, err, "relay")
	if d, err := relay.Drain(context.Background()); err != nil || d.Sent != 1 {
		t.Fatalf("Drain = %+v, %v; want 1 sent", d, err)
	}
	g := <-reqs
	want := invoice.LetterRequest{LetterID: invoice.LetterIDFor("E-11"), InvoiceNo: "INV-11", CustomerNo: "K-200", Name: "Beispiel GmbH",
		Address: "Hauptstrasse 7, 10115 Berlin", Amount: "11.00", Currency: "CHF", EventID: "E-11"}
	if g.key != want.LetterID || g.contentType != "application/json" || g.req != want {
		t.Errorf("POST: Idempotency-Key %q, Content-Type %q, body %+v; want key %s, JSON %+v", g.key, g.contentType, g.req, want.LetterID, want)
	}
}

func TestNewHandlerNeedsTheOutbox(t *testing.T) {
	out, err := outbox.New(dbtest.New(t, dbtest.SQLite).DB, inbox.SQLite, outbox.Config{})
	dbtest.Must(t, err, "outbox")
	for _, tt := range []struct {
		cfg  invoice.Config
		want string
	}{
		{invoice.Config{Dialect: inbox.SQLite, LetterDestination: letterURL}, "Config.Outbox is required"},
		{invoice.Config{Dialect: inbox.SQLite, Outbox: out}, "Config.LetterDestination is required"},
	} {
		if _, err := invoice.NewHandler(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewHandler(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}
