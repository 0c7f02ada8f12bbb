package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
)

// librarySection: Store.Process beside raw database/sql doing the same
// SQL, for new messages and for duplicates, interleaved.
func librarySection(ctx context.Context, admin *sql.DB, o options) error {
	maxC := 0
	for _, c := range o.concs {
		maxC = max(maxC, c)
	}
	k := o.db
	sc, err := newDB(ctx, admin, o, "inboxbench_lib_"+suffix(), maxC+4)
	if err != nil {
		return err
	}
	defer sc.drop(admin)
	s, err := openStore(ctx, sc, k, inbox.Config{ClassifyFunc: classify.Of})
	if err == nil {
		_, err = sc.DB.ExecContext(ctx, k.lettersDDL)
	}
	if err != nil {
		return err
	}
	// Processed events for the duplicate cells.
	if k.name == "mysql" {
		err = generateRowsMariaDB(ctx, sc.DB, "dup-", 10_000)
	} else {
		err = generateRows(ctx, sc.DB, "dup-", 1, 10_000, time.Hour, nil)
	}
	if err != nil {
		return err
	}
	ids, err := eventIDs(ctx, sc.DB, 10_000)
	if err != nil {
		return err
	}
	m, err := interleaved(ctx, o, "library", []namedOp{
		{name: "raw new", op: rawNew(k, sc.DB)},
		{name: "raw marked", op: rawMarked(k, sc.DB)},
		{name: "inboxkit new", op: processNewAs(s, k.insertLetter, false, false)},
		{name: "inboxkit first", op: processNewAs(s, k.insertLetter, true, false)},
		{name: "inboxkit first, in tx", op: processNewAs(s, k.insertLetter, true, true)},
		{name: "raw duplicate", op: rawDuplicate(k, sc.DB, ids)},
		{name: "raw duplicate, status read", op: rawResendRead(k, sc.DB, ids)},
		{name: "inboxkit duplicate", op: processDuplicate(s, k.insertLetter, ids, true, false)},
		{name: "inboxkit duplicate, in tx", op: processDuplicate(s, k.insertLetter, ids, true, true)},
		{name: "inboxkit duplicate, marked", op: processDuplicate(s, k.insertLetter, ids, false, false)},
	})
	if err != nil {
		return err
	}
	driver := "pgx stdlib"
	if k.name == "mysql" {
		driver = "go-sql-driver/mysql, interpolateParams"
	}
	fmt.Fprintf(o.out, "\nLibrary overhead: inbox.Store.Process vs the same SQL by raw database/sql (%s), %s, %s per cell, median of %d round(s)\n\n", driver, k.label, o.dur, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "goroutines\traw new\tinboxkit new, marked\tmarked/raw\traw marked\traw marked/raw new\tinboxkit marked/raw marked\tinboxkit new, first delivery\tfirst/raw\tfirst, in tx\tin tx/raw\traw duplicate\traw duplicate, status read\tinboxkit duplicate\tinboxkit duplicate/raw\tinboxkit duplicate/raw, status read\tinboxkit duplicate/first\tduplicate, in tx\tinboxkit duplicate, marked\t\n")
	for _, c := range o.concs {
		rn, in, fn, rd, id := m("raw new", c), m("inboxkit new", c), m("inboxkit first", c), m("raw duplicate", c), m("inboxkit duplicate", c)
		ft := m("inboxkit first, in tx", c)
		rm, rr := m("raw marked", c), m("raw duplicate, status read", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t%s\t%.0f\t%s\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%.0f\t%.0f\t\n", c, rn, in, ratio(in, rn), rm, ratio(rm, rn), ratio(in, rm), fn, ratio(fn, rn), ft, ratio(ft, rn), rd, rr, id, ratio(id, rd), ratio(id, rr), ratio(id, fn), m("inboxkit duplicate, in tx", c), m("inboxkit duplicate, marked", c))
	}
	tw.Flush()
	return nil
}

// generateRowsMariaDB is generateRows (n rows, processed an hour ago) on
// MariaDB, with its sequence engine.
func generateRowsMariaDB(ctx context.Context, db *sql.DB, prefix string, n int) error {
	_, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO INBOX_EVENT_PROCESSING
  (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, PROCESSED_AT, CREATED_AT, UPDATED_AT, ATTEMPTS, PAYLOAD_HASH)
SELECT MD5(CONCAT(?, seq)), 'bench', 'PROCESSED', CONCAT('C-', seq), UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, 1, MD5(CONCAT('h', seq))
FROM seq_1_to_%d`, n), prefix)
	if err != nil {
		return fmt.Errorf("generate rows on MariaDB (its sequence engine, seq_1_to_N): %w", err)
	}
	return nil
}

func eventIDs(ctx context.Context, db *sql.DB, n int) ([]string, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf(`SELECT EVENT_ID FROM INBOX_EVENT_PROCESSING LIMIT %d`, n))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// bigSection: new messages on an empty inbox and on one holding o.big
// rows, interleaved, at each of o.bigConcs goroutines (o.bigConc when
// none), beside the raw database/sql twin on the same tables.
func bigSection(ctx context.Context, admin *sql.DB, o options) error {
	empty, es, err := storeSchema(ctx, admin, o.dsn, "inboxbench_empty_"+suffix(), o.bigConc+4)
	if err != nil {
		return err
	}
	defer empty.drop(admin)
	big, bs, err := storeSchema(ctx, admin, o.dsn, o.bigSchema, o.bigConc+4)
	if err != nil {
		return err
	}
	if o.keepBig {
		defer big.DB.Close()
	} else {
		defer big.drop(admin)
	}
	have, err := countRows(ctx, big.DB)
	if err != nil {
		return err
	}
	if have < o.big {
		began := time.Now()
		fmt.Fprintf(o.log, "big: generating %d rows with generate_series in schema %s (kept for the next run)\n", o.big-have, big.Name)
		err := generateRows(ctx, big.DB, "big-", have+1, o.big, 24*time.Hour, func(done int) {
			fmt.Fprintf(o.log, "big: %d rows in %s\n", have+done, time.Since(began).Round(time.Second))
		})
		if err != nil {
			return err
		}
		if _, err := big.DB.ExecContext(ctx, `VACUUM ANALYZE INBOX_EVENT_PROCESSING`); err != nil {
			return err
		}
	}
	if have, err = countRows(ctx, big.DB); err != nil {
		return err
	}
	// Each cell on both tables, interleaved, so that the raw twin and
	// inboxkit meet the same index size and the same cache state: raw
	// database/sql, Store.Process of a first delivery (one INSERT) and of a
	// marked one (attempt marker, then an UPDATE of the row), with random
	// event ids, and the raw twin and a first delivery with time-ordered
	// ids. The server's WAL per message (pg_stat_wal, the whole server: run
	// it on a quiet one) says why a large inbox is slower: full-page images
	// of the index pages a new key lands on.
	cells := []bigCell{
		{"raw", "", func(s *schema, _ *inbox.Store) op { return rawKeyed(postgresKind, s.DB, randomKey, randomHash) }},
		{"first", "raw", func(_ *schema, st *inbox.Store) op { return processKeyed(st, true, randomKey) }},
		{"marked", "raw", func(_ *schema, st *inbox.Store) op { return processKeyed(st, false, randomKey) }},
		{"raw, time-ordered ids", "", func(s *schema, _ *inbox.Store) op { return rawKeyed(postgresKind, s.DB, timeKey, randomHash) }},
		{"first, time-ordered ids", "raw, time-ordered ids", func(_ *schema, st *inbox.Store) op { return processKeyed(st, true, timeKey) }},
	}
	tables := []struct {
		sc   *schema
		s    *inbox.Store
		rows int
	}{{empty, es, 0}, {big, bs, have}}
	concs := o.bigConcs
	if len(concs) == 0 {
		concs = []int{o.bigConc}
	}
	type key struct {
		c, rows int
		cell    string
	}
	rates, walPer, fpiPer := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for round := 1; round <= o.rounds; round++ {
		for _, c := range concs {
			for _, cell := range cells {
				for _, t := range tables {
					wal0, fpi0, err := walStats(ctx, admin)
					if err != nil {
						return err
					}
					began := time.Now()
					r, err := rate(ctx, c, o.dur, cell.op(t.sc, t.s))
					if err != nil {
						return fmt.Errorf("%s on %d rows: %w", cell.name, t.rows, err)
					}
					msgs := r * time.Since(began).Seconds()
					wal1, fpi1, err := walStats(ctx, admin)
					if err != nil {
						return err
					}
					k := key{c, t.rows, cell.name}
					rates[k] = append(rates[k], r)
					walPer[k] = append(walPer[k], float64(wal1-wal0)/msgs)
					fpiPer[k] = append(fpiPer[k], float64(fpi1-fpi0)/msgs)
					fmt.Fprintf(o.log, "big round %d c=%-3d rows %-9d %-24s %8.0f msgs/s, %6.0f bytes of WAL and %.2f full-page images per message\n", round, c, t.rows, cell.name, r, float64(wal1-wal0)/msgs, float64(fpi1-fpi0)/msgs)
				}
			}
		}
	}
	fmt.Fprintf(o.out, "\nA full inbox: Store.Process of new messages beside the raw database/sql twin (the same table, in turns), %s per cell, median of %d round(s)\n\n", o.dur, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "goroutines\trows in the inbox\tcell\tmsgs/s\tvs raw\tvs empty\tWAL bytes/msg\tfull-page images/msg\t\n")
	for _, c := range concs {
		for _, t := range tables {
			for _, cell := range cells {
				k := key{c, t.rows, cell.name}
				r, vsRaw := median(rates[k]), "-"
				if cell.raw != "" {
					vsRaw = ratio(r, median(rates[key{c, t.rows, cell.raw}]))
				}
				fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f\t%s\t%s\t%.0f\t%.2f\t\n", c, t.rows, cell.name, r, vsRaw, ratio(r, median(rates[key{c, 0, cell.name}])), median(walPer[k]), median(fpiPer[k]))
			}
		}
	}
	return tw.Flush()
}

// bigCell is one contender of the big section: op on a table's schema and
// store; raw names the cell it is compared with on the same table.
type bigCell struct {
	name, raw string
	op        func(*schema, *inbox.Store) op
}

// randomKey is an event id spread over the key space (a random UUID's
// shape): each new one lands on its own leaf page of the primary key.
func randomKey() string { return newID() }

// timeKey is a time-ordered event id (a UUID version 7's shape: 48 bits of
// Unix milliseconds, then random), 32 hex digits like randomKey: new ids
// land on the few leaf pages at the end of their range.
func timeKey() string {
	return fmt.Sprintf("%012x", time.Now().UnixMilli()) + newID()[12:]
}

// randomHash is a payload hash that is not the event id: a digest is
// random whatever the id's shape.
func randomHash(string) string { return newID() }

// processKeyed is Store.Process of a new message writing one letter, a
// first delivery or a marked one, its event id from key and its payload
// hash random (a digest is random whatever the id's shape).
func processKeyed(s *inbox.Store, first bool, key func() string) op {
	return func(ctx context.Context, _ int) error {
		id := key()
		res, err := s.Process(ctx, inbox.Entry{EventID: id, ConsumerName: "bench", CorrelationID: "corr", PayloadHash: newID(), FirstDelivery: first}, letterHandler(id))
		if err != nil {
			return err
		}
		if res.Outcome != inboxkit.OutcomeProcessed {
			return fmt.Errorf("process %s: outcome %s, want processed", id, res.Outcome)
		}
		return nil
	}
}

// walStats reads the server's WAL bytes and full-page images so far.
func walStats(ctx context.Context, db *sql.DB) (bytes, fpi int64, err error) {
	err = db.QueryRowContext(ctx, `SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal`).Scan(&bytes, &fpi)
	if err != nil {
		err = fmt.Errorf("read pg_stat_wal (PostgreSQL 14 or later): %w", err)
	}
	return bytes, fpi, err
}

// countRows counts the inbox rows.
func countRows(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM INBOX_EVENT_PROCESSING`).Scan(&n)
	return n, err
}

