package outbox

import (
	"strconv"
	"strings"

	"github.com/inboxkit/inboxkit/inbox"
)

// stmt is one statement of Add with the way it takes Add's values.
type stmt struct {
	sql  string
	args func(addArgs) []any
}

type addArgs struct {
	key, id, destination string
	now                  any
	headers              any
	body                 []byte
	cause, correlation   any
}

// queries are a dialect's statements on one outbox table (T) and its key
// table (K).
//
// The key table holds, per key: LAST_SEQ, the sequence number of its last
// message (raised by Add under the key row's lock, so the numbers of a key
// follow the commit order of its transactions and have no gaps: a rollback
// takes its number back); DONE_SEQ, up to which its messages are settled
// (sent, dropped, or parked and skipped); NEXT_AT, when a relay may take the
// key next (NULL: nothing to send, or parked; a claim sets it to the end of
// its lease); LEASE_OWNER, the claim that holds it.
type queries struct {
	add []stmt
	// addNotify is add with a NOTIFY of the relays at commit (PostgreSQL;
	// nil elsewhere or with Config.NoNotify).
	addNotify []stmt
	// claimRead (PostgreSQL) claims up to ?4 due keys and reads up to ?5
	// messages of each after DONE_SEQ, in one statement.
	claimRead string
	// claim claims up to ?4 due keys (SQLite: UPDATE ... RETURNING);
	// claimSelect + claimUpdate do it in a transaction (MySQL).
	claim, claimSelect, claimUpdate string
	// readRows reads the next messages of the keys of an IN list (@keys).
	readRows string
	// notify wakes the relays at commit (PostgreSQL; "" elsewhere or with
	// Config.NoNotify).
	notify string
	// nextDue is when the next key is due.
	nextDue string
	// markSent(n) marks n messages SENT by id: ?1 SENT_AT, ?2 UPDATED_AT,
	// then the ids.
	markSent func(n int) string
	markFail string
	// release(n) releases n keys, each given as (key, DONE_SEQ, NEXT_AT
	// when messages remain, claim token).
	release func(n int) string
}

// maxInList bounds the values of one statement's IN or VALUES list.
const maxInList = 400

const rowCols = `o.MESSAGE_ID, o.MSG_KEY, o.SEQ, o.DESTINATION, o.HEADERS, o.BODY, o.CAUSE_EVENT_ID, o.CORRELATION_ID, o.STATUS, o.ATTEMPTS, o.CREATED_AT`

