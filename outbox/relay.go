package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// PoisonPolicy says what a parked message does to the later messages of
// its key.
type PoisonPolicy string

// Poison policies.
const (
	// ParkKey: the key waits behind its parked message until an operator
	// retries or drops it (Store.Retry, Store.Drop); every other key goes
	// on. Per-key order holds without exception.
	ParkKey PoisonPolicy = "park-key"
	// SkipMessage: the key's later messages go on without it; a retried
	// parked message is sent after the key's messages written until then.
	SkipMessage PoisonPolicy = "skip"
)

// Outgoing is one outbox message as a send sees it.
type Outgoing struct {
	// ID is the message id, the same on every attempt.
	ID string
	// Key is Message.Key ("" for a message without one).
	Key         string
	Destination string
	// Headers are Message.Headers (without the relay's own: see
	// BrokerHeaders).
	Headers map[string]string
	Body    []byte
	// CauseEventID and CorrelationID are the ids recorded at Add.
	CauseEventID, CorrelationID string
	// CreatedAt is when Add wrote it.
	CreatedAt time.Time
	// Attempt is 1 on the first send attempt.
	Attempt int
}

// BrokerHeaders returns the headers a broker destination gets: Headers and
// eventId (the message id), correlationId, causationId, and the key in
// orderKey and JMSXGroupID; all but eventId only when set.
func (o Outgoing) BrokerHeaders() map[string]string {
	h := make(map[string]string, len(o.Headers)+4)
	for k, v := range o.Headers {
		h[k] = v
	}
	h[HeaderMessageID] = o.ID
	if o.CorrelationID != "" {
		h[HeaderCorrelationID] = o.CorrelationID
	}
	if o.CauseEventID != "" {
		h[HeaderCausationID] = o.CauseEventID
	}
	if o.Key != "" {
		h[HeaderKey] = o.Key
		h[HeaderGroup] = o.Key
	}
	return h
}

// RelayObserver watches a relay's sends (package observe implements it
// with Prometheus metrics). Its methods must not block for long; they are
// called from many goroutines.
type RelayObserver interface {
	// Sent reports a message its destination confirmed, with the time from
	// its write (Add) to the confirm.
	Sent(destination string, lag time.Duration)
	// Failed reports a send that failed and will be tried again.
	Failed(destination string, err error)
	// Parked reports a message parked with its last error.
	Parked(destination string, err error)
}

