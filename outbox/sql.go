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
//
// A message without a key (schema step 2) has no key row: Add writes it
// with SEQ 0 and its own NEXT_AT, and relays claim it by its row
// (LEASE_OWNER, NEXT_AT on the outbox table) as a key of one message,
// which is settled once the message is (NEXT_AT NULL). It is ordered with
// nothing, so it needs no sequence and no lock beyond its own row.
// Keyless messages written before step 2 keep their key rows (SEQ 1).
//
// Since schema step 3 the unique index of the key numbers (MSG_KEY, SEQ)
// holds only SEQ > 0 on PostgreSQL (a keyless row has no entry in it), so
// every statement that reads a key's messages by number says o.SEQ > 0,
// which lets the partial index serve it; the other dialects keep the full
// constraint, where the condition changes nothing. A keyless row written
// now has entries in three indexes: the primary key, STATUS and NEXT.
type queries struct {
	add []stmt
	// addOwn is add for a message without a key.
	addOwn []stmt
	// addNotify and addOwnNotify (PostgreSQL, unless Config.NoNotify) are
	// add and addOwn that also notify at the commit of the caller's
	// transaction (a RETURNING pg_notify: no round trip of its own).
	addNotify, addOwnNotify []stmt
	// claimRead (PostgreSQL) claims due keys for up to ?4 slots, key rows
	// and keyless messages' own rows together (?6 own rows to a slot), and
	// reads up to ?5 messages of each key after DONE_SEQ, in one
	// statement; [0] takes key rows first, [1] own rows first (a relay
	// alternates, so neither kind waits for the other to run out).
	claimRead [2]string
	// claim claims up to ?4 due keys (SQLite: UPDATE ... RETURNING);
	// claimSelect + claimUpdate do it in a transaction (MySQL); claimOwn,
	// claimOwnSelect and claimOwnUpdate are the same for own rows.
	claim, claimSelect, claimUpdate          string
	claimOwn, claimOwnSelect, claimOwnUpdate string
	// readRows reads the next messages of the keys of an IN list (@keys);
	// readOwn the messages of own rows by MESSAGE_ID.
	readRows, readOwn string
	// notify wakes the relays (PostgreSQL; "" elsewhere or with
	// Config.NoNotify): at the commit of the transaction it runs in.
	notify string
	// notifyAlone is notify as a statement of its own (autocommit), whose
	// commit does not wait for its WAL flush (synchronous_commit off for
	// that transaction only): it records nothing that must survive a
	// crash, and a NOTIFY gives its transaction an id, so each would
	// otherwise cost a flush of its own beside the writers'.
	notifyAlone string
	// nextDue is when the next key is due.
	nextDue string
	// markSent(n) marks n messages SENT by id: ?1 SENT_AT, ?2 UPDATED_AT,
	// then the ids.
	markSent func(n int) string
	markFail string
	// release(n) releases n keys, each given as (key, DONE_SEQ, NEXT_AT
	// when messages remain, claim token); releaseOwn(n) the same for own
	// rows (DONE_SEQ 1: settled).
	release, releaseOwn func(n int) string
	// releaseOwnSent(n) is releaseOwn whose rows also say whether the
	// message was confirmed (sent 1): it marks such a PENDING message SENT
	// in the same update, also when its lease is no longer the claim's
	// (the confirm counts; the row is released only by its claim), so a
	// keyless message is updated twice in all (claim, settle) instead of
	// three times; a row neither confirmed nor held by the claim is left
	// alone, as releaseOwn leaves it. Nil on MySQL, whose multi-table
	// UPDATE assigns in no fixed order (its SET expressions could read the
	// new LEASE_OWNER).
	releaseOwnSent func(n int) string
}

// maxInList bounds the values of one statement's IN or VALUES list.
const maxInList = 400

// rowCols are a message's columns as claims read them, after the columns
// OWN (1 for an own row), MSG_KEY and DONE_SEQ.
const rowCols = `o.MESSAGE_ID, o.MSG_KEY, o.SEQ, o.DESTINATION, o.HEADERS, o.BODY, o.CAUSE_EVENT_ID, o.CORRELATION_ID, o.STATUS, o.ATTEMPTS, o.CREATED_AT`

