package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// DefaultTable is the outbox table's name; its key table is DefaultTable + "_KEY".
const DefaultTable = "INBOXKIT_OUTBOX"

// MaxTableLength bounds Config.Table: the key table and the index names
// append up to 9 characters, and Oracle's identifiers end at 30.
const MaxTableLength = 20

// Column widths, checked by Add.
const (
	MaxIDLength          = 120 // MESSAGE_ID: a receiver stores it as its EVENT_ID (120)
	MaxKeyLength         = 200 // MSG_KEY
	MaxDestinationLength = 500 // DESTINATION
	maxErrorLength       = 1000
)

// The headers every message is sent with (besides its own), which Add
// therefore refuses in Message.Headers. An inboxkit consumer reads the event
// id from HeaderMessageID and the correlation id from HeaderCorrelationID
// by default, so it deduplicates resends and keeps the case together
// without configuration.
const (
	// HeaderMessageID carries the message id (the receiver's event id).
	HeaderMessageID = "eventId"
	// HeaderCorrelationID carries the correlation id, when there is one.
	HeaderCorrelationID = "correlationId"
	// HeaderCausationID carries the event id of the message whose handling
	// wrote this one, when there is one.
	HeaderCausationID = "causationId"
	// HeaderKey carries Message.Key to a broker, for a receiver that orders
	// by key (its order key header:orderKey). It is not set for a message
	// without a key.
	HeaderKey = "orderKey"
	// HeaderGroup carries Message.Key too: the JMS message group header, by
	// which ActiveMQ pins a key to one consumer (ActiveMQ keeps it and does
	// not hand it on to a STOMP receiver; other brokers do).
	HeaderGroup = "JMSXGroupID"
	// HeaderIdempotencyKey carries the message id to an HTTP destination.
	HeaderIdempotencyKey = "Idempotency-Key"
)

var reservedHeaders = []string{HeaderMessageID, HeaderCorrelationID, HeaderCausationID, HeaderKey, HeaderGroup, HeaderIdempotencyKey}

// Status is the state of an outbox row.
type Status string

// Statuses of an outbox row.
const (
	// StatusPending: written, not yet confirmed by its destination.
	StatusPending Status = "PENDING"
	// StatusSent: the destination confirmed it. Purged after a horizon.
	StatusSent Status = "SENT"
	// StatusParked: its attempts are used up, or its destination refused
	// it for good; LAST_ERROR says why. It waits for an operator (retry or
	// drop); with PoisonParkKey the later messages of its key wait too.
	StatusParked Status = "PARKED"
	// StatusDropped: an operator dropped it; it is never sent. Purged
	// like SENT rows.
	StatusDropped Status = "DROPPED"
)

// Message is what a transaction asks to be sent after it commits.
type Message struct {
	// ID is the message id, fixed at Add for every send attempt: the
	// eventId header a receiver deduplicates by, and an HTTP destination's
	// Idempotency-Key. Defaults to a new UUID (version 7). Set it to a
	// business id (a letter id) when the receiver knows that id already;
	// it must be unique in the outbox (at most 120 bytes).
	ID string
	// Destination is where it goes: an http:// or https:// URL is POSTed
	// to; anything else is a queue (a subject on JetStream) of the relay's
	// broker. Required, at most 500 bytes.
	Destination string
	// Key orders messages: the messages of one key leave in the order of
	// their transactions' commits, one at a time. "" means no order with
	// any other message. At most 200 bytes. Transactions that add messages
	// of the same key take turns at Add (they wait for each other's commit),
	// so a transaction that adds messages of several keys should add them
	// in a consistent key order.
	Key string
	// Headers are sent with the message (as broker headers, or HTTP
	// headers); the names of the package's Header constants are reserved.
	Headers map[string]string
	// Body is sent unchanged.
	Body []byte
	// CauseEventID is the event id of the message whose handling wrote
	// this one, sent as the causationId header. Defaults to the id of the
	// message in ctx (inboxkit.MessageFromContext), which the consumer
	// runtime puts there for its handler.
	CauseEventID string
	// CorrelationID is sent as the correlationId header. Defaults to the
	// correlation id of the message in ctx.
	CorrelationID string
}

