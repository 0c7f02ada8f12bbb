package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// A value the database cannot store is the message's fault, not an outage
// (issue 23, item 3): Process, ProcessBatch and Receive report it as
// poison with its reason, never as an error that would hand the delivery
// back forever, and the neighbours of a batch are processed. An event id
// with a NUL byte is refused alike on every database (PostgreSQL refuses
// it, the others would store it); a correlation id over its column is cut
// at a character boundary (cut in the middle of one, PostgreSQL and
// MariaDB refused the bytes); a header that is not valid UTF-8 would be
// stored changed (JSON), so store-then-process dead-letters it.
func TestValuesTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, b := setup(t, db, inbox.Config{})
		ctx := context.Background()
		ok := func(id string) inbox.Handler { return insertBusiness(db, id, "x") }

		nul := entry("E\x00NUL")
		res, err := s.Process(ctx, nul, ok(nul.EventID))
		if err != nil || res.Outcome != inboxkit.OutcomeDeadLetter || res.Class != inboxkit.ClassPoison || res.Reason != inboxkit.ReasonInvalidEventID {
			t.Errorf("event id with a NUL byte: %+v, %v; want DEAD_LETTER POISON INVALID_EVENT_ID", res, err)
		}
		first := nul
		first.FirstDelivery = true
		results, err := s.ProcessBatch(ctx, []inbox.BatchItem{{Entry: entry("NEIGHBOUR-1"), Handler: ok("NEIGHBOUR-1")}, {Entry: first, Handler: ok(first.EventID)}})
		if err != nil {
			t.Errorf("batch with an event id with a NUL byte: %v", err)
		} else if r := results[1]; r.Outcome != inboxkit.OutcomeDeadLetter || r.Reason != inboxkit.ReasonInvalidEventID {
			t.Errorf("batch item with a NUL byte in its event id: %+v", r)
		}
		var rerr *inbox.ReceiveError
		if _, _, err := s.Receive(ctx, nul, nil, []byte("{}")); !errors.As(err, &rerr) || rerr.Reason != inboxkit.ReasonInvalidEventID {
			t.Errorf("Receive of an event id with a NUL byte: %v, want a ReceiveError INVALID_EVENT_ID", err)
		}

		// 41 characters of 3 bytes after one of 1: 124 bytes, cut at 120 in
		// the middle of a character.
		long := entry("LONG-CORR")
		long.CorrelationID = "x" + strings.Repeat("€", 41)
		if res, err := s.Process(ctx, long, ok(long.EventID)); err != nil || res.Outcome != inboxkit.OutcomeProcessed {
			t.Errorf("correlation id over its column: %+v, %v; want it processed", res, err)
		} else if c := get(t, s, long.EventID).CorrelationID; !utf8.ValidString(c) || len(c) > inbox.MaxCorrelationIDLength || !strings.HasPrefix(long.CorrelationID, c) || len(c) < 118 {
			t.Errorf("stored correlation id %q (%d bytes): want the id cut at a character boundary within %d bytes", c, len(c), inbox.MaxCorrelationIDLength)
		}
		longFirst := entry("LONG-CORR-FIRST")
		longFirst.CorrelationID, longFirst.FirstDelivery = long.CorrelationID, true
		results, err = s.ProcessBatch(ctx, []inbox.BatchItem{{Entry: longFirst, Handler: ok(longFirst.EventID)}, {Entry: entry("NEIGHBOUR-2"), Handler: ok("NEIGHBOUR-2")}})
		if err != nil || results[0].Outcome != inboxkit.OutcomeProcessed {
			t.Errorf("batch with a correlation id over its column: %v, %v; want it processed", results, err)
		}

		_, _, err = s.Receive(ctx, entry("BAD-HEADER"), map[string]string{"x-name": "M\xfcller"}, []byte("{}"))
		if !errors.As(err, &rerr) || rerr.Reason != inboxkit.ReasonInvalidEncoding {
			t.Errorf("Receive with a header that is not valid UTF-8: %v, want a ReceiveError INVALID_ENCODING", err)
		}
		for _, id := range []string{"NEIGHBOUR-2", long.EventID, longFirst.EventID} {
			if n := b.businessRows(t, id); n != 1 {
				t.Errorf("%s: %d business rows, want 1", id, n)
			}
		}
	})
}