// ownCols are rowCols of an own row: its key's progress is 0 and it is the
// key's message number 1.
var ownCols = `1, o.MSG_KEY, 0, ` + strings.Replace(rowCols, "o.SEQ", "1", 1)

func buildQueries(d inbox.Dialect, table string, notify bool) queries {
	k := keyTable(table)
	r := func(q string) string {
		q = strings.NewReplacer("{t}", table, "{k}", k).Replace(q)
		return d.Rebind(q)
	}
	var q queries
	insertRow := `INSERT INTO {t} (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, HEADERS, BODY, CAUSE_EVENT_ID, CORRELATION_ID, STATUS, ATTEMPTS, CREATED_AT)`
	insertOwn := `INSERT INTO {t} (MESSAGE_ID, MSG_KEY, SEQ, DESTINATION, HEADERS, BODY, CAUSE_EVENT_ID, CORRELATION_ID, STATUS, ATTEMPTS, CREATED_AT, NEXT_AT)`
	ownArgs := func(a addArgs) []any {
		return []any{a.id, a.key, a.destination, a.headers, a.body, a.cause, a.correlation, a.now, a.now}
	}
	if d.Name() != "postgres" {
		q.addOwn = []stmt{{sql: r(insertOwn + ` VALUES (?, ?, 0, ?, ?, ?, ?, ?, 'PENDING', 0, ?, ?)`), args: ownArgs}}
	}
	switch d.Name() {
	case "postgres":
		q.add = []stmt{{
			sql: r(`WITH k AS (INSERT INTO {k} AS k (MSG_KEY, LAST_SEQ, DONE_SEQ, NEXT_AT) VALUES (?, 1, 0, CAST(? AS TIMESTAMP))
ON CONFLICT (MSG_KEY) DO UPDATE SET LAST_SEQ = k.LAST_SEQ + 1, NEXT_AT = CASE WHEN k.LAST_SEQ = k.DONE_SEQ THEN EXCLUDED.NEXT_AT ELSE k.NEXT_AT END
RETURNING LAST_SEQ)
` + insertRow + ` SELECT ?, ?, k.LAST_SEQ, ?, ?, ?, ?, ?, 'PENDING', 0, CAST(? AS TIMESTAMP) FROM k`),
			args: func(a addArgs) []any {
				return []any{a.key, a.now, a.id, a.key, a.destination, a.headers, a.body, a.cause, a.correlation, a.now}
			},
		}}
		q.addOwn = []stmt{{
			sql:  r(insertOwn + ` VALUES (?, ?, 0, ?, ?, ?, ?, ?, 'PENDING', 0, CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP))`),
			args: ownArgs,
		}}
		if notify {
			q.notify = `SELECT pg_notify('` + notifyChannel(table) + `', '')`
			returning := ` RETURNING pg_notify('` + notifyChannel(table) + `', '')`
			q.addNotify = []stmt{{sql: q.add[0].sql + returning, args: q.add[0].args}}
			q.addOwnNotify = []stmt{{sql: q.addOwn[0].sql + returning, args: q.addOwn[0].args}}
			q.notifyAlone = `SELECT set_config('synchronous_commit', 'off', true), pg_notify('` + notifyChannel(table) + `', '')`
		}
		// Both kinds are claimed together, up to ?4 in all: the first
		// kind up to ?4, the second what is left. = ANY(ARRAY(...)) makes
		// the planner probe the primary key with the few ids claimed: with
		// IN and a limit it cannot estimate (?4 minus a count) it hashed
		// the whole table (4.4 s a claim beside 1,000,000 pending rows).
		keys := func(limit string) string {
			return `UPDATE {k} SET LEASE_OWNER = $1, NEXT_AT = CAST($2 AS TIMESTAMP)
WHERE MSG_KEY = ANY(ARRAY(SELECT MSG_KEY FROM {k} WHERE NEXT_AT <= CAST($3 AS TIMESTAMP) ORDER BY NEXT_AT LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED))
RETURNING MSG_KEY, DONE_SEQ`
		}
		owns := func(limit string) string {
			return `UPDATE {t} SET LEASE_OWNER = $1, NEXT_AT = CAST($2 AS TIMESTAMP)
WHERE MESSAGE_ID = ANY(ARRAY(SELECT MESSAGE_ID FROM {t} WHERE NEXT_AT <= CAST($3 AS TIMESTAMP) ORDER BY NEXT_AT LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED))
RETURNING ` + strings.ReplaceAll(rowCols, "o.", "")
		}
		read := `
SELECT 0, c.MSG_KEY, c.DONE_SEQ, ` + rowCols + ` FROM c LEFT JOIN {t} o ON o.MSG_KEY = c.MSG_KEY AND o.SEQ > 0 AND o.SEQ > c.DONE_SEQ AND o.SEQ <= c.DONE_SEQ + $5
UNION ALL SELECT ` + ownCols + ` FROM w o
ORDER BY 2, 6`
		q.claimRead[0] = r(`WITH c AS (` + keys("CAST($4 AS BIGINT)") + `), w AS (` + owns("(CAST($4 AS BIGINT) - (SELECT COUNT(*) FROM c)) * CAST($6 AS BIGINT)") + `)` + read)
		q.claimRead[1] = r(`WITH w AS (` + owns("CAST($4 AS BIGINT) * CAST($6 AS BIGINT)") + `), c AS (` + keys("CAST($4 AS BIGINT) - (SELECT (COUNT(*) + CAST($6 AS BIGINT) - 1) / CAST($6 AS BIGINT) FROM w)") + `)` + read)
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
		q.claimOwnSelect = r(`SELECT MESSAGE_ID FROM {t} WHERE NEXT_AT <= ? ORDER BY NEXT_AT LIMIT ? FOR UPDATE SKIP LOCKED`)
		q.claimOwnUpdate = r(`UPDATE {t} SET LEASE_OWNER = ?, NEXT_AT = ? WHERE MESSAGE_ID IN (@keys)`)
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
		q.claimOwn = r(`UPDATE {t} SET LEASE_OWNER = ?, NEXT_AT = ? WHERE MESSAGE_ID IN (SELECT MESSAGE_ID FROM {t} WHERE NEXT_AT <= ? ORDER BY NEXT_AT LIMIT ?) RETURNING MESSAGE_ID`)
	}
	q.readRows = r(`SELECT 0, k.MSG_KEY, k.DONE_SEQ, ` + rowCols + ` FROM {k} k LEFT JOIN {t} o ON o.MSG_KEY = k.MSG_KEY AND o.SEQ > 0 AND o.SEQ > k.DONE_SEQ AND o.SEQ <= k.DONE_SEQ + ?
WHERE k.MSG_KEY IN (@keys) ORDER BY k.MSG_KEY, o.SEQ`)
	q.readOwn = r(`SELECT ` + ownCols + ` FROM {t} o WHERE o.MESSAGE_ID IN (@keys) ORDER BY o.MSG_KEY`)
	q.nextDue = r(`SELECT MIN(n) FROM (SELECT MIN(NEXT_AT) AS n FROM {k} UNION ALL SELECT MIN(NEXT_AT) AS n FROM {t}) x`)
	markSent := r(`UPDATE {t} SET STATUS = 'SENT', ATTEMPTS = ATTEMPTS + 1, SENT_AT = ?, UPDATED_AT = ? WHERE MESSAGE_ID IN (@ids) AND STATUS = 'PENDING'`)
	q.markSent = func(n int) string { return placeholdersFrom(d, markSent, "@ids", 3, n, 1, "") }
	q.markFail = r(`UPDATE {t} SET STATUS = ?, ATTEMPTS = ATTEMPTS + 1, LAST_ERROR = ?, UPDATED_AT = ? WHERE MESSAGE_ID = ? AND STATUS = 'PENDING'`)
	// The keys come as a derived table of SELECTs (one statement for every
	// dialect's UPDATE with a join); a key is released only by the claim
	// that holds it, and NEXT_AT is computed from LAST_SEQ under the row's
	// lock, so a message added meanwhile keeps its key due.
	next := "CASE WHEN {k}.LAST_SEQ > v.done THEN v.next ELSE NULL END"
	// An own row is released by its MESSAGE_ID, and settled (NEXT_AT
	// NULL) once its message is (done 1).
	nextOwn := "CASE WHEN v.done > 0 THEN NULL ELSE v.next END"
	var release, releaseOwn, releaseOwnSent string
	switch d.Name() {
	case "mysql":
		release = `UPDATE {k} JOIN (@rows) v ON {k}.MSG_KEY = v.k AND {k}.LEASE_OWNER = v.token SET {k}.NEXT_AT = ` + next + `, {k}.DONE_SEQ = v.done, {k}.LEASE_OWNER = NULL`
		releaseOwn = `UPDATE {t} JOIN (@rows) v ON {t}.MESSAGE_ID = v.k AND {t}.LEASE_OWNER = v.token SET {t}.NEXT_AT = ` + nextOwn + `, {t}.LEASE_OWNER = NULL`
	default:
		release = `UPDATE {k} SET NEXT_AT = ` + next + `, DONE_SEQ = v.done, LEASE_OWNER = NULL FROM (@rows) v WHERE {k}.MSG_KEY = v.k AND {k}.LEASE_OWNER = v.token`
		releaseOwn = `UPDATE {t} SET NEXT_AT = ` + nextOwn + `, LEASE_OWNER = NULL FROM (@rows) v WHERE {t}.MESSAGE_ID = v.k AND {t}.LEASE_OWNER = v.token`
		// Every SET expression reads the row as it was (SQL's rule, which
		// PostgreSQL and SQLite keep).
		sent := "v.sent = 1 AND {t}.STATUS = 'PENDING'"
		mine := "{t}.LEASE_OWNER = v.token"
		releaseOwnSent = `UPDATE {t} SET STATUS = CASE WHEN ` + sent + ` THEN 'SENT' ELSE {t}.STATUS END,
ATTEMPTS = CASE WHEN ` + sent + ` THEN {t}.ATTEMPTS + 1 ELSE {t}.ATTEMPTS END,
SENT_AT = CASE WHEN ` + sent + ` THEN v.at ELSE {t}.SENT_AT END,
UPDATED_AT = CASE WHEN ` + sent + ` THEN v.at ELSE {t}.UPDATED_AT END,
NEXT_AT = CASE WHEN ` + mine + ` THEN ` + nextOwn + ` ELSE {t}.NEXT_AT END,
LEASE_OWNER = CASE WHEN ` + mine + ` THEN NULL ELSE {t}.LEASE_OWNER END
FROM (@rows) v WHERE {t}.MESSAGE_ID = v.k AND (` + mine + ` OR v.sent = 1)`
	}
	names := strings.NewReplacer("{t}", table, "{k}", k)
	release, releaseOwn, releaseOwnSent = names.Replace(release), names.Replace(releaseOwn), names.Replace(releaseOwnSent)
	row := "SELECT ? AS k, " + cast(d, "?", "BIGINT") + " AS done, " + cast(d, "?", "TIMESTAMP") + " AS next, ? AS token"
	q.release = func(n int) string { return placeholdersFrom(d, release, "@rows", 1, n, 4, row) }
	q.releaseOwn = func(n int) string { return placeholdersFrom(d, releaseOwn, "@rows", 1, n, 4, row) }
	if releaseOwnSent != "" {
		rowSent := row + ", " + cast(d, "?", "INTEGER") + " AS sent, " + cast(d, "?", "TIMESTAMP") + " AS at"
		q.releaseOwnSent = func(n int) string { return placeholdersFrom(d, releaseOwnSent, "@rows", 1, n, 6, rowSent) }
	}
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
