package invoice_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/classify/breaker"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/invoice"
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

type letters struct {
	mu    sync.Mutex
	fail  int
	sent  map[string]int
	first map[string]string // idempotency key -> id of the letter actually sent
	calls int
}

func (l *letters) Send(_ context.Context, letter invoice.Letter, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.fail > 0 {
		l.fail--
		return errors.New("letter service unavailable")
	}
	if l.sent == nil {
		l.sent = map[string]int{}
	}
	l.sent[key]++
	if l.first == nil {
		l.first = map[string]string{}
	}
	if _, ok := l.first[key]; !ok {
		l.first[key] = letter.LetterID
	}
	return nil
}

type bundle struct {
	db      *dbtest.DB
	d       inbox.Dialect
	store   *inbox.Store
	letters *letters
	handler func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error
}

func setup(t *testing.T, db *dbtest.DB, br *breaker.Breaker) *bundle {
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
	n := 0
	l := &letters{}
	h, err := invoice.NewHandler(invoice.Config{Dialect: d, Letters: l, Breaker: br, Clock: clock,
		IDFunc: func() string { n++; return fmt.Sprintf("id-%d", n) }})
	dbtest.Must(t, err, "handler")
	return &bundle{db: db, d: d, store: store, letters: l, handler: h}
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
		b := setup(t, db, nil)
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

		// A failed send rolls the letter back and is retried; the retry sends once.
		b.letters.fail = 1
		res := b.process(t, "E-8", body("K-200", "7", "CHF"))
		if res.Outcome != inboxkit.OutcomeRetry {
			t.Fatalf("E-8 with failing letter service: %s (%v), want RETRY", res.Outcome, res.Err)
		}
		if got := b.count(t, "shipping_letters"); got != 1 {
			t.Errorf("after a failed send: %d letters, want 1 (rolled back)", got)
		}
		if res := b.process(t, "E-8", body("K-200", "7", "CHF")); res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("E-8 again: %s (%v)", res.Outcome, res.Err)
		}
		if b.letters.sent["E-8"] != 1 || b.count(t, "shipping_letters") != 2 {
			t.Errorf("E-8 sent %d times, %d letters", b.letters.sent["E-8"], b.count(t, "shipping_letters"))
		}
	})
}

func TestHandlerOpenBreakerIsNoAttempt(t *testing.T) {
	br, err := breaker.New(breaker.Config{Name: "letter-service", MaxFailures: 1, OpenTimeout: time.Hour})
	dbtest.Must(t, err, "breaker")
	b := setup(t, dbtest.New(t, dbtest.SQLite), br)
	body := `{"invoiceNo":"INV-9","customerNo":"K-100","amount":"1","currency":"EUR","issuedAt":"2026-01-05"}`
	b.letters.fail = 1
	if res := b.process(t, "E-9", body); res.Outcome != inboxkit.OutcomeRetry || res.Attempts != 1 {
		t.Fatalf("first failure: %+v", res)
	}
	res := b.process(t, "E-9", body)
	if res.Outcome != inboxkit.OutcomeRetry || res.Reason != inboxkit.ReasonCircuitOpen || res.Attempts != 1 {
		t.Fatalf("open breaker: outcome %s reason %s attempts %d, want RETRY CIRCUIT_OPEN 1", res.Outcome, res.Reason, res.Attempts)
	}
	if b.letters.calls != 1 {
		t.Fatalf("letter service called %d times, want 1 (the breaker refuses)", b.letters.calls)
	}
}

// A body that is not valid UTF-8 is poison at its first delivery on every
// database (PostgreSQL refuses it in the archived document's text column;
// it was retried as transient), and nothing is sent (issue 11, item 7).
func TestInvalidUTF8IsPoison(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		b := setup(t, db, nil)
		body := "{\"invoiceNo\":\"INV-\xff\xfe\",\"customerNo\":\"K-100\",\"amount\":\"1\",\"currency\":\"EUR\",\"issuedAt\":\"2026-01-05\"}"
		res := b.process(t, "E-UTF", body)
		if res.Outcome != inboxkit.OutcomeDeadLetter || res.Class != inboxkit.ClassPoison || res.Reason != inboxkit.ReasonInvalidEncoding || res.Attempts != 1 {
			t.Fatalf("result %+v, want DEAD_LETTER POISON %s at attempt 1", res, inboxkit.ReasonInvalidEncoding)
		}
		if b.letters.calls != 0 || b.count(t, "shipping_letters") != 0 || b.count(t, "archived_documents") != 0 {
			t.Errorf("letter service called %d times, %d letters, %d documents; want none", b.letters.calls, b.count(t, "shipping_letters"), b.count(t, "archived_documents"))
		}
	})
}

// After a crash before the commit (the letter was sent, the transaction
// rolled back) the redelivery stores the id of the letter that was sent,
// not a new one (issue 11, item 10).
func TestStoredLetterIsTheLetterSent(t *testing.T) {
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		b := setup(t, db, nil)
		body := `{"invoiceNo":"INV-10","customerNo":"K-100","amount":"10.00","currency":"EUR","issuedAt":"2026-01-05"}`
		m := inboxkit.Message{ID: "E-10", Body: []byte(body), Headers: map[string]string{"eventId": "E-10"}}
		crash := errors.New("process died before the commit")
		res, err := b.store.Process(context.Background(), inbox.Entry{EventID: "E-10", ConsumerName: "invoice-consumer"}, func(ctx context.Context, tx *sql.Tx) error {
			if err := b.handler(ctx, tx, m); err != nil {
				return err
			}
			return crash // the letter is sent; the transaction never commits
		})
		dbtest.Must(t, err, "first attempt")
		if res.Outcome != inboxkit.OutcomeRetry || b.letters.sent["E-10"] != 1 {
			t.Fatalf("first attempt: %+v, sent %d", res, b.letters.sent["E-10"])
		}
		if res := b.process(t, "E-10", body); res.Outcome != inboxkit.OutcomeProcessed {
			t.Fatalf("redelivery: %+v", res)
		}
		var stored string
		dbtest.Must(t, b.db.QueryRow(b.d.Rebind(`SELECT letter_id FROM shipping_letters WHERE event_id = ?`), "E-10").Scan(&stored), "stored letter")
		if sent := b.letters.first["E-10"]; stored != sent {
			t.Errorf("shipping_letters stores letter %q, but the letter service sent %q", stored, sent)
		}
		if stored != invoice.LetterIDFor("E-10") {
			t.Errorf("stored letter id %q, want LetterIDFor(E-10) = %q", stored, invoice.LetterIDFor("E-10"))
		}
	})
}