// RelayConfig configures a Relay. The zero value of every field means its
// default.
type RelayConfig struct {
	// Name names this relay in the key table's LEASE_OWNER (followed by a
	// random suffix). Defaults to "relay-<hostname>-<pid>".
	Name string
	// Broker publishes to every destination that is not an http(s):// URL
	// (a broker adapter: it returns nil only once the broker confirmed the
	// message). Without it such messages fail, and are parked after their
	// attempts, with an error naming this field.
	Broker dlq.Publisher
	// HTTPClient POSTs to http:// and https:// destinations. Defaults to a
	// client that follows no redirect; SendTimeout bounds each request.
	HTTPClient *http.Client
	// SendFunc, if set, sends every message in place of Broker and
	// HTTPClient (a shadow run records instead of sending). It must return
	// nil only once the destination confirmed the message.
	SendFunc func(ctx context.Context, m Outgoing) error
	// Retry is the retry policy of a failed send: the send is tried again
	// after Retry.Redelivery's jittered backoff (a Retry-After hint wins),
	// and after Retry.MaxAttempts attempts the message is parked. A send the
	// destination refused for good (a classify.Poison or classify.Reject
	// error, such as an HTTP 400) is parked at once. Defaults are those of
	// inboxkit.RetryPolicy.
	Retry inboxkit.RetryPolicy
	// OnPoison says what a parked message does to its key. Defaults to
	// ParkKey.
	OnPoison PoisonPolicy
	// Concurrency is the number of keys sent at once (one message of a key
	// at a time), and so the number of keys one claim takes at most. A
	// relay holds at most Concurrency x PerKey messages in memory. Defaults
	// to 32.
	Concurrency int
	// PerKey is the number of a key's messages sent per claim of the key.
	// Defaults to 50.
	PerKey int
	// Lease is how long a claim holds a key; another relay takes the key
	// after it (the lease's holder died). Defaults to 30s.
	Lease time.Duration
	// SendTimeout bounds one send. Defaults to 10s; at most a third of
	// Lease, so that no send of a key is in flight when its lease ends.
	SendTimeout time.Duration
	// PollInterval is how often an idle relay looks for messages to send.
	// Defaults to 250ms.
	PollInterval time.Duration
	// Wake, if set, wakes an idle relay at once: a PostgreSQL LISTEN on
	// Store.NotifyChannel (driver/postgres.Listen) delivers the
	// notifications that follow Adds there.
	Wake <-chan struct{}
	// BusyPollInterval is how often a relay looks for messages during the
	// 100ms after a wake-up or a claim that found some, so that it finds at
	// once the messages whose Add did not notify at its commit
	// (Config.NotifyInterval) and whose commit came after the notification
	// that covered them.
	// Defaults to 10ms.
	BusyPollInterval time.Duration
	// Observer, if set, watches every send.
	Observer RelayObserver
	// Logger logs failed sends and database errors. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (c *RelayConfig) setDefaults() {
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("relay-%s-%d", host, os.Getpid())
	}
	c.Retry = c.Retry.WithDefaults()
	if c.OnPoison == "" {
		c.OnPoison = ParkKey
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.PerKey == 0 {
		c.PerKey = 50
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = min(10*time.Second, c.Lease/3)
	}
	if c.PollInterval == 0 {
		c.PollInterval = 250 * time.Millisecond
	}
	if c.BusyPollInterval == 0 {
		c.BusyPollInterval = 10 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = noRedirects
	}
}

func (c *RelayConfig) validate() error {
	switch {
	case c.OnPoison != ParkKey && c.OnPoison != SkipMessage:
		return fmt.Errorf("outbox: RelayConfig.OnPoison %q is unknown: use %q (the key waits for an operator) or %q (the key goes on without the message)", c.OnPoison, ParkKey, SkipMessage)
	case c.Concurrency < 1:
		return fmt.Errorf("outbox: RelayConfig.Concurrency is %d: it must be at least 1", c.Concurrency)
	case c.PerKey < 1:
		return fmt.Errorf("outbox: RelayConfig.PerKey is %d: it must be at least 1", c.PerKey)
	case c.Lease <= 0 || c.SendTimeout <= 0 || c.PollInterval <= 0 || c.BusyPollInterval <= 0:
		return errors.New("outbox: RelayConfig.Lease, SendTimeout, PollInterval and BusyPollInterval must be positive")
	case c.SendTimeout*3 > c.Lease:
		return fmt.Errorf("outbox: RelayConfig.SendTimeout (%s) is more than a third of Lease (%s): a send could outlive the lease, and another relay send the key's next message before it", c.SendTimeout, c.Lease)
	case len(c.Name) > 80:
		return fmt.Errorf("outbox: RelayConfig.Name has %d bytes, at most 80", len(c.Name))
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("outbox: RelayConfig.Retry: %w", err)
	}
	return nil
}

// Relay sends the outbox's messages after their transactions committed,
// and marks each SENT once its destination confirmed it. Any number of
// relays (goroutines or processes) may run on one outbox: a key is held by
// one claim at a time (a lease in the key table), and its messages leave in
// sequence, each after the previous one was confirmed.
type Relay struct {
	s     *Store
	cfg   RelayConfig
	owner string
	n     atomic.Uint64 // claims made

	busyUntil time.Time // polls every BusyPollInterval until then (Run's goroutine only)

	mu      sync.Mutex
	dbErr   error // the last claim's error (nil: it worked)
	dbSince time.Time
	failing map[string]destFailure // by destination label: the last send failed
}

type destFailure struct {
	since time.Time
	err   error
}