// Config configures a Store. The zero value of every field means its
// default.
type Config struct {
	// Table is the outbox table; its key table is Table + "_KEY". A plain
	// identifier of at most 20 characters. Defaults to INBOXKIT_OUTBOX.
	Table string
	// Clock is where time comes from (CREATED_AT, leases, backoff).
	// Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
	// NoNotify turns off, on PostgreSQL, the NOTIFY that follows Add to
	// wake the relays at once (channel NotifyChannel); the relays then find
	// new rows by polling. Other databases always poll.
	NoNotify bool
	// NotifyInterval is how often at most this Store notifies after an
	// Add. The first Add after a quiet NotifyInterval notifies at the
	// commit of the caller's transaction (its INSERT's RETURNING
	// pg_notify: no statement of its own), so a relay that listens wakes
	// when the message can be read. The Adds within an interval of a
	// notification share one trailing notification at that interval's end,
	// a statement of its own on the store's pool, not part of any caller's
	// transaction: a PostgreSQL commit that notifies holds a database-wide
	// lock through its WAL flush, so writers that each notified would queue
	// for one another, while one notifying commit an interval queues for
	// nobody. So every Add is followed by a notification within
	// NotifyInterval + 2ms, and a steady stream of Adds costs about two
	// notifications per NotifyInterval. A trailing notification may come
	// before the commit of an Add it covers: a woken relay keeps looking
	// every few milliseconds for a while (RelayConfig.BusyPollInterval),
	// which finds the messages whose transactions commit within that
	// while; one whose transaction runs on for longer is found at the
	// relay's next poll (RelayConfig.PollInterval). Defaults to 50ms.
	NotifyInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Clock == nil {
		c.Clock = inboxkit.SystemClock{}
	}
	if c.NotifyInterval == 0 {
		c.NotifyInterval = 50 * time.Millisecond
	}
}

// ValidateTable checks an outbox table name: a plain identifier (see
// inbox.ValidateTable) of at most MaxTableLength characters.
func ValidateTable(table string) error {
	if err := inbox.ValidateTable(table); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if len(table) > MaxTableLength {
		return fmt.Errorf("outbox: table name %q has %d characters: at most %d fit (the key table and the index names append up to 9, and Oracle stops at 30)", table, len(table), MaxTableLength)
	}
	return nil
}

// Store is the outbox table of one database: Add writes to it inside a
// transaction, a Relay sends what it holds, and the operator's functions
// (List, Retry, Drop, Purge, Stats) read and repair it. It is safe for
// concurrent use by many goroutines and many processes.
type Store struct {
	db  *sql.DB
	d   inbox.Dialect
	cfg Config
	q   queries

	lastNotify atomic.Int64 // when the last notification was sent or scheduled (UnixNano)
	trailing   atomic.Bool  // a trailing notification is scheduled
}

// ErrUnsupportedDialect is returned by New for a dialect whose outbox
// exists only as DDL text (Oracle: schema/outbox_oracle.sql).
var ErrUnsupportedDialect = errors.New("outbox: dialect not supported")

// New returns the Store of the outbox table on db, which is opened with
// the driver of d. PostgreSQL, MySQL/MariaDB and SQLite are supported; for
// Oracle the DDL is in package schema, untested, and New refuses it.
func New(db *sql.DB, d inbox.Dialect, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("outbox: New: db is nil")
	}
	switch d.Name() {
	case "postgres", "mysql", "sqlite":
	case "":
		return nil, errors.New("outbox: New: dialect is empty; use inbox.Postgres, inbox.MySQL or inbox.SQLite")
	default:
		return nil, fmt.Errorf("%w: %s (the outbox runs on postgres, mysql and sqlite; schema/outbox_%s.sql is its DDL as text, untested)", ErrUnsupportedDialect, d.Name(), d.Name())
	}
	cfg.setDefaults()
	if err := ValidateTable(cfg.Table); err != nil {
		return nil, fmt.Errorf("outbox: Config.Table: %w", err)
	}
	return &Store{db: db, d: d, cfg: cfg, q: buildQueries(d, cfg.Table, !cfg.NoNotify)}, nil
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect returns the store's dialect.
func (s *Store) Dialect() inbox.Dialect { return s.d }