// purgeSection: Store.Purge of o.purge old terminal rows while
// Store.Process ingests new messages, beside ingest alone just before, for
// o.rounds rounds (the rows are generated again for each). The ratio column
// is the median of the rounds' ratios: each pairs two measurements taken
// seconds apart, which the load of a shared machine moves less than it
// moves figures taken minutes apart.
func purgeSection(ctx context.Context, admin *sql.DB, o options) error {
	sc, s, err := storeSchema(ctx, admin, o.dsn, "inboxbench_purge_"+suffix(), o.bigConc+6)
	if err != nil {
		return err
	}
	defer sc.drop(admin)
	opt := inbox.PurgeOptions{OlderThan: 8 * 24 * time.Hour, BatchSize: o.purgeBatch, MaxRowsPerSecond: o.purgeRate}
	var secs, purged, alone, during, ratios []float64
	for round := 1; round <= o.rounds; round++ {
		r, err := purgeRound(ctx, sc.DB, s, o, opt, fmt.Sprintf("old-%d-", round))
		if err != nil {
			return err
		}
		fmt.Fprintf(o.log, "purge: round %d: %.0f rows/s, ingest %.0f alone, %.0f during (%.2f×)\n", round, r.purged/r.seconds, r.alone, r.during, r.during/r.alone)
		secs, purged = append(secs, r.seconds), append(purged, r.purged/r.seconds)
		alone, during, ratios = append(alone, r.alone), append(during, r.during), append(ratios, r.during/r.alone)
	}
	batch, pacing := o.purgeBatch, fmt.Sprintf("at most %d rows/s", o.purgeRate)
	if batch == 0 {
		batch = 1000 // PurgeOptions' default
	}
	switch {
	case o.purgeRate == 0:
		pacing = fmt.Sprintf("at most %d rows/s, the default", inbox.DefaultPurgeMaxRowsPerSecond)
	case o.purgeRate < 0:
		pacing = "no rate cap"
	}
	fmt.Fprintf(o.out, "\nRetention: Store.Purge (batches of %d, %s) of %d rows processed 30 days ago, while Store.Process ingests at %d goroutines; median of %d round(s)\n\n", batch, pacing, o.purge, o.bigConc, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "rows purged\tseconds\trows/s\tingest alone msgs/s\tingest during purge msgs/s\tduring/alone\t\n")
	fmt.Fprintf(tw, "%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f×\t\n", o.purge, median(secs), median(purged), median(alone), median(during), median(ratios))
	tw.Flush()
	return nil
}

