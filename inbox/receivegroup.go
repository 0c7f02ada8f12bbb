package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
)

// Limits of one group of stored entries (receiveGroup): at most
// maxGroupRows rows and, past its first row, maxGroupBytes of payloads and
// headers, well below MariaDB's default max_allowed_packet (16 MiB).
const (
	maxGroupRows  = 64
	maxGroupBytes = 1 << 20
)

// groupAfter is how many entries may be stored at once, each by a
// statement of its own, before those that come wait to go together
// (docs/decisions.md, 2026-12-07 08:50).
const groupAfter = 3

// receiveGroup stores the new claimed entries that Worker.Receive calls
// store at the same moment in one multi-row INSERT. While at most
// groupAfter entries are being stored, each runs its own INSERT, in
// parallel, as before; past that, one that finds a statement running waits
// in a queue, and when a statement returns, the first who waits runs the
// next with all that wait. No entry waits for company: one that finds no
// statement running, or few entries being stored, runs at once. Each
// entry's answer is the one its own insertLeased would have given (a row
// written, or a row of its key found), or none (grouped false) where the
// group could not say: then the entry runs its own INSERT after all. So a
// statement that fails (a value the database refuses, a row that appeared
// between the read and the INSERT, a closed connection) costs the group's
// entries their INSERT again, and changes nothing else.
type receiveGroup struct {
	mu      sync.Mutex
	running int // statements running, or their runners handing over
	active  int // entries in insertGrouped
	after   int // groupAfter (tests set 0: every entry that finds a statement running waits)
	q       []*groupEntry
	// ran, when set (tests), learns of each statement of more than one
	// row: how many rows, and its error.
	ran func(rows int, err error)
}

// groupEntry is one entry waiting in a receiveGroup.
type groupEntry struct {
	a     args // insertLeased's arguments of the entry's row
	key   jobKey
	bytes int
	done  chan groupAnswer // one answer, buffered
}

// groupAnswer is what a receiveGroup tells a waiting entry.
type groupAnswer struct {
	// lead: the entry has been taken off the queue to run the next
	// statement (with itself in it).
	lead bool
	// grouped: the statement decided the entry's row; wrote: it inserted
	// it (else a row of the entry's key exists).
	grouped, wrote bool
}

// groups reports whether this store stores Worker.Receive's entries in
// groups: where the dialect inserts many rows in one statement and can
// tell which it inserted (RETURNING after doNothing), or can read which
// keys have rows first (a dialect whose failed INSERT does not abort
// anything outside the statement: MariaDB's autocommit statement).
func (s *Store) groups() bool { return s.qq.insertLeasedRows != "" }

// insertGrouped stores the row of a (insertLeased's arguments; key its
// key, bytes its payload's and headers' size) in a group with the entries
// stored at the same moment. grouped false means no statement decided
// the row: the caller runs its own INSERT.
func (s *Store) insertGrouped(ctx context.Context, a args, key jobKey, bytes int) (grouped, written bool, err error) {
	g := s.group
	me := &groupEntry{a: a, key: key, bytes: bytes, done: make(chan groupAnswer, 1)}
	g.mu.Lock()
	g.active++
	defer func() {
		g.mu.Lock()
		g.active--
		g.mu.Unlock()
	}()
	if g.running > 0 && g.active > g.after {
		g.q = append(g.q, me)
		g.mu.Unlock()
		var ans groupAnswer
		select {
		case ans = <-me.done:
		case <-ctx.Done():
			g.mu.Lock()
			if i := slices.Index(g.q, me); i >= 0 {
				g.q = slices.Delete(g.q, i, i+1)
				g.mu.Unlock()
				return false, false, nil // its own INSERT meets ctx's error
			}
			g.mu.Unlock()
			ans = <-me.done // taken already: the answer comes
		}
		if !ans.lead {
			return ans.grouped, ans.wrote, nil
		}
		g.mu.Lock() // leading now, in the slot of the statement that handed over
	} else {
		g.running++
	}
	batch := []*groupEntry{me}
	if len(g.q) > 0 {
		seen := map[jobKey]bool{key: true}
		size := bytes
		rest := g.q[:0]
		for _, e := range g.q {
			// A second entry of one key waits for the next statement,
			// which finds the row the first wrote.
			if len(batch) == maxGroupRows || size+e.bytes > maxGroupBytes || seen[e.key] {
				rest = append(rest, e)
				continue
			}
			batch = append(batch, e)
			seen[e.key] = true
			size += e.bytes
		}
		clear(g.q[len(rest):])
		g.q = rest
	}
	g.mu.Unlock()

	var ins map[jobKey]bool
	if len(batch) > 1 {
		ins, err = s.insertGroup(ctx, batch)
		if g.ran != nil {
			g.ran(len(batch), err)
		}
		for _, e := range batch[1:] {
			e.done <- groupAnswer{grouped: err == nil, wrote: ins[e.key]}
		}
		grouped, written, err = err == nil, ins[key], nil
	} else {
		// Alone: its own INSERT, while the entries that come meanwhile
		// wait to go together.
		var res sql.Result
		res, err = s.qq.insertLeased.exec(ctx, s.db, a)
		grouped, written = true, err == nil && wrote(res)
	}

	g.mu.Lock()
	if len(g.q) > 0 {
		next := g.q[0]
		g.q = slices.Delete(g.q, 0, 1)
		next.done <- groupAnswer{lead: true}
	} else {
		g.running--
	}
	g.mu.Unlock()
	return grouped, written, err
}

// insertGroup inserts the rows of batch (distinct keys) and reports which
// it inserted. With doNothing, one INSERT ... RETURNING; without (MariaDB),
// a read of the keys that have rows, then one INSERT of the others, which
// fails whole where a row appeared between the two.
func (s *Store) insertGroup(ctx context.Context, batch []*groupEntry) (map[jobKey]bool, error) {
	rowArgs := func(rows []*groupEntry) func(int) args {
		return func(i int) args { return rows[i].a }
	}
	inserted := make(map[jobKey]bool, len(batch))
	if s.d.doNothing != "" {
		st := compileListed(s.d, s.qq.insertLeasedRows, leasedRow, s.d.doNothing+" RETURNING EVENT_ID, CONSUMER_NAME", len(batch))
		rows, err := s.db.QueryContext(ctx, st.text, st.bindRows(nil, rowArgs(batch))...)
		if err != nil {
			return nil, fmt.Errorf("inbox: receive: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k jobKey
			if err := rows.Scan(&k.event, &k.consumer); err != nil {
				return nil, fmt.Errorf("inbox: receive: %w", err)
			}
			inserted[k] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: receive: %w", err)
		}
		return inserted, nil
	}
	found, err := s.presentIDs(ctx, s.db, len(batch), func(i int) string { return batch[i].key.event })
	if err != nil {
		return nil, fmt.Errorf("inbox: receive: %w", err)
	}
	absent := slices.DeleteFunc(slices.Clone(batch), func(e *groupEntry) bool { _, ok := found[e.key]; return ok })
	if len(absent) == 0 {
		return inserted, nil
	}
	ins := compileListed(s.d, s.qq.insertLeasedRows, leasedRow, "", len(absent))
	if _, err := s.db.ExecContext(ctx, ins.text, ins.bindRows(nil, rowArgs(absent))...); err != nil {
		return nil, fmt.Errorf("inbox: receive: %w", err)
	}
	for _, e := range absent {
		inserted[e.key] = true
	}
	return inserted, nil
}