func buildQueries(d inbox.Dialect, table string, notify bool) queries {
	k := keyTable(table)
	r := func(q string) string {
		q = strings.NewReplacer("{t}", table, "{k}", k).Replace(q)
		return d.Rebind(q)
	}
	var q queries
	insertRow := `INSERT INTO {t} (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, HEADERS, BODY, CAUSE_EVENT_ID, CORRELATION_ID, STATUS, ATTEMPTS, CREATED_AT)`
	switch d.Name() {
	case "postgres":
		add := func(final string) []stmt {
			return []stmt{{
				sql: r(`WITH k AS (INSERT INTO {k} AS k (MSG_KEY, LAST_SEQ, DONE_SEQ, NEXT_AT) VALUES (?, 1, 0, CAST(? AS TIMESTAMP))
ON CONFLICT (MSG_KEY) DO UPDATE SET LAST_SEQ = k.LAST_SEQ + 1, NEXT_AT = CASE WHEN k.LAST_SEQ = k.DONE_SEQ THEN EXCLUDED.NEXT_AT ELSE k.NEXT_AT END
RETURNING LAST_SEQ),
m AS (` + insertRow + ` SELECT ?, ?, k.LAST_SEQ, ?, ?, ?, ?, ?, 'PENDING', 0, CAST(? AS TIMESTAMP) FROM k RETURNING 1)
` + final),
				args: func(a addArgs) []any {
					return []any{a.key, a.now, a.id, a.key, a.destination, a.headers, a.body, a.cause, a.correlation, a.now}
				},
			}}
		}
		q.add = add(`SELECT 1 FROM m`)
		if notify {
			q.notify = `SELECT pg_notify('` + notifyChannel(table) + `', '')`
			q.addNotify = add(q.notify + ` FROM m`)
		}
		q.claimRead = r(`WITH c AS (UPDATE {k} SET LEASE_OWNER = ?, NEXT_AT = CAST(? AS TIMESTAMP)
WHERE MSG_KEY IN (SELECT MSG_KEY FROM {k} WHERE NEXT_AT <= CAST(? AS TIMESTAMP) ORDER BY NEXT_AT LIMIT ? FOR UPDATE SKIP LOCKED)
RETURNING MSG_KEY, DONE_SEQ)
SELECT c.MSG_KEY, c.DONE_SEQ, ` + rowCols + ` FROM c LEFT JOIN {t} o ON o.MSG_KEY = c.MSG_KEY AND o.SEQ > c.DONE_SEQ AND o.SEQ <= c.DONE_SEQ + ?
ORDER BY c.MSG_KEY, o.SEQ`)
	case "mysql":
		q.add = []stmt{
			{
				// Assignments run left to right: NEXT_AT reads the old LAST_SEQ.
				sql: r(`INSERT INTO {k} (MSG_KEY, LAST_SEQ, DONE_SEQ, NEXT_AT) VALUES (?, 1, 0, ?)
ON DUPLICATE KEY UPDATE NEXT_AT = IF(LAST_SEQ = DONE_SEQ, VALUES(NEXT_AT), NEXT_AT), LAST_SEQ = LAST_SEQ + 1`),
				args: func(a addArgs) []any { return []any{a.key, a.now} },
			},
			{
				sql: r(insertRow + ` SELECT ?, MSG_KEY, LAST_SEQ, ?, ?, ?, ?, ?, 'PENDING', 0, ? FROM {k} WHERE MSG_KEY = ?`),
				args: func(a addArgs) []any {
					return []any{a.id, a.destination, a.headers, a.body, a.cause, a.correlation, a.now, a.key}
				},
			},
		}
		q.claimSelect = r(`SELECT MSG_KEY FROM {k} WHERE NEXT_AT <= ? ORDER BY NEXT_AT LIMIT ? FOR UPDATE SKIP LOCKED`)
		q.claimUpdate = r(`UPDATE {k} SET LEASE_OWNER = ?, NEXT_AT = ? WHERE MSG_KEY IN (@keys)`)
	case "sqlite":
		q.add = []stmt{
			{
				sql: r(`INSERT INTO {k} (MSG_KEY, LAST_SEQ, DONE_SEQ, NEXT_AT) VALUES (?, 1, 0, ?)
ON CONFLICT (MSG_KEY) DO UPDATE SET LAST_SEQ = LAST_SEQ + 1, NEXT_AT = CASE WHEN LAST_SEQ = DONE_SEQ THEN excluded.NEXT_AT ELSE NEXT_AT END`),
				args: func(a addArgs) []any { return []any{a.key, a.now} },
			},
			{
				sql: r(insertRow + ` SELECT ?, MSG_KEY, LAST_SEQ, ?, ?, ?, ?, ?, 'PENDING', 0, ? FROM {k} WHERE MSG_KEY = ?`),
				args: func(a addArgs) []any {
					return []any{a.id, a.destination, a.headers, a.body, a.cause, a.correlation, a.now, a.key}
				},
			},
		}
		q.claim = r(`UPDATE {k} SET LEASE_OWNER = ?, NEXT_AT = ? WHERE MSG_KEY IN (SELECT MSG_KEY FROM {k} WHERE NEXT_AT <= ? ORDER BY NEXT_AT LIMIT ?) RETURNING MSG_KEY`)
	}
	q.readRows = r(`SELECT k.MSG_KEY, k.DONE_SEQ, ` + rowCols + ` FROM {k} k LEFT JOIN {t} o ON o.MSG_KEY = k.MSG_KEY AND o.SEQ > k.DONE_SEQ AND o.SEQ <= k.DONE_SEQ + ?
WHERE k.MSG_KEY IN (@keys) ORDER BY k.MSG_KEY, o.SEQ`)
	q.nextDue = r(`SELECT MIN(NEXT_AT) FROM {k}`)
	markSent := r(`UPDATE {t} SET STATUS = 'SENT', ATTEMPTS = ATTEMPTS + 1, SENT_AT = ?, UPDATED_AT = ? WHERE MESSAGE_ID IN (@ids) AND STATUS = 'PENDING'`)
	q.markSent = func(n int) string { return placeholdersFrom(d, markSent, "@ids", 3, n, 1, "") }
	q.markFail = r(`UPDATE {t} SET STATUS = ?, ATTEMPTS = ATTEMPTS + 1, LAST_ERROR = ?, UPDATED_AT = ? WHERE MESSAGE_ID = ? AND STATUS = 'PENDING'`)
	// The keys come as a derived table of SELECTs (one statement for every
	// dialect's UPDATE with a join); a key is released only by the claim
	// that holds it, and NEXT_AT is computed from LAST_SEQ under the row's
	// lock, so a message added meanwhile keeps its key due.
	next := "CASE WHEN {k}.LAST_SEQ > v.done THEN v.next ELSE NULL END"
	var release string
	switch d.Name() {
	case "mysql":
		release = `UPDATE {k} JOIN (@rows) v ON {k}.MSG_KEY = v.k AND {k}.LEASE_OWNER = v.token SET {k}.NEXT_AT = ` + next + `, {k}.DONE_SEQ = v.done, {k}.LEASE_OWNER = NULL`
	default:
		release = `UPDATE {k} SET NEXT_AT = ` + next + `, DONE_SEQ = v.done, LEASE_OWNER = NULL FROM (@rows) v WHERE {k}.MSG_KEY = v.k AND {k}.LEASE_OWNER = v.token`
	}
	release = strings.NewReplacer("{t}", table, "{k}", k).Replace(release)
	row := "SELECT ? AS k, " + cast(d, "?", "BIGINT") + " AS done, " + cast(d, "?", "TIMESTAMP") + " AS next, ? AS token"
	q.release = func(n int) string { return placeholdersFrom(d, release, "@rows", 1, n, 4, row) }
	return q
}