// purgeResult is one round of the purge section.
type purgeResult struct {
	seconds, purged, alone, during float64
}

// purgeRound generates o.purge rows processed 30 days ago, measures ingest
// alone for o.dur, then purges them while ingest runs on.
func purgeRound(ctx context.Context, db *sql.DB, s *inbox.Store, o options, opt inbox.PurgeOptions, prefix string) (purgeResult, error) {
	var r purgeResult
	fmt.Fprintf(o.log, "purge: generating %d rows processed 30 days ago\n", o.purge)
	if err := generateRows(ctx, db, prefix, 1, o.purge, 30*24*time.Hour, nil); err != nil {
		return r, err
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE INBOX_EVENT_PROCESSING`); err != nil {
		return r, err
	}
	var err error
	if r.alone, err = rate(ctx, o.bigConc, o.dur, processNew(s)); err != nil {
		return r, err
	}

	// Ingest runs until the purge is done; its rate is taken over the purge.
	ictx, stopIngest := context.WithCancel(ctx)
	type ingest struct {
		rate float64
		err  error
	}
	ingestDone := make(chan ingest, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		r, err := rate(ictx, o.bigConc, time.Hour, processNew(s))
		ingestDone <- ingest{r, err}
	}()
	<-started
	began := time.Now()
	deleted, perr := s.Purge(ctx, opt)
	r.seconds = time.Since(began).Seconds()
	stopIngest()
	during := <-ingestDone
	if perr != nil {
		return r, perr
	}
	if during.err != nil {
		return r, during.err
	}
	if deleted != int64(o.purge) {
		return r, fmt.Errorf("purged %d rows, want %d", deleted, o.purge)
	}
	r.purged, r.during = float64(deleted), during.rate
	return r, nil
}
