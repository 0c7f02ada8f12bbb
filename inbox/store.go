package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/internal/hold"
)

// Config configures a Store. The zero value of every field means its default.
type Config struct {
	// Table is the inbox table name, validated as a plain identifier.
	// Defaults to INBOX_EVENT_PROCESSING.
	Table string
	// Retry is the retry and backout policy: the backout threshold
	// (Retry.MaxAttempts, default 5: after this many attempts that failed
	// technically, or that never came back, see Process, the message must
	// be dead-lettered), the redelivery backoff of the worker and of the
	// consumer runtime, and the runtime's in-process retries. Its defaults
	// are documented once, at inboxkit.RetryPolicy.
	Retry inboxkit.RetryPolicy
	// RedeliveryHorizon is how long after an event's terminal time the
	// broker may still deliver it again (broker retention, producer resend
	// windows, DLQ replays). Purge refuses a shorter window, because a row
	// deleted too early lets a late duplicate be processed twice.
	// Defaults to 7 days.
	RedeliveryHorizon time.Duration
	// MaxErrorLength truncates LAST_ERROR to this many bytes (at a rune
	// boundary). Defaults to 1000, the column width.
	MaxErrorLength int
	// Clock is where time comes from. Defaults to inboxkit.SystemClock.
	Clock inboxkit.Clock
	// ClassifyFunc tells the class and reason of a handler error (and of a
	// failed commit). Defaults to classify.Of: errors implementing
	// inboxkit.Decider (classify.Reject, Poison, Retry) decide; database
	// conditions get their reason code (DEADLOCK, LOCK_TIMEOUT, CONNECTION,
	// CONSTRAINT_VIOLATION, ...); other errors are technical without a
	// reason. Set it to adjust classify.Of's answer for errors it gets
	// wrong; the consumer's in-process retry uses it too.
	ClassifyFunc func(error) inboxkit.Decision
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	c.Retry = c.Retry.WithDefaults()
	if c.RedeliveryHorizon == 0 {
		c.RedeliveryHorizon = 7 * 24 * time.Hour
	}
	if c.MaxErrorLength == 0 {
		c.MaxErrorLength = 1000
	}
	if c.Clock == nil {
		c.Clock = inboxkit.SystemClock{}
	}
	if c.ClassifyFunc == nil {
		c.ClassifyFunc = classify.Of
	}
}

func (c *Config) validate() error {
	if err := ValidateTable(c.Table); err != nil {
		return fmt.Errorf("inbox: Config.Table: %w", err)
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("inbox: Config.Retry: %w", err)
	}
	if c.RedeliveryHorizon < 0 {
		return fmt.Errorf("inbox: Config.RedeliveryHorizon is negative (%s)", c.RedeliveryHorizon)
	}
	if c.MaxErrorLength < 0 || c.MaxErrorLength > 1000 {
		return fmt.Errorf("inbox: Config.MaxErrorLength is %d: it must be between 1 and 1000 (the LAST_ERROR column width)", c.MaxErrorLength)
	}
	return nil
}

// Store is the INBOX_EVENT_PROCESSING table of one database. It is safe for
// concurrent use by many goroutines and many processes: every transition is
// a primary-key INSERT or a conditional UPDATE, never a read followed by a
// write.
type Store struct {
	db  *sql.DB
	d   Dialect
	cfg Config
	q   queries
	qq  queueQueries // the store-then-process variant's statements

	forgot   *forgotten    // attempt markers to take back (see ForgetAttempt)
	attempts *attemptLog   // whether AttemptTable exists
	group    *receiveGroup // Worker.Receive's entries stored together (receivegroup.go)
	noAhead  *atomic.Bool  // set once the driver's connections are found not to be hold.Ahead (runAhead)
	// readsMet reports whether a first delivery alone whose INSERT
	// skipped the event's row reads it in the transaction (insertFirst):
	// where the dialect's INSERT skips rows, and not where the driver
	// holds statements (hold.Driver), which reads it with the rollback
	// in one round trip instead (readAfterRollback). Asked at
	// the first such delivery: a zero sql.DB has no driver to ask at New.
	readsMet func() bool
	ports    *Ports // nil: the caller publishes (see WithPorts)

	purgeWait func(context.Context, time.Duration) error // Purge's pause between batches; nil: a timer (tests replace it)

	missing map[string]bool // columns the table lacks, read as stand-ins (ForReading only)
}

// New returns a Store on db, which must be opened with the driver of d.
func New(db *sql.DB, d Dialect, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("inbox: New: db is nil")
	}
	if d.name == "" {
		return nil, errors.New("inbox: New: dialect is empty; use inbox.Postgres, inbox.MySQL, inbox.SQLite or inbox.Oracle")
	}
	if err := d.linked(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{db: db, d: d, cfg: cfg, q: buildQueries(d, cfg.Table), qq: buildQueueQueries(d, cfg.Table), forgot: &forgotten{}, attempts: &attemptLog{}, group: &receiveGroup{after: groupAfter}, noAhead: &atomic.Bool{},
		readsMet: sync.OnceValue(func() bool {
			_, holds := db.Driver().(hold.Driver)
			return d.doNothing != "" && !holds
		})}, nil
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

func (s *Store) now() time.Time { return s.cfg.Clock.Now().UTC() }

func (s *Store) t(t time.Time) any { return s.d.timeArg(t) }

// truncate fits an error text to LAST_ERROR: valid UTF-8 without NUL
// bytes (the text may quote a message's values, which must not keep the
// failure from being recorded), at most MaxErrorLength bytes.
func (s *Store) truncate(msg string) string {
	if !utf8.ValidString(msg) || strings.IndexByte(msg, 0) >= 0 {
		msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
	}
	return cut(msg, s.cfg.MaxErrorLength)
}

// cut shortens s to at most n bytes at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