// cast is a placeholder whose type PostgreSQL cannot infer from its place
// (a derived table's column, a CASE branch).
func cast(d inbox.Dialect, p, typ string) string {
	if d.Name() == "postgres" {
		return "CAST(" + p + " AS " + typ + ")"
	}
	return p
}

// placeholdersFrom replaces marker in q (whose other placeholders are
// numbered already, up to first-1) by n groups: group "" is one '?' per
// group, joined by commas (an IN list); otherwise group's per '?'s,
// joined by UNION ALL (a derived table). The '?'s are numbered from first
// in the dialect's style.
func placeholdersFrom(d inbox.Dialect, q, marker string, first, n, per int, group string) string {
	var b strings.Builder
	num := first
	ph := func() string {
		defer func() { num++ }()
		if d.Name() == "postgres" {
			return "$" + strconv.Itoa(num)
		}
		return "?"
	}
	for i := 0; i < n; i++ {
		if group == "" {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(ph())
			continue
		}
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		for _, part := range strings.SplitAfter(group, "?") {
			if strings.HasSuffix(part, "?") {
				b.WriteString(strings.TrimSuffix(part, "?") + ph())
			} else {
				b.WriteString(part)
			}
		}
	}
	return strings.Replace(q, marker, b.String(), 1)
}

// inList expands the @keys placeholder of q into n '?' placeholders
// (MySQL and SQLite; PostgreSQL claims and reads in one statement).
func inList(q string, n int) string {
	return strings.Replace(q, "@keys", strings.TrimSuffix(strings.Repeat("?, ", n), ", "), 1)
}
