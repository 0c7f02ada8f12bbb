package golden

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// BenchmarkReconcilePostgres reconciles INBOXKIT_BENCH_EVENTS events
// (default 100,000) on PostgreSQL with the invoice consumer's shape: per
// event a business row, a letter call with a JSON body (the shadow's in
// its outbox table), the shadow's inbox row; 1 % of the events resent
// (legacy holds two rows), 1 % dead-lettered on both sides, the rest
// identical. One op is one whole reconciliation; events/s is reported.
//
//	INBOXKIT_BENCH_EVENTS=1000000 go test -run '^$' -bench BenchmarkReconcilePostgres -benchtime 1x ./golden/
func BenchmarkReconcilePostgres(b *testing.B) {
	n := 100_000
	if v := os.Getenv("INBOXKIT_BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("INBOXKIT_BENCH_EVENTS=%q: %v", v, err)
		}
	}
	ctx := context.Background()
	l, s := dbtest.New(b, dbtest.Postgres), dbtest.New(b, dbtest.Postgres)
	start := time.Now()
	body := `'{"letterId":"' || md5(i::text) || '","invoiceNo":"INV-' || i || '","customerNo":"K-100","name":"Muster AG","address":"Bahnhofstrasse 1, 8001 Zuerich","amount":"' || (10 + i % 1000) || '.50","currency":"EUR","eventId":"E-' || lpad(i::text, 8, '0') || '"}'`
	ev := `'E-' || lpad(i::text, 8, '0')`
	for _, q := range []struct {
		db *dbtest.DB
		sq string
	}{
		{l, `CREATE TABLE shipping_letters (letter_id VARCHAR(64), invoice_no VARCHAR(40), customer_no VARCHAR(40), event_id VARCHAR(120), created_at TIMESTAMP)`},
		{l, `INSERT INTO shipping_letters SELECT md5(i::text), 'INV-' || i, 'K-100', ` + ev + `, now() FROM generate_series(1, $1) i WHERE i % 100 <> 50`},
		{l, `INSERT INTO shipping_letters SELECT md5(i::text || 'r'), 'INV-' || i, 'K-100', ` + ev + `, now() FROM generate_series(1, $1) i WHERE i % 100 = 7`},
		{l, `CREATE TABLE legacy_letter_calls (event_id VARCHAR(120), body TEXT)`},
		{l, `INSERT INTO legacy_letter_calls SELECT ` + ev + `, ` + body + ` FROM generate_series(1, $1) i WHERE i % 100 <> 50`},
		{l, `INSERT INTO legacy_letter_calls SELECT ` + ev + `, ` + body + ` FROM generate_series(1, $1) i WHERE i % 100 = 7`},
		{l, `CREATE TABLE legacy_dead_letters (event_id VARCHAR(120), deliveries INTEGER)`},
		{l, `INSERT INTO legacy_dead_letters SELECT ` + ev + `, 5 FROM generate_series(1, $1) i WHERE i % 100 = 50`},
		{s, `CREATE TABLE shipping_letters (letter_id VARCHAR(64), invoice_no VARCHAR(40), customer_no VARCHAR(40), event_id VARCHAR(120), created_at TIMESTAMP)`},
		{s, `INSERT INTO shipping_letters SELECT md5(i::text || 's'), 'INV-' || i, 'K-100', ` + ev + `, now() FROM generate_series(1, $1) i WHERE i % 100 <> 50`},
		{s, `CREATE TABLE inboxkit_outbox (cause_event_id VARCHAR(120), body BYTEA)`},
		{s, `INSERT INTO inboxkit_outbox SELECT ` + ev + `, convert_to(` + body + `, 'UTF8') FROM generate_series(1, $1) i WHERE i % 100 <> 50`},
		{s, `CREATE TABLE inbox_event_processing (event_id VARCHAR(120), status VARCHAR(20), reason_code VARCHAR(40), created_at TIMESTAMP)`},
		{s, `INSERT INTO inbox_event_processing SELECT ` + ev + `, CASE WHEN i % 100 = 50 THEN 'DEAD_LETTERED' ELSE 'PROCESSED' END, CASE WHEN i % 100 = 50 THEN 'MALFORMED_PAYLOAD' END, now() FROM generate_series(1, $1) i`},
	} {
		var err error
		if len(q.sq) > 6 && q.sq[:6] == "INSERT" {
			_, err = q.db.ExecContext(ctx, q.sq, n)
		} else {
			_, err = q.db.ExecContext(ctx, q.sq)
		}
		dbtest.Must(b, err, "bench data: %.60s", q.sq)
	}
	for _, db := range []*dbtest.DB{l, s} {
		_, err := db.ExecContext(ctx, "ANALYZE")
		dbtest.Must(b, err, "analyze")
	}
	b.Logf("%d events written in %s", n, time.Since(start).Round(time.Millisecond))
	c, err := ParseReconcileConfig([]byte(`{"effects":[
		{"name":"shipping_letters","legacy":{"table":"shipping_letters","key":"event_id","time":"created_at","columns":["invoice_no","customer_no","letter_id"]}},
		{"name":"letters","kind":"call","json":["body"],
		 "legacy":{"table":"legacy_letter_calls","key":"event_id","columns":["body"]},
		 "shadow":{"table":"inboxkit_outbox","key":"cause_event_id","columns":["body"]}},
		{"name":"outcome","kind":"outcome",
		 "legacy":{"table":"legacy_dead_letters","key":"event_id","columns":["'DEAD_LETTERED' AS status","NULL AS reason"]},
		 "shadow":{"table":"inbox_event_processing","key":"event_id","columns":["status","reason_code AS reason"]}}],
		"scrub":["shipping_letters.letter_id","letters.body.letterId"]}`))
	dbtest.Must(b, err, "config")
	b.ResetTimer()
	for range b.N {
		t0, cpu0 := time.Now(), cpuTime(b)
		rep, err := Reconcile(ctx, c, Side{DB: l.DB, Dialect: inbox.Postgres, Name: "legacy"}, Side{DB: s.DB, Dialect: inbox.Postgres, Name: "shadow"}, ReconcileOptions{})
		dbtest.Must(b, err, "reconcile")
		if rep.Counts.Events != int64(n) || rep.Counts.Unexpected != 0 || rep.Rules[RuleDuplicateSuppressed] != int64(n/100) || rep.Rules[RulePoisonAtOnce] != int64(n/100) {
			b.Fatalf("counts %+v rules %v", rep.Counts, rep.Rules)
		}
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "events/s")
		// This process's CPU (the streams and the merge), apart from
		// the database's: a figure a busy machine disturbs less.
		b.ReportMetric((cpuTime(b) - cpu0).Seconds(), "cpu-s/op")
	}
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