// Table returns the outbox table's name.
func (s *Store) Table() string { return s.cfg.Table }

// KeyTable returns the key table's name (Table + "_KEY").
func (s *Store) KeyTable() string { return keyTable(s.cfg.Table) }

// NotifyChannel is the PostgreSQL channel notified after Adds (unless
// Config.NoNotify; see Config.NotifyInterval): a relay listening to it (LISTEN, see
// driver/postgres.Listen) wakes at once instead of at its next poll.
func (s *Store) NotifyChannel() string { return notifyChannel(s.cfg.Table) }

func notifyChannel(table string) string { return strings.ToLower(table) }

func keyTable(table string) string { return table + "_KEY" }

func (s *Store) now() time.Time { return s.cfg.Clock.Now().UTC() }

func (s *Store) t(t time.Time) any { return s.d.BindTime(t) }

// ErrInvalidMessage is wrapped by Add's errors about a message it refuses.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// Add writes m to the outbox inside tx and returns its message id. The row
// commits with tx or not at all: a rollback leaves no row and sends
// nothing. After the commit a Relay sends it, at least once, always with
// this id. Add waits while another open transaction holds a message of the
// same key (until that one commits or rolls back), which is what puts the
// messages of a key in commit order.
//
// On a pool opened with driver/postgres's DriverName ("inboxkit-pgx", what
// inboxctl uses) the INSERT is held and sent in one round trip with the
// transaction's next statement or its COMMIT: the row is the same and the
// transaction's later statements see it, but an error the INSERT meets (a
// Message.ID written before) is returned by that statement or by Commit,
// prefixed "outbox: add message ID to DESTINATION", and the wait for a
// key's earlier transaction happens there too. Add then returns only the
// errors it finds before the database: a nil tx, an invalid message.
func (s *Store) Add(ctx context.Context, tx *sql.Tx, m Message) (string, error) {
	if tx == nil {
		return "", errors.New("outbox: Add: tx is nil: Add writes inside the caller's transaction")
	}
	if cause, ok := inboxkit.MessageFromContext(ctx); ok {
		if m.CauseEventID == "" {
			m.CauseEventID = cause.ID
		}
		if m.CorrelationID == "" {
			m.CorrelationID = cause.CorrelationID
		}
	}
	if m.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("outbox: Add: new message id: %w", err)
		}
		m.ID = id.String()
	}
	if err := m.validate(); err != nil {
		return "", err
	}
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return "", err
	}
	key := m.Key
	if key == "" {
		key = m.ID // a key of its own: ordered with nothing else
	}
	now := s.t(s.now())
	args := addArgs{key: key, now: now, id: m.ID, destination: m.Destination, headers: headers, body: m.Body,
		cause: nullString(cut(m.CauseEventID, MaxIDLength)), correlation: nullString(cut(m.CorrelationID, MaxIDLength))}
	atCommit := s.notifyAtCommit()
	add := s.q.add
	switch {
	case m.Key == "" && atCommit:
		add = s.q.addOwnNotify
	case m.Key == "":
		add = s.q.addOwn
	case atCommit:
		add = s.q.addNotify
	}
	// The INSERTs may wait for the transaction's next statement or its
	// COMMIT and go in one round trip with it, where the driver holds
	// (driver/postgres's DriverName); their error then comes from there.
	what := fmt.Sprintf("outbox: add message %s to %s", m.ID, m.Destination)
	hctx := hold.Until(ctx, what)
	for _, st := range add {
		if _, err := tx.ExecContext(hctx, st.sql, st.args(args)...); err != nil {
			return "", fmt.Errorf("outbox: add message %s to %s: %w", m.ID, m.Destination, err)
		}
	}
	if !atCommit {
		s.notifyLater()
	}
	return m.ID, nil
}