// NewRelay returns a relay of the outbox s.
func NewRelay(s *Store, cfg RelayConfig) (*Relay, error) {
	if s == nil {
		return nil, errors.New("outbox: NewRelay: store is nil")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &Relay{s: s, cfg: cfg, owner: cut(cfg.Name, 80) + "-" + hex.EncodeToString(b), failing: map[string]destFailure{}}, nil
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.cfg }

// claimed is a key held by one claim, with the messages read after its
// DONE_SEQ.
type claimed struct {
	key string
	// own: the key is a keyless message's own row (see queries).
	own      bool
	token    string
	done     int64
	rows     []row
	leaseEnd time.Time
}

type row struct {
	Outgoing
	seq      int64
	status   Status
	attempts int
}

// settled is what a send round did to one key, written by record.
type settled struct {
	key, token string
	own        bool
	// sent are the ids of the messages confirmed.
	sent    []string
	done    int64
	failed  *row
	failErr string
	park    bool
	// next is NEXT_AT when messages remain after done (nil: NULL, the key
	// is parked).
	next *time.Time
}

// Run sends until ctx is done, then finishes the sends in hand (each
// bounded by SendTimeout), records them and returns nil. A database that
// cannot be reached is retried every PollInterval (Ready reports it);
// nothing is lost meanwhile.
func (r *Relay) Run(ctx context.Context) error {
	work := context.WithoutCancel(ctx)
	slots := make(chan struct{}, r.cfg.Concurrency)
	for i := 0; i < r.cfg.Concurrency; i++ {
		slots <- struct{}{}
	}
	more := make(chan struct{}, 1) // a released key has messages left
	// A key's send frees its slot once its result is queued for the
	// recorder (its lease keeps the key to this relay until recorded); a
	// full queue holds the slots, and so the claims, back.
	results := make(chan settled, 4*r.cfg.Concurrency)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		r.recorder(work, results, more)
	}()
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		select {
		case <-slots:
		case <-ctx.Done():
			continue
		}
		n := 1 + r.gather(slots, r.cfg.Concurrency-1)
		keys, err := r.claim(ctx, n)
		if ctx.Err() == nil {
			r.dbResult(err)
		}
		groups := slotGroups(keys)
		for i := len(groups); i < n; i++ {
			slots <- struct{}{}
		}
		if len(keys) > 0 {
			r.busyUntil = r.now().Add(busyWindow)
		}
		for _, g := range groups {
			wg.Add(1)
			go func(g []claimed) {
				defer wg.Done()
				// The keys of a group are keyless messages, ordered with
				// nothing: sent at once, their confirms awaited together.
				var sends sync.WaitGroup
				for _, k := range g {
					sends.Add(1)
					go func(k claimed) {
						defer sends.Done()
						results <- r.sendKey(work, ctx, k)
					}(k)
				}
				sends.Wait()
				slots <- struct{}{}
			}(g)
		}
		if len(groups) < n {
			r.idle(ctx, more)
		}
	}
	wg.Wait()
	close(results)
	<-recorded
	return nil
}

// KeylessPerSlot is how many keyless messages one of a relay's
// Concurrency slots sends at once: they are ordered with nothing, so a
// relay has up to Concurrency keys, or KeylessPerSlot x Concurrency
// keyless messages, in flight, and a claim takes up to that many.
const KeylessPerSlot = 4

// slotGroups puts claimed keys into the slots they take: a key of its
// own, keyless messages' own rows up to KeylessPerSlot together.
func slotGroups(keys []claimed) [][]claimed {
	var groups [][]claimed
	var own []claimed
	for _, k := range keys {
		if !k.own {
			groups = append(groups, []claimed{k})
			continue
		}
		own = append(own, k)
		if len(own) == KeylessPerSlot {
			groups, own = append(groups, own), nil
		}
	}
	if len(own) > 0 {
		groups = append(groups, own)
	}
	return groups
}

// slotsTaken is how many slots keys and own rows take.
func slotsTaken(keys, own int) int {
	return keys + (own+KeylessPerSlot-1)/KeylessPerSlot
}

