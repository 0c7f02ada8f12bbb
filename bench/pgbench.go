package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// pgbenchPath is the machine's pgbench, PostgreSQL's own C client.
const pgbenchPath = "/usr/bin/pgbench"

// pgbenchScript is one custom pgbench script: perTx messages per
// transaction, each an inbox row as inboxkit writes it for a first
// delivery and one shipping_letters row, with a random 64-bit number per
// message made into a 32-hex event id (md5) like the bench's own ids;
// savepoint puts a SAVEPOINT before each message, as a batch with
// savepoints does.
// The tables are named with schema, the section's own.
func pgbenchScript(schema string, perTx int, savepoint bool) string {
	var b strings.Builder
	for k := range perTx {
		fmt.Fprintf(&b, "\\set r%d random(1, 9223372036854775806)\n", k)
	}
	b.WriteString("BEGIN;\n")
	for k := range perTx {
		if savepoint {
			b.WriteString("SAVEPOINT inbox_item;\n")
		}
		id := fmt.Sprintf("md5(:r%d::text)", k)
		fmt.Fprintf(&b, "INSERT INTO %s.INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH) VALUES (%s, 'bench', 'PROCESSED', 'corr', now(), now(), now(), 1, %s);\n", schema, id, id)
		fmt.Fprintf(&b, "INSERT INTO %s.shipping_letters (event_id, invoice_no, customer_no) VALUES (%s, 'I-1', 'C-1');\n", schema, id)
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

// pgbenchMarked is one marked delivery (no FirstDelivery: IBM MQ's, or a
// caller's that does not set it) with inboxkit's statements on PostgreSQL:
// the attempt marker, an upsert committed on its own without waiting for
// its WAL flush (pgMarkUpsert), then BEGIN, the claim of the marker's row
// (processFromFail), the letter, COMMIT.
func pgbenchMarked(schema string) string {
	id := "md5(:r0::text)"
	t := schema + ".INBOX_EVENT_PROCESSING"
	return "\\set r0 random(1, 9223372036854775806)\n" +
		fmt.Sprintf("WITH sync AS (SELECT set_config('synchronous_commit', 'off', true)), "+
			"m AS (INSERT INTO %[1]s AS t (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH, EVENT_ID_SOURCE, ORDER_KEY) "+
			"SELECT %[2]s, 'bench', 'TECHNICAL_FAILURE', 'corr', now(), now(), 1, %[2]s, NULL, NULL FROM sync "+
			"ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO UPDATE SET "+
			"LAST_ERROR = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN 'marker' ELSE t.LAST_ERROR END, "+
			"FIRST_FAILED_AT = CASE WHEN t.ERROR_CLASS IS NULL AND t.ATTEMPTS > 0 THEN COALESCE(t.FIRST_FAILED_AT, t.UPDATED_AT) ELSE t.FIRST_FAILED_AT END, "+
			"ERROR_CLASS = NULL, UPDATED_AT = now(), ATTEMPTS = t.ATTEMPTS + 1 "+
			"WHERE t.STATUS = 'TECHNICAL_FAILURE' AND t.ATTEMPTS < 5 "+
			"RETURNING t.STATUS, t.ATTEMPTS) "+
			"SELECT STATUS, ATTEMPTS, true FROM m UNION ALL "+
			"SELECT STATUS, ATTEMPTS, false FROM %[1]s WHERE EVENT_ID = %[2]s AND CONSUMER_NAME = 'bench' AND NOT EXISTS (SELECT 1 FROM m);\n", t, id) +
		"BEGIN;\n" +
		fmt.Sprintf("UPDATE %[1]s SET STATUS = 'PROCESSED', REASON_CODE = NULL, ERROR_CLASS = NULL, PROCESSED_AT = now(), UPDATED_AT = now(), "+
			"CORRELATION_ID = COALESCE(CORRELATION_ID, 'corr'), PAYLOAD_HASH = COALESCE(PAYLOAD_HASH, %[2]s), EVENT_ID_SOURCE = COALESCE(EVENT_ID_SOURCE, NULL), ORDER_KEY = COALESCE(ORDER_KEY, NULL) "+
			"WHERE EVENT_ID = %[2]s AND CONSUMER_NAME = 'bench' AND STATUS = 'TECHNICAL_FAILURE';\n", t, id) +
		fmt.Sprintf("INSERT INTO %s.shipping_letters (event_id, invoice_no, customer_no) VALUES (%s, 'I-1', 'C-1');\n", schema, id) +
		"COMMIT;\n"
}

// pgbenchStoreThenProcess is one message of store-then-process with
// inboxkit's statements on PostgreSQL: the entry stored claimed (a body
// like the e2e section's messages, one header), committed, then
// the worker's BEGIN, the letter, the PROCESSED update fenced by the
// lease, COMMIT.
func pgbenchStoreThenProcess(schema string) string {
	id := "md5(:r0::text)"
	t := schema + ".INBOX_EVENT_PROCESSING"
	body := hex.EncodeToString([]byte(`{"invoiceNo":"I-4711","customerNo":"K-55","amount":"711.11","currency":"EUR"}`))
	return "\\set r0 random(1, 9223372036854775806)\n" +
		fmt.Sprintf("INSERT INTO %[1]s (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PAYLOAD_HASH, PAYLOAD, HEADERS, CREATED_AT, UPDATED_AT, ATTEMPTS, EVENT_ID_SOURCE, ORDER_KEY, LEASE_OWNER, LEASE_UNTIL) "+
			"VALUES (%[2]s, 'bench', 'IN_PROGRESS', 'corr', %[2]s, '\\x%[3]s'::bytea, '{\"content-type\":\"application/json\"}', now(), now(), 1, NULL, NULL, 'bench-worker', now() + interval '30 seconds') "+
			"ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO NOTHING;\n", t, id, body) +
		"BEGIN;\n" +
		fmt.Sprintf("INSERT INTO %s.shipping_letters (event_id, invoice_no, customer_no) VALUES (%s, 'I-1', 'C-1');\n", schema, id) +
		fmt.Sprintf("WITH done AS (UPDATE %[1]s SET STATUS = 'PROCESSED', PROCESSED_AT = now(), UPDATED_AT = now(), LEASE_OWNER = NULL, LEASE_UNTIL = NULL, NEXT_ATTEMPT_AT = NULL, REASON_CODE = NULL, ERROR_CLASS = NULL "+
			"WHERE EVENT_ID = %[2]s AND CONSUMER_NAME = 'bench' AND STATUS = 'IN_PROGRESS' AND LEASE_OWNER = 'bench-worker' AND ATTEMPTS = 1 RETURNING 1) "+
			"SELECT CAST(CASE COUNT(*) WHEN 1 THEN '1' ELSE 'lease lost' END AS INTEGER) FROM done;\n", t, id) +
		"COMMIT;\n"
}

// pgbenchOutbox is pgbenchScript's one message a transaction (an inbox
// row and a letter) with, before the COMMIT, what extra says: "" nothing,
// "add" the row a keyless outbox.Add writes (a 200-byte body, a
// time-ordered id; no NOTIFY), "pipelined" that row sent in one pipeline
// with the COMMIT (what an Add riding on the commit would cost), "round
// trip" a SELECT of one argument (a round trip that writes nothing).
func pgbenchOutbox(schema, extra string) string {
	s := pgbenchScript(schema, 1, false)
	body := strings.Repeat("00", 200)
	row := fmt.Sprintf("INSERT INTO %s.INBOXKIT_OUTBOX (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, HEADERS, BODY, CAUSE_EVENT_ID, CORRELATION_ID, STATUS, ATTEMPTS, CREATED_AT, NEXT_AT) "+
		"VALUES (to_hex((extract(epoch from clock_timestamp()) * 1000000)::bigint) || md5(:r0::text), to_hex((extract(epoch from clock_timestamp()) * 1000000)::bigint) || md5(:r0::text), 0, 'letters', NULL, '\\x%s'::bytea, md5(:r0::text), 'corr', 'PENDING', 0, now(), now());\n", schema, body)
	var tail string
	switch extra {
	case "":
		return s
	case "add":
		tail = row + "COMMIT;\n"
	case "pipelined":
		tail = "\\startpipeline\n" + row + "COMMIT;\n\\endpipeline\n"
	case "round trip":
		tail = "SELECT :r0::bigint;\nCOMMIT;\n"
	default:
		panic("pgbenchOutbox: unknown extra " + extra)
	}
	return strings.TrimSuffix(s, "COMMIT;\n") + tail
}

// needPgbench reports a missing pgbench with how to install it.
func needPgbench() error {
	if _, err := os.Stat(pgbenchPath); err != nil {
		return fmt.Errorf("%s is missing: install PostgreSQL's pgbench (Debian and Ubuntu: apt-get install postgresql-client postgresql-<version>, whose package holds /usr/lib/postgresql/<version>/bin/pgbench; check: pgbench --version): %w", pgbenchPath, err)
	}
	return nil
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchRate runs script at clients clients (a thread each) for d on the
// schema sc and returns messages per second: pgbench's transactions per
// second (without connection time) times perTx.
func pgbenchRate(ctx context.Context, dsn string, sc *schema, script string, perTx, clients int, d time.Duration) (float64, error) {
	f, err := os.CreateTemp("", "inboxbench-*.sql")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, pgbenchPath, "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients),
		"-T", strconv.Itoa(secs), "-f", f.Name(), dsn)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s %s: %w\n%s%s", pgbenchPath, filepath.Base(f.Name()), err, out.String(), stderr.String())
	}
	m := tpsLine.FindStringSubmatch(out.String())
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s%s", out.String(), stderr.String())
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	// The script wrote where the section looks, and every letter's inbox
	// row is PROCESSED (a claim or a lease that matched no row shows here).
	var rows, processed int
	if err := sc.DB.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM shipping_letters), (SELECT count(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = 'PROCESSED')`).Scan(&rows, &processed); err != nil || rows == 0 || processed < rows {
		return 0, fmt.Errorf("pgbench reported %.0f tps, but schema %s has %d letters and %d processed inbox rows (%v)", tps, sc.Name, rows, processed, err)
	}
	return tps * float64(perTx), nil
}

// processBatchOf is Store.ProcessBatch of n new first deliveries, each
// writing one letter; effectsInTx declares the handlers' effects all in
// the transaction (a batch without savepoints). One op is n messages.
func processBatchOf(s *inbox.Store, n int, effectsInTx bool) op {
	return func(ctx context.Context, _ int) error {
		items := make([]inbox.BatchItem, n)
		for i := range items {
			id := newID()
			items[i] = inbox.BatchItem{Entry: inbox.Entry{EventID: id, ConsumerName: "bench", CorrelationID: "corr", PayloadHash: id, FirstDelivery: true},
				Handler: letterHandler(id), EffectsInTx: effectsInTx}
		}
		res, err := s.ProcessBatch(ctx, items)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Outcome != inboxkit.OutcomeProcessed {
				return fmt.Errorf("process batch item %s: outcome %s, want processed", items[i].Entry.EventID, r.Outcome)
			}
		}
		return nil
	}
}

// pgbenchSection: the database's own rate for the inbox's work, measured
// by pgbench (custom scripts on a schema of its own with the tables of the
// library section: the migrated inbox table and shipping_letters) — one
// message per transaction, -batch messages per transaction as plain
// statements, and with a savepoint per message — beside Store.Process of
// a first delivery and Store.ProcessBatch of -batch first deliveries with
// savepoints and with EffectsInTx (none), at each -c, interleaved for
// -rounds rounds. The tables are emptied before every cell.
func pgbenchSection(ctx context.Context, admin *sql.DB, o options) error {
	if err := needPgbench(); err != nil {
		return err
	}
	if o.batch < 2 {
		return errors.New("needs -batch 2 or more (the batch of pgbench's and inboxkit's batch cells)")
	}
	sc, s, err := storeSchema(ctx, admin, o.dsn, "inboxbench_pgb_"+suffix(), slices.Max(o.concs)+4)
	if err != nil {
		return err
	}
	defer sc.drop(admin)
	n := o.batch
	type cell struct {
		name  string
		perOp int
		pg    string // pgbench script; "" for an inboxkit op
		op    op
	}
	cells := []cell{
		{name: "pgbench 1", perOp: 1, pg: pgbenchScript(sc.Name, 1, false)},
		{name: "inboxkit single", perOp: 1, op: processFirst(s)},
		{name: "pgbench plain", perOp: n, pg: pgbenchScript(sc.Name, n, false)},
		{name: "pgbench savepoints", perOp: n, pg: pgbenchScript(sc.Name, n, true)},
		{name: "inboxkit savepoints", perOp: n, op: processBatchOf(s, n, false)},
		{name: "inboxkit effects-in-tx", perOp: n, op: processBatchOf(s, n, true)},
		{name: "pgbench marked", perOp: 1, pg: pgbenchMarked(sc.Name)},
		{name: "inboxkit marked", perOp: 1, op: processNew(s)},
		{name: "pgbench store-then-process", perOp: 1, pg: pgbenchStoreThenProcess(sc.Name)},
	}
	rates := map[string][]float64{}
	key := func(name string, c int) string { return fmt.Sprintf("%s/%d", name, c) }
	for round := 1; round <= o.rounds; round++ {
		for _, c := range o.concs {
			for _, cl := range cells {
				if _, err := sc.DB.ExecContext(ctx, `TRUNCATE INBOX_EVENT_PROCESSING, shipping_letters`); err != nil {
					return err
				}
				var r float64
				if cl.pg != "" {
					r, err = pgbenchRate(ctx, o.dsn, sc, cl.pg, cl.perOp, c, o.dur)
				} else {
					r, err = rate(ctx, c, o.dur, cl.op)
					r *= float64(cl.perOp)
				}
				if err != nil {
					return fmt.Errorf("%s at %d clients: %w", cl.name, c, err)
				}
				rates[key(cl.name, c)] = append(rates[key(cl.name, c)], r)
				fmt.Fprintf(o.log, "pgbench round %d c=%-3d %-24s %8.0f msgs/s\n", round, c, cl.name, r)
			}
		}
	}
	m := func(name string, c int) float64 { return median(rates[key(name, c)]) }
	fmt.Fprintf(o.out, "\nThe database's limit: pgbench (C client, -M prepared, custom scripts) beside inboxkit, same tables (inbox row + one shipping_letters row per message), PostgreSQL, first deliveries, %s per cell, emptied before each, median of %d round(s)\n\n", o.dur, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "clients\tpgbench 1/tx\tinboxkit single\tsingle/pgbench\tpgbench %d/tx plain\tpgbench %d/tx savepoints\tinboxkit batch %d savepoints\tvs plain\tinboxkit batch %d effects-in-tx\tvs plain\tvs savepoints\t\n", n, n, n, n)
	for _, c := range o.concs {
		p1, is, pp, ps := m("pgbench 1", c), m("inboxkit single", c), m("pgbench plain", c), m("pgbench savepoints", c)
		bs, bt := m("inboxkit savepoints", c), m("inboxkit effects-in-tx", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%s\t%.0f\t%s\t%s\t\n", c, p1, is, ratio(is, p1), pp, ps, bs, ratio(bs, pp), bt, ratio(bt, pp), ratio(bt, bs))
	}
	tw.Flush()
	fmt.Fprintf(o.out, "\nThe paths' own cost: pgbench with inboxkit's statements for a marked delivery (the attempt marker committed on its own, then the claim, the letter, COMMIT) and for store-then-process (the entry stored claimed and committed, then the letter and the PROCESSED update, COMMIT), beside one message a transaction; Store.Process of a marked delivery; same rounds\n\n")
	tw = table(o.out)
	fmt.Fprintf(tw, "clients\tpgbench 1/tx\tpgbench marked\tmarked/1tx\tinboxkit marked\tinboxkit/pgbench marked\tinboxkit marked/1tx\tpgbench store-then-process\tstore-then-process/1tx\t\n")
	for _, c := range o.concs {
		p1, pm, im, pq := m("pgbench 1", c), m("pgbench marked", c), m("inboxkit marked", c), m("pgbench store-then-process", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t%s\t%.0f\t%s\t\n", c, p1, pm, ratio(pm, p1), im, ratio(im, pm), ratio(im, p1), pq, ratio(pq, p1))
	}
	tw.Flush()
	return nil
}