// notifyAtCommit reports whether this Add notifies the relays (a NOTIFY
// on NotifyChannel) at the commit of the caller's transaction: the first
// Add after a quiet NotifyInterval does. The other Adds of an interval are
// covered by one trailing notification at its end (notifyLater), a
// statement of its own on the store's pool: a PostgreSQL commit that
// notifies takes a database-wide lock through its WAL flush, so writers
// that each notified would queue for one another; the writers' own
// commits, notifying nothing, take no such lock, and one notifying commit
// an interval queues for nobody.
func (s *Store) notifyAtCommit() bool {
	if s.q.addNotify == nil {
		return false
	}
	now := time.Now().UnixNano()
	last := s.lastNotify.Load()
	return now-last >= int64(s.cfg.NotifyInterval) && s.lastNotify.CompareAndSwap(last, now)
}

// notifyLater schedules the trailing notification of the interval of the
// last notification, unless one is scheduled, so that no Add waits more
// than NotifyInterval + notifyDelay for a notification. That notification
// may arrive before the Add's commit: a woken relay keeps looking every
// BusyPollInterval for a while and finds the message then. A notification
// that fails is dropped (the relays poll).
func (s *Store) notifyLater() {
	if s.q.notifyAlone == "" || !s.trailing.CompareAndSwap(false, true) {
		return // none, or the scheduled one comes after this Add
	}
	now := time.Now().UnixNano()
	wait := max(time.Duration(s.lastNotify.Load()+int64(s.cfg.NotifyInterval)-now), notifyDelay)
	time.AfterFunc(wait, func() {
		// Cleared first: an Add from here on schedules a notification
		// of its own (or is covered by the one sent below).
		s.trailing.Store(false)
		s.lastNotify.Store(time.Now().UnixNano())
		s.notifyNow()
	})
}

func (s *Store) notifyNow() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = s.db.ExecContext(ctx, s.q.notifyAlone)
}

// notifyDelay is the least wait for a trailing notification: most Adds'
// transactions commit within it, so that the relay, once woken, finds the
// message at its first look.
const notifyDelay = 2 * time.Millisecond

func (m Message) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidMessage}, args...)...)
	}
	switch {
	case m.Destination == "":
		return bad("Destination is empty: name a queue (or subject) of the relay's broker, or an http(s):// URL")
	case len(m.Destination) > MaxDestinationLength:
		return bad("Destination has %d bytes, at most %d fit", len(m.Destination), MaxDestinationLength)
	case len(m.ID) > MaxIDLength:
		return bad("ID has %d bytes, at most %d fit (a receiver's EVENT_ID is as wide)", len(m.ID), MaxIDLength)
	case len(m.Key) > MaxKeyLength:
		return bad("Key has %d bytes, at most %d fit", len(m.Key), MaxKeyLength)
	}
	for _, h := range reservedHeaders {
		for k := range m.Headers {
			if strings.EqualFold(k, h) {
				return bad("header %q is set by the relay (the message id, correlation, causation and key travel in eventId, correlationId, causationId, orderKey and JMSXGroupID): use the Message fields", k)
			}
		}
	}
	if IsHTTP(m.Destination) {
		u, err := url.Parse(m.Destination)
		if err != nil || u.Host == "" {
			return bad("Destination %q is not a valid URL (%v)", m.Destination, err)
		}
		for k, v := range m.Headers {
			if !validHeaderName(k) || strings.ContainsAny(v, "\r\n") {
				return bad("header %q cannot be sent to an HTTP destination (a name is a token; a value has no line break)", k)
			}
		}
	}
	return nil
}

// IsHTTP reports whether a destination is an HTTP endpoint (http:// or
// https://) rather than a broker queue.
func IsHTTP(destination string) bool {
	d := strings.ToLower(destination)
	return strings.HasPrefix(d, "http://") || strings.HasPrefix(d, "https://")
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r > 126 || r <= 32 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return http.CanonicalHeaderKey(name) != ""
}

func encodeHeaders(h map[string]string) (sql.NullString, error) {
	if len(h) == 0 {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("outbox: encode headers: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

func decodeHeaders(s sql.NullString) (map[string]string, error) {
	if !s.Valid || s.String == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s.String), &h); err != nil {
		return nil, fmt.Errorf("outbox: headers are not a JSON object of strings: %w", err)
	}
	return h, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// cut shortens s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