// gather takes up to max more free slots: those free now, and while fewer
// than half of all are, those freed within claimWait, so that a busy relay
// claims keys by the dozen rather than one at a time.
func (r *Relay) gather(slots <-chan struct{}, most int) int {
	n := 0
	var timeout <-chan time.Time
	for n < most {
		select {
		case <-slots:
			n++
			continue
		default:
		}
		if n+1 >= r.cfg.Concurrency/2 {
			return n
		}
		if timeout == nil {
			t := time.NewTimer(claimWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-slots:
			n++
		case <-timeout:
			return n
		}
	}
	return n
}

// claimWait bounds how long a relay waits for more free slots before it
// claims keys for fewer than half of them.
const claimWait = 2 * time.Millisecond

// busyWindow is how long a relay polls every BusyPollInterval after a
// wake-up or a claim that found messages.
const busyWindow = 100 * time.Millisecond

// idle waits for a wake-up, a released key with messages left, the next
// poll (BusyPollInterval while busy), or the moment the next key is due (a
// backoff or a lease ends), whichever comes first.
func (r *Relay) idle(ctx context.Context, more <-chan struct{}) {
	wait := r.cfg.PollInterval
	if r.now().Before(r.busyUntil) {
		wait = min(wait, r.cfg.BusyPollInterval)
	}
	var next inbox.NullTime
	if err := r.s.db.QueryRowContext(ctx, r.s.q.nextDue).Scan(&next); err == nil && next.Valid {
		wait = min(wait, max(next.Time.Sub(r.now()), time.Millisecond))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.cfg.Wake:
		r.busyUntil = r.now().Add(busyWindow)
	case <-more:
	case <-t.C:
	}
}

func (r *Relay) now() time.Time { return r.s.now() }

// claim takes up to n due keys for one lease and reads their next
// messages.
func (r *Relay) claim(ctx context.Context, n int) ([]claimed, error) {
	s := r.s
	now := r.now()
	until := now.Add(r.cfg.Lease)
	token := fmt.Sprintf("%s-%d", r.owner, r.n.Add(1))
	c := &claimRows{token: token, leaseEnd: until, byKey: map[string]int{}}
	// Key rows and own rows (see queries) are claimed together, up to n in
	// all; every other claim takes own rows first, so that neither kind
	// waits while the other has more than n due.
	ownFirst := r.n.Load()%2 == 0
	switch s.d.Name() {
	case "postgres":
		q := s.q.claimRead[0]
		if ownFirst {
			q = s.q.claimRead[1]
		}
		if err := c.query(ctx, s.db, q, token, s.t(until), s.t(now), n, r.cfg.PerKey, KeylessPerSlot); err != nil {
			return nil, fmt.Errorf("outbox: claim keys: %w", err)
		}
		return c.keys, nil
	case "mysql":
		tx, err := s.db.BeginTx(ctx, s.d.LockingTx())
		if err != nil {
			return nil, fmt.Errorf("outbox: claim keys: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		kinds := [2]claimKind{
			{sel: s.q.claimSelect, update: s.q.claimUpdate, read: s.q.readRows, perKey: true},
			{sel: s.q.claimOwnSelect, update: s.q.claimOwnUpdate, read: s.q.readOwn},
		}
		if ownFirst {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, kind := range kinds {
			if c.slots() >= n {
				break
			}
			names, err := queryStrings(ctx, tx, kind.sel, s.t(now), kind.limit(n-c.slots()))
			if err != nil {
				return nil, fmt.Errorf("outbox: claim keys: %w", err)
			}
			if len(names) == 0 {
				continue
			}
			args := append([]any{token, s.t(until)}, anys(names)...)
			if _, err := tx.ExecContext(ctx, inList(kind.update, len(names)), args...); err != nil {
				return nil, fmt.Errorf("outbox: claim keys: %w", err)
			}
			if err := c.query(ctx, tx, inList(kind.read, len(names)), kind.readArgs(r.cfg.PerKey, names)...); err != nil {
				return nil, fmt.Errorf("outbox: read messages: %w", err)
			}
		}
		if len(c.keys) == 0 {
			return nil, nil
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("outbox: claim keys: commit: %w", err)
		}
		return c.keys, nil
	default: // sqlite
		kinds := [2]claimKind{{sel: s.q.claim, read: s.q.readRows, perKey: true}, {sel: s.q.claimOwn, read: s.q.readOwn}}
		if ownFirst {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, kind := range kinds {
			if c.slots() >= n {
				break
			}
			names, err := queryStrings(ctx, s.db, kind.sel, token, s.t(until), s.t(now), kind.limit(n-c.slots()))
			if err != nil {
				return c.keys, fmt.Errorf("outbox: claim keys: %w", err)
			}
			if len(names) == 0 {
				continue
			}
			if err := c.query(ctx, s.db, inList(kind.read, len(names)), kind.readArgs(r.cfg.PerKey, names)...); err != nil {
				return c.keys, fmt.Errorf("outbox: read messages: %w", err)
			}
		}
		return c.keys, nil
	}
}

// claimKind is how MySQL and SQLite claim one kind: key rows or own rows.
type claimKind struct {
	sel, update, read string
	perKey            bool // read takes PerKey before the names
}

// limit is how many keys of the kind fit in free slots.
func (k claimKind) limit(free int) int {
	if k.perKey {
		return free
	}
	return free * KeylessPerSlot
}

func (k claimKind) readArgs(perKey int, names []string) []any {
	if k.perKey {
		return append([]any{perKey}, anys(names)...)
	}
	return anys(names)
}

// claimRows collects the keys of one claim with their messages, from rows
// of the columns MSG_KEY, DONE_SEQ and rowCols (NULL for a key without
// messages after DONE_SEQ).
type claimRows struct {
	token    string
	leaseEnd time.Time
	keys     []claimed
	byKey    map[string]int
}

// slots is how many slots the keys claimed so far take.
func (c *claimRows) slots() int {
	own := 0
	for _, k := range c.keys {
		if k.own {
			own++
		}
	}
	return slotsTaken(len(c.keys)-own, own)
}

func (c *claimRows) query(ctx context.Context, q querier, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var own bool
		var key string
		var done int64
		var id, okey, dest, status sql.NullString
		var seq, attempts sql.NullInt64
		var headers, cause, corr sql.NullString
		var body []byte
		var created inbox.NullTime
		if err := rows.Scan(&own, &key, &done, &id, &okey, &seq, &dest, &headers, &body, &cause, &corr, &status, &attempts, &created); err != nil {
			return err
		}
		i, ok := c.byKey[key]
		if !ok {
			i = len(c.keys)
			c.byKey[key] = i
			c.keys = append(c.keys, claimed{key: key, own: own, token: c.token, done: done, leaseEnd: c.leaseEnd})
		}
		if !id.Valid {
			continue
		}
		h, err := decodeHeaders(headers)
		if err != nil {
			h = map[string]string{"inboxkit-outbox-bad-headers": headers.String}
		}
		m := row{seq: seq.Int64, status: Status(status.String), attempts: int(attempts.Int64)}
		m.ID, m.Destination, m.Headers, m.Body = id.String, dest.String, h, body
		if okey.String != id.String {
			m.Key = okey.String
		}
		m.CauseEventID, m.CorrelationID, m.CreatedAt = cause.String, corr.String, created.Time
		c.keys[i].rows = append(c.keys[i].rows, m)
	}
	return rows.Err()
}

// sendKey sends the claimed messages of one key in sequence, each after the
// previous one was confirmed, until one fails, the lease nears its end or
// stop is done, and returns what record must write.
func (r *Relay) sendKey(work, stop context.Context, k claimed) settled {
	st := settled{key: k.key, own: k.own, token: k.token, done: k.done}
	now := r.now()
	st.next = &now
	if len(k.rows) == 0 {
		// Woken with nothing after DONE_SEQ (an operator's retry or drop
		// behind it): released idle. Should messages exist that were not
		// read, the key comes back after a lease rather than at once.
		later := now.Add(r.cfg.Lease)
		st.next = &later
		return st
	}
	for i := range k.rows {
		m := &k.rows[i]
		switch m.status {
		case StatusSent, StatusDropped:
			st.done = m.seq // settled by a relay that died before releasing, or by an operator
			continue
		case StatusParked:
			if r.cfg.OnPoison == SkipMessage {
				st.done = m.seq
				continue
			}
			st.next = nil
			return st
		}
		if stop.Err() != nil || r.now().Add(r.cfg.SendTimeout+r.cfg.Lease/10).After(k.leaseEnd) {
			break
		}
		m.Attempt = m.attempts + 1
		err := r.send(work, m.Outgoing)
		if err == nil {
			failpoint.Hit(failpoint.AfterSendBeforeMark)
			st.sent = append(st.sent, m.ID)
			st.done = m.seq
			r.sendResult(m.Destination, nil)
			if r.cfg.Observer != nil {
				r.cfg.Observer.Sent(m.Destination, r.now().Sub(m.CreatedAt))
			}
			continue
		}
		dec := classify.Of(err)
		permanent := dec.Class == inboxkit.ClassPoison || dec.Class == inboxkit.ClassBusiness
		st.failed, st.failErr = m, cut(err.Error(), maxErrorLength)
		st.park = permanent || (!dec.NoAttempt && m.Attempt >= r.cfg.Retry.MaxAttempts)
		if !permanent {
			r.sendResult(m.Destination, err) // it did not answer, or not with a verdict on the message
		}
		switch {
		case st.park && r.cfg.OnPoison == ParkKey:
			st.next = nil
		case st.park:
			st.done = m.seq // skipped: the key goes on
		default:
			delay := dec.RetryAfter
			if delay <= 0 {
				delay = r.cfg.Retry.RedeliveryDelay(m.Attempt)
			}
			at := r.now().Add(delay)
			st.next = &at
		}
		if r.cfg.Observer != nil {
			if st.park {
				r.cfg.Observer.Parked(m.Destination, err)
			} else {
				r.cfg.Observer.Failed(m.Destination, err)
			}
		}
		lvl := slog.LevelWarn
		if st.park {
			lvl = slog.LevelError
		}
		r.cfg.Logger.Log(work, lvl, "outbox send failed", "relay", r.owner, "message_id", m.ID, "key", m.Key,
			"event_id", m.CauseEventID, "correlation_id", m.CorrelationID,
			"destination", DestinationLabel(m.Destination), "attempt", m.Attempt, "parked", st.park, "error", err.Error())
		return st
	}
	return st
}

// send sends one message with a deadline.
func (r *Relay) send(ctx context.Context, m Outgoing) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	defer cancel()
	if r.cfg.SendFunc != nil {
		return r.cfg.SendFunc(ctx, m)
	}
	return Send(ctx, m, r.cfg.Broker, r.cfg.HTTPClient)
}

// Send sends m the way a relay without RelayConfig.SendFunc does: an
// http:// or https:// destination is POSTed with client (nil: a client
// that follows no redirect), with the answers read as the package
// documentation says; anything else is published to the queue of that name
// through broker, with m.BrokerHeaders(). It returns nil only once the
// destination confirmed m. A SendFunc that handles some destinations itself
// sends the others with Send.
func Send(ctx context.Context, m Outgoing, broker dlq.Publisher, client *http.Client) error {
	switch {
	case IsHTTP(m.Destination):
		if client == nil {
			client = noRedirects
		}
		return postHTTP(ctx, client, m)
	case broker == nil:
		return fmt.Errorf("outbox: no broker to send to queue %s: set RelayConfig.Broker (inboxctl relay --broker URL)", m.Destination)
	}
	return broker.Publish(ctx, m.Destination, m.BrokerHeaders(), m.Body)
}

// noRedirects is the default HTTP client: it follows no redirect (a
// redirect parks the message, see postHTTP).
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Drained is what one Drain did.
type Drained struct {
	// Sent, Failed and Parked count the messages confirmed, failed (to be
	// tried again after their backoff) and parked.
	Sent, Failed, Parked int
	// NextDue is when the next key is due (a failed send's backoff ends,
	// a lease ends); zero when no key is due at any time (nothing pending,
	// or only parked keys).
	NextDue time.Time
}

// Drain sends what is due now and returns once no key is due, in the
// calling goroutine: it claims the due keys (up to Concurrency at a time),
// sends their messages one key after another in key order, records them,
// and claims again. It is Run without the waiting, for a program that
// decides itself when to send (a test, a scripted run such as package
// golden's, a one-shot job): the same claims, leases, order and records, so
// it may run beside relays that Run. A send that panics leaves its keys
// claimed until their lease ends, as a relay that died does.
func (r *Relay) Drain(ctx context.Context) (Drained, error) {
	var d Drained
	for ctx.Err() == nil {
		keys, err := r.claim(ctx, r.cfg.Concurrency)
		r.dbResult(err)
		if err != nil {
			return d, err
		}
		if len(keys) == 0 {
			break
		}
		batch := make([]settled, 0, len(keys))
		for _, k := range keys {
			st := r.sendKey(ctx, ctx, k)
			d.Sent += len(st.sent)
			switch {
			case st.failed != nil && st.park:
				d.Parked++
			case st.failed != nil:
				d.Failed++
			}
			batch = append(batch, st)
		}
		if err := r.record(ctx, batch); err != nil {
			r.dbResult(err)
			return d, err
		}
	}
	var next inbox.NullTime
	if err := r.s.db.QueryRowContext(ctx, r.s.q.nextDue).Scan(&next); err != nil {
		return d, fmt.Errorf("outbox: next due key: %w", err)
	}
	if next.Valid {
		d.NextDue = next.Time
	}
	return d, ctx.Err()
}

// recorder writes the settled keys in batches, one transaction per batch,
// and says when a key has messages left.
func (r *Relay) recorder(ctx context.Context, in <-chan settled, more chan<- struct{}) {
	for first := range in {
		batch := []settled{first}
	fill:
		for len(batch) < 256 {
			select {
			case s, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, s)
			default:
				break fill
			}
		}
		r.recordRetrying(ctx, batch)
		left := false
		for _, s := range batch {
			left = left || s.next != nil
		}
		if left {
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}
}

// recordRetrying records a batch, trying again while the database fails,
// until the batch's leases would have ended: after that another relay has
// taken the keys and sends their messages again (at least once).
func (r *Relay) recordRetrying(ctx context.Context, batch []settled) {
	deadline := r.now().Add(r.cfg.Lease)
	for try := 1; ; try++ {
		err := r.record(ctx, batch)
		if err == nil {
			return
		}
		r.dbResult(err)
		if r.now().After(deadline) {
			r.cfg.Logger.Error("outbox relay: could not record sends; their keys' leases end and the messages are sent again", "relay", r.owner, "keys", len(batch), "error", err.Error())
			return
		}
		time.Sleep(r.cfg.Retry.RedeliveryDelay(try))
	}
}

// record writes one batch in one transaction: confirmed messages SENT, a
// failed one's attempt (PARKED after the last), and each key released with
// its progress; a few statements for the whole batch. A batch that needs
// one statement (keyless messages confirmed, where releaseOwnSent marks
// and releases them at once) runs it without BEGIN and COMMIT: one
// statement is atomic by itself.
func (r *Relay) record(ctx context.Context, batch []settled) error {
	s := r.s
	sort.Slice(batch, func(i, j int) bool { return batch[i].key < batch[j].key })
	now := s.t(r.now())
	var stmts []recordStmt
	var sent []string
	for _, st := range batch {
		if !st.own || s.q.releaseOwnSent == nil {
			sent = append(sent, st.sent...)
		}
	}
	for len(sent) > 0 {
		n := min(len(sent), maxInList)
		stmts = append(stmts, recordStmt{"mark sent", s.q.markSent(n), append([]any{now, now}, anys(sent[:n])...)})
		sent = sent[n:]
	}
	for _, st := range batch {
		if st.failed == nil {
			continue
		}
		status := StatusPending
		if st.park {
			status = StatusParked
		}
		stmts = append(stmts, recordStmt{"record failed send", s.q.markFail, []any{string(status), st.failErr, now, st.failed.ID}})
	}
	var keys, owns []settled
	for _, st := range batch {
		if st.own {
			owns = append(owns, st)
		} else {
			keys = append(keys, st)
		}
	}
	release := func(rest []settled, sql func(int) string, per int, row func(settled) []any) {
		for len(rest) > 0 {
			n := min(len(rest), maxInList/per)
			args := make([]any, 0, per*n)
			for _, st := range rest[:n] {
				args = append(args, row(st)...)
			}
			stmts = append(stmts, recordStmt{"release keys", sql(n), args})
			rest = rest[n:]
		}
	}
	keyRow := func(st settled) []any {
		var next any
		if st.next != nil {
			next = s.t(*st.next)
		}
		return []any{st.key, st.done, next, st.token}
	}
	release(keys, s.q.release, 4, keyRow)
	if s.q.releaseOwnSent != nil {
		release(owns, s.q.releaseOwnSent, 6, func(st settled) []any {
			sent := 0
			if len(st.sent) > 0 {
				sent = 1
			}
			return append(keyRow(st), sent, now)
		})
	} else {
		release(owns, s.q.releaseOwn, 4, keyRow)
	}
	if len(stmts) == 1 {
		if _, err := s.db.ExecContext(ctx, stmts[0].sql, stmts[0].args...); err != nil {
			return fmt.Errorf("outbox: %s: %w", stmts[0].what, err)
		}
		return nil
	}
	tx, err := s.db.BeginTx(ctx, s.d.LockingTx())
	if err != nil {
		return fmt.Errorf("outbox: record sends: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("outbox: %s: %w", st.what, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: record sends: commit: %w", err)
	}
	return nil
}

// recordStmt is one statement of record.
type recordStmt struct {
	what string
	sql  string
	args []any
}

// dbResult follows the database's state from the relay's statements and
// logs an outage once when it starts and once when it ends.
func (r *Relay) dbResult(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil && r.dbErr != nil:
		r.cfg.Logger.Info("outbox relay: database reachable again", "relay", r.owner, "down_for", r.now().Sub(r.dbSince).Round(time.Millisecond).String())
		r.dbErr = nil
	case err != nil && r.dbErr == nil:
		r.cfg.Logger.Warn("outbox relay: database unreachable; trying again every poll", "relay", r.owner, "error", err.Error())
		r.dbErr, r.dbSince = err, r.now()
	case err != nil:
		r.dbErr = err
	}
}

func (r *Relay) sendResult(destination string, err error) {
	label := DestinationLabel(destination)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.failing, label)
		return
	}
	f, ok := r.failing[label]
	if !ok {
		f.since = r.now()
	}
	f.err = err
	r.failing[label] = f
}

// Ready returns nil while no destination failed the relay since its last
// confirmed send there, and otherwise an error naming each such
// destination, since when, and the last error (a readiness check: a
// destination counts as reachable again with its next confirm, which the
// next message to it, or an operator's retry of a parked one, brings). A
// message its destination refused for good does not count: the destination
// answered. The database is not part of it (the database's own check
// reports it). It does not block.
func (r *Relay) Ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []string
	labels := make([]string, 0, len(r.failing))
	for l := range r.failing {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		f := r.failing[l]
		msgs = append(msgs, fmt.Sprintf("cannot send to %s since %s: %v", l, f.since.Format(time.RFC3339), f.err))
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New("outbox relay: " + strings.Join(msgs, "; "))
}

// DestinationLabel is a destination as metrics and logs name it: a queue
// as it is, a URL as scheme://host (its path may hold ids, which would
// make a metric label per message).
func DestinationLabel(destination string) string {
	if !IsHTTP(destination) {
		return destination
	}
	i := strings.Index(destination, "://") + 3
	if j := strings.IndexAny(destination[i:], "/?#"); j >= 0 {
		return destination[:i+j]
	}
	return destination
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