// A correlation id that is not valid UTF-8, or longer than a legacy
// table's narrower column, is refused by PostgreSQL and MariaDB: poison
// INVALID_ENCODING or VALUE_TOO_LONG, dead-lettered with a row that leaves
// the value out; an event id longer than a legacy EVENT_ID column is
// dead-lettered as INVALID_EVENT_ID without a row. SQLite stores them as
// they are (no widths, no encoding check): processed.
func TestRefusedValuesAreDeadLettered(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, db *dbtest.DB) {
		s, _ := setup(t, db, inbox.Config{})
		ctx := context.Background()
		narrow := map[string][]string{
			dbtest.Postgres: {`ALTER TABLE INBOX_EVENT_PROCESSING ALTER COLUMN CORRELATION_ID TYPE VARCHAR(20)`, `ALTER TABLE INBOX_EVENT_PROCESSING ALTER COLUMN EVENT_ID TYPE VARCHAR(30)`},
			dbtest.MySQL:    {`ALTER TABLE INBOX_EVENT_PROCESSING MODIFY CORRELATION_ID VARCHAR(20)`, `ALTER TABLE INBOX_EVENT_PROCESSING MODIFY EVENT_ID VARCHAR(30) NOT NULL`},
		}[db.Backend]
		for _, ddl := range narrow {
			_, err := db.ExecContext(ctx, ddl)
			dbtest.Must(t, err, "narrow a column as a legacy table has it")
		}
		badCorr, longCorr, longID := entry("BAD-CORR"), entry("LONG-CORR"), entry("LONG-ID-"+strings.Repeat("9", 30))
		badCorr.CorrelationID = "C-\xff\xfe"
		longCorr.CorrelationID = strings.Repeat("c", 40)
		for _, tt := range []struct {
			e      inbox.Entry
			reason string // on PostgreSQL and MariaDB
			dead   string // the dead letter's reason
			row    bool
		}{
			{badCorr, inboxkit.ReasonInvalidEncoding, inboxkit.ReasonInvalidEncoding, true},
			{longCorr, inboxkit.ReasonValueTooLong, inboxkit.ReasonValueTooLong, true},
			{longID, inboxkit.ReasonValueTooLong, inboxkit.ReasonInvalidEventID, false},
		} {
			for _, firstDelivery := range []bool{false, true} {
				e := tt.e
				e.FirstDelivery = firstDelivery
				res, err := s.Process(ctx, e, func(context.Context, *sql.Tx) error { return nil })
				dbtest.Must(t, err, "Process %q: a refused value is no outage", e.EventID)
				if db.Backend == dbtest.SQLite {
					if res.Outcome != inboxkit.OutcomeProcessed && res.Outcome != inboxkit.OutcomeDuplicate {
						t.Errorf("SQLite, %q: %+v, want processed", e.EventID, res)
					}
					continue
				}
				if res.Outcome != inboxkit.OutcomeDeadLetter || res.Class != inboxkit.ClassPoison || res.Reason != tt.reason {
					t.Fatalf("%q (first delivery %v): %+v, want DEAD_LETTER POISON %s", e.EventID, firstDelivery, res, tt.reason)
				}
				var published []string
				ports, err := s.WithPorts(inbox.Ports{DeadLetterQueue: "DLQ.test", DeadLetters: publishFunc(func(h map[string]string, b []byte) error {
					env, err := dlq.Parse(h, b)
					published = append(published, env.Reason)
					return err
				})})
				dbtest.Must(t, err, "ports")
				dead, err := ports.DeadLetter(ctx, inbox.DeadLetter{Entry: e, Class: res.Class, Reason: res.Reason, Err: res.Err})
				dbtest.Must(t, err, "dead-letter %q", e.EventID)
				if dead.Outcome != inboxkit.OutcomeDeadLetter || len(published) != 1 || published[0] != tt.dead {
					t.Errorf("%q: dead letter published %v (%+v), want once with %s", e.EventID, published, dead, tt.dead)
				}
				st := dead.Status
				r, err := s.Get(ctx, e.EventID, consumerName)
				switch {
				case !tt.row && !errors.Is(err, inbox.ErrNotFound):
					t.Errorf("%q: row %+v (%v), want none: the database refuses its key", e.EventID, r, err)
				case tt.row && (err != nil || r.Status != inboxkit.StatusDeadLettered || r.ReasonCode != tt.dead || r.CorrelationID != ""):
					t.Errorf("%q: row %+v (%v), want DEAD_LETTERED %s without the correlation id", e.EventID, r, err, tt.dead)
				}
				if st != "" && st != inboxkit.StatusDeadLettered {
					t.Errorf("%q: status %s", e.EventID, st)
				}
				if tt.row { // else the next round is a duplicate
					_, err := db.ExecContext(ctx, s.Dialect().Rebind(`DELETE FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = ?`), e.EventID)
					dbtest.Must(t, err, "delete")
				}
			}
		}
	})
}
