package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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
		{"raw new", rawNew(k, sc.DB)},
		{"inboxkit new", processNewAs(s, k.insertLetter, false)},
		{"inboxkit first", processNewAs(s, k.insertLetter, true)},
		{"raw duplicate", rawDuplicate(k, sc.DB, ids)},
		{"inboxkit duplicate", processDuplicate(s, k.insertLetter, ids)},
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
	fmt.Fprintf(tw, "goroutines\traw new\tinboxkit new, marked\tmarked/raw\tinboxkit new, first delivery\tfirst/raw\traw duplicate\tinboxkit duplicate\tinboxkit duplicate/first\t\n")
	for _, c := range o.concs {
		rn, in, fn, rd, id := m("raw new", c), m("inboxkit new", c), m("inboxkit first", c), m("raw duplicate", c), m("inboxkit duplicate", c)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%.0f\t%s\t%.0f\t%.0f\t%s\t\n", c, rn, in, ratio(in, rn), fn, ratio(fn, rn), rd, id, ratio(id, fn))
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
// rows, interleaved, at o.bigConc goroutines.
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
	// Marked deliveries (attempt marker, then an UPDATE of the row) and
	// first deliveries (one INSERT), each on both tables.
	// The server's WAL per message (pg_stat_wal, the whole server: run it
	// on a quiet one) says why a large inbox is slower: full-page images
	// of the index pages a new key lands on.
	var emptyRates, bigRates, emptyFirst, bigFirst []float64
	walPer := map[string][]float64{}
	fpiPer := map[string][]float64{}
	for round := 1; round <= o.rounds; round++ {
		for _, cell := range []struct {
			s     *inbox.Store
			rates *[]float64
			name  string
			op    func(*inbox.Store) op
		}{{es, &emptyRates, "empty", processNew}, {bs, &bigRates, "big", processNew}, {es, &emptyFirst, "empty first", processFirst}, {bs, &bigFirst, "big first", processFirst}} {
			wal0, fpi0, err := walStats(ctx, admin)
			if err != nil {
				return err
			}
			began := time.Now()
			r, err := rate(ctx, o.bigConc, o.dur, cell.op(cell.s))
			if err != nil {
				return fmt.Errorf("%s: %w", cell.name, err)
			}
			msgs := r * time.Since(began).Seconds()
			wal1, fpi1, err := walStats(ctx, admin)
			if err != nil {
				return err
			}
			walPer[cell.name] = append(walPer[cell.name], float64(wal1-wal0)/msgs)
			fpiPer[cell.name] = append(fpiPer[cell.name], float64(fpi1-fpi0)/msgs)
			*cell.rates = append(*cell.rates, r)
			fmt.Fprintf(o.log, "big round %d %-11s %8.0f msgs/s, %6.0f bytes of WAL and %.2f full-page images per message\n", round, cell.name, r, float64(wal1-wal0)/msgs, float64(fpi1-fpi0)/msgs)
		}
	}
	fmt.Fprintf(o.out, "\nA full inbox: Store.Process of new messages at %d goroutines, %s per cell, median of %d round(s)\n\n", o.bigConc, o.dur, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "rows in the inbox\tmarked msgs/s\tvs empty\tWAL bytes/msg\tfull-page images/msg\tfirst delivery msgs/s\tvs empty\tWAL bytes/msg\tfull-page images/msg\t\n")
	m := func(v map[string][]float64, k string) float64 { return median(v[k]) }
	fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.0f\t%.2f\t%.0f\t%s\t%.0f\t%.2f\t\n", 0, median(emptyRates), "1.00×", m(walPer, "empty"), m(fpiPer, "empty"),
		median(emptyFirst), "1.00×", m(walPer, "empty first"), m(fpiPer, "empty first"))
	fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.0f\t%.2f\t%.0f\t%s\t%.0f\t%.2f\t\n", have, median(bigRates), ratio(median(bigRates), median(emptyRates)), m(walPer, "big"), m(fpiPer, "big"),
		median(bigFirst), ratio(median(bigFirst), median(emptyFirst)), m(walPer, "big first"), m(fpiPer, "big first"))
	tw.Flush()
	return nil
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
