package golden

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	_ "github.com/inboxkit/inboxkit/driver/mysql"  // driver "mysql" and its errors
	"github.com/inboxkit/inboxkit/driver/postgres" // drivers "pgx" and postgres.DriverName
	"github.com/inboxkit/inboxkit/inbox"
)

// File names inside a case directory.
const (
	ScenarioFile = "scenario"
)

// Backend names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	// MySQL is MariaDB or MySQL.
	MySQL = "mysql"
)

// Updating reports whether approved files are to be written: the -update
// test flag (defined by package goldentest in test binaries) or
// INBOXKIT_UPDATE_GOLDEN=1, and not in CI.
func Updating() bool {
	if InCI() {
		return false
	}
	if v := os.Getenv("INBOXKIT_UPDATE_GOLDEN"); v != "" && v != "0" && v != "false" {
		return true
	}
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// InCI reports whether CI is set (CI=true, as CI systems set it): approved
// files are then never written, and a missing one is a failure.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "0" && v != "false"
}

// ApprovedFile and ReceivedFile name the files of a label: approved.txt
// and received.txt without label, approved.<label>.txt and
// received.<label>.txt with one.
func ApprovedFile(label string) string { return withLabel("approved", label) }

// ReceivedFile: see ApprovedFile.
func ReceivedFile(label string) string { return withLabel("received", label) }

func withLabel(base, label string) string {
	if label == "" {
		return base + ".txt"
	}
	return base + "." + label + ".txt"
}

type options struct {
	label    string
	backends []string
	only     []string
	batch    int
}

// Option configures Verify, Approve, CheckCase and their black-box
// variants (and goldentest.Run).
type Option func(*options)

// Label sets the label of the approved and received files, so that one case
// directory holds approved transcripts of several consumers (for example
// "legacy" and "refactored").
func Label(label string) Option { return func(o *options) { o.label = label } }

// BatchSize plays every case with a consumer of this
// consumer.Config.BatchSize (see Scenario.BatchSize), against the same
// approved files: batching must change no transcript.
func BatchSize(n int) Option { return func(o *options) { o.batch = n } }

// Only restricts Run, Verify and Approve (and their black-box variants) to
// the cases with these directory names.
func Only(names ...string) Option { return func(o *options) { o.only = append(o.only, names...) } }

// SelectCases lists the case directories of dir (or dir itself, when it
// is a case) that the options select (see Only).
func SelectCases(dir string, opts ...Option) ([]string, error) {
	return buildOptions(opts).cases(dir)
}

// cases lists the case directories of dir that o selects.
func (o options) cases(dir string) ([]string, error) {
	all, err := Cases(dir)
	if err != nil || len(o.only) == 0 {
		return all, err
	}
	var out []string
	for _, c := range all {
		if slices.Contains(o.only, filepath.Base(c)) {
			out = append(out, c)
		}
	}
	if len(out) != len(o.only) {
		return nil, fmt.Errorf("golden: %d of the cases %v are not under %s", len(o.only)-len(out), o.only, dir)
	}
	return out, nil
}

// Backends sets the databases every case runs on. Defaults to
// INBOXKIT_GOLDEN_BACKENDS (comma-separated), else sqlite, postgres and
// mysql in CI, else sqlite. Every backend must produce the same transcript.
func Backends(names ...string) Option { return func(o *options) { o.backends = names } }

func buildOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if len(o.backends) == 0 {
		switch {
		case os.Getenv("INBOXKIT_GOLDEN_BACKENDS") != "":
			for _, b := range strings.Split(os.Getenv("INBOXKIT_GOLDEN_BACKENDS"), ",") {
				if b = strings.TrimSpace(b); b != "" {
					o.backends = append(o.backends, b)
				}
			}
		case InCI():
			o.backends = []string{SQLite, Postgres, MySQL}
		default:
			o.backends = []string{SQLite}
		}
	}
	return o
}

// Cases returns the case directories of dir: dir itself when it holds a
// scenario file, else its subdirectories that do, sorted.
func Cases(dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, ScenarioFile)); err == nil {
		return []string{dir}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("golden: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), ScenarioFile)); err == nil {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("golden: no case in %s (a case is a directory with a %q file)", dir, ScenarioFile)
	}
	return out, nil
}

// ReadScenario parses the scenario file of a case directory.
func ReadScenario(caseDir string) (*Scenario, error) {
	data, err := os.ReadFile(filepath.Join(caseDir, ScenarioFile))
	if err != nil {
		return nil, fmt.Errorf("golden: %w", err)
	}
	sc, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(caseDir, ScenarioFile), err)
	}
	return sc, nil
}

// Mismatch is a case whose received transcript differs from the approved one.
type Mismatch struct {
	// Case is the case directory; Backend the database that produced Received.
	Case, Backend string
	// Approved and Received are the file paths.
	Approved, Received string
	// Missing is true when there is no approved file yet.
	Missing bool
	// Diff is the unified diff from approved to received.
	Diff string
}

func (m Mismatch) String() string {
	if m.Missing {
		return fmt.Sprintf("%s: no approved file %s; received (%s) written to %s", m.Case, m.Approved, m.Backend, m.Received)
	}
	return fmt.Sprintf("%s: received (%s) differs from %s; written to %s\n%s", m.Case, m.Backend, m.Approved, m.Received, m.Diff)
}

// PlayCase runs one case directory on one backend and returns the transcript.
func PlayCase(ctx context.Context, caseDir, backend string, f Factory) (*Transcript, error) {
	return playCase(ctx, caseDir, backend, f, 0)
}

func playCase(ctx context.Context, caseDir, backend string, f Factory, batch int) (*Transcript, error) {
	sc, err := ReadScenario(caseDir)
	if err != nil {
		return nil, err
	}
	if batch > 0 {
		sc.BatchSize = batch
	}
	db, cleanup, err := OpenBackend(ctx, backend)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return Play(ctx, db, sc, f)
}

// playFunc plays one case directory on one backend.
type playFunc func(ctx context.Context, caseDir, backend string) (*Transcript, error)

func factoryPlay(f Factory, batch int) playFunc {
	return func(ctx context.Context, caseDir, backend string) (*Transcript, error) {
		return playCase(ctx, caseDir, backend, f, batch)
	}
}

// verifyCase plays one case on every backend and compares; with approve it
// first writes the approved file from the first backend.
func verifyCase(ctx context.Context, caseDir string, play playFunc, o options, approve bool) (*Mismatch, *Transcript, error) {
	approvedPath := filepath.Join(caseDir, ApprovedFile(o.label))
	receivedPath := filepath.Join(caseDir, ReceivedFile(o.label))
	var first *Transcript
	for i, backend := range o.backends {
		tr, err := play(ctx, caseDir, backend)
		if err != nil {
			return nil, nil, fmt.Errorf("%s (%s): %w", caseDir, backend, err)
		}
		if i == 0 {
			first = tr
			if approve {
				if old, err := os.ReadFile(approvedPath); err != nil || string(old) != tr.Text {
					if err := os.WriteFile(approvedPath, []byte(tr.Text), 0o644); err != nil {
						return nil, nil, fmt.Errorf("golden: %w", err)
					}
				}
			}
		}
		approved, err := os.ReadFile(approvedPath)
		missing := errors.Is(err, os.ErrNotExist)
		if err != nil && !missing {
			return nil, nil, fmt.Errorf("golden: %w", err)
		}
		if !missing && string(approved) == tr.Text {
			continue
		}
		if err := os.WriteFile(receivedPath, []byte(tr.Text), 0o644); err != nil {
			return nil, nil, fmt.Errorf("golden: %w", err)
		}
		m := &Mismatch{Case: caseDir, Backend: backend, Approved: approvedPath, Received: receivedPath, Missing: missing}
		if !missing {
			m.Diff = Diff(ApprovedFile(o.label), string(approved), ReceivedFile(o.label)+" ("+backend+")", tr.Text)
		}
		return m, first, nil
	}
	_ = os.Remove(receivedPath) // a stale one from an earlier failure
	return nil, first, nil
}

// CheckCase plays one case directory on every backend and compares each
// transcript with the approved file; with approve it first writes the
// approved file from the first backend's transcript (never in CI: ErrCI).
// A mismatch writes the received file beside the approved one and is
// returned; the transcript is the first backend's. goldentest.Run calls it
// per case.
func CheckCase(ctx context.Context, caseDir string, f Factory, approve bool, opts ...Option) (*Mismatch, *Transcript, error) {
	if approve && InCI() {
		return nil, nil, ErrCI
	}
	return verifyCase(ctx, caseDir, factoryPlay(f, buildOptions(opts).batch), buildOptions(opts), approve)
}

// Verify plays every case under dir on every backend and compares each
// transcript with the approved file. For each mismatch it writes the
// received file beside the approved one. It never writes approved files.
// The error is for cases that could not run at all.
func Verify(ctx context.Context, dir string, f Factory, opts ...Option) ([]Mismatch, error) {
	return verifyAll(ctx, dir, factoryPlay(f, buildOptions(opts).batch), buildOptions(opts), false)
}

func verifyAll(ctx context.Context, dir string, play playFunc, o options, approve bool) ([]Mismatch, error) {
	cases, err := o.cases(dir)
	if err != nil {
		return nil, err
	}
	var out []Mismatch
	for _, c := range cases {
		m, _, err := verifyCase(ctx, c, play, o, approve)
		if err != nil {
			return out, err
		}
		if m != nil {
			out = append(out, *m)
		}
	}
	return out, nil
}

// ErrCI is returned by Approve when CI is set.
var ErrCI = errors.New("golden: CI is set: approved files are never written in CI")

// Approve plays every case under dir and writes its transcript (from the
// first backend) as the approved file; it then checks the other backends
// against it and returns their mismatches. It refuses to run in CI.
func Approve(ctx context.Context, dir string, f Factory, opts ...Option) ([]Mismatch, error) {
	if InCI() {
		return nil, ErrCI
	}
	return verifyAll(ctx, dir, factoryPlay(f, buildOptions(opts).batch), buildOptions(opts), true)
}

// OpenBackend opens a fresh, empty database of the backend ("sqlite": a
// file in a new temporary directory; "postgres": a new schema on the server
// of INBOXKIT_TEST_POSTGRES, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable; "mysql": a new
// database on the MariaDB or MySQL server of INBOXKIT_TEST_MYSQL, default
// root@tcp(127.0.0.1:3306)/, opened as inboxctl opens it). cleanup drops
// it.
func OpenBackend(ctx context.Context, backend string) (db Database, cleanup func(), err error) {
	switch backend {
	case SQLite:
		dir, err := os.MkdirTemp("", "inboxkit-golden-*")
		if err != nil {
			return Database{}, nil, fmt.Errorf("golden: %w", err)
		}
		dsn := "file:" + filepath.Join(dir, "golden.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"
		open := func() (*sql.DB, error) { return sql.Open("sqlite", dsn) }
		pool, err := open()
		if err != nil {
			os.RemoveAll(dir)
			return Database{}, nil, fmt.Errorf("golden: %w", err)
		}
		return Database{DB: pool, Dialect: inbox.SQLite, Open: open}, func() { pool.Close(); os.RemoveAll(dir) }, nil
	case Postgres:
		return openPostgres(ctx)
	case MySQL:
		return openMySQL(ctx)
	}
	return Database{}, nil, fmt.Errorf("golden: unknown backend %q (use %s)", backend, strings.Join(slices.Sorted(slices.Values([]string{SQLite, Postgres, MySQL})), ", "))
}

// openPostgres is OpenBackend's "postgres".
func openPostgres(ctx context.Context) (Database, func(), error) {
	base := os.Getenv("INBOXKIT_TEST_POSTGRES")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	schema, drop, err := fresh(ctx, "pgx", base, "PostgreSQL", "SCHEMA", " CASCADE")
	if err != nil {
		return Database{}, nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return Database{}, nil, fmt.Errorf("golden: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	// The store's pool as inboxctl opens it: an outbox Add held for the
	// commit.
	return openFresh(postgres.DriverName, u.String(), inbox.Postgres, drop)
}

// openMySQL is OpenBackend's "mysql".
func openMySQL(ctx context.Context) (Database, func(), error) {
	base := os.Getenv("INBOXKIT_TEST_MYSQL")
	if base == "" {
		base = "root@tcp(127.0.0.1:3306)/"
	}
	name, drop, err := fresh(ctx, "mysql", base, "MariaDB", "DATABASE", "")
	if err != nil {
		return Database{}, nil, err
	}
	// As inboxctl opens MariaDB: times in UTC (over base's settings), one
	// round trip a statement unless base says otherwise.
	addr, params, _ := strings.Cut(base, "?")
	dsn := strings.TrimSuffix(addr, "/") + "/" + name + "?"
	if params != "" {
		dsn += params + "&"
	}
	dsn += "parseTime=true&loc=UTC&time_zone=%27%2B00%3A00%27"
	if !strings.Contains(params, "interpolateParams=") {
		dsn += "&interpolateParams=true"
	}
	return openFresh("mysql", dsn, inbox.MySQL, drop)
}

// fresh creates a schema or database (kind) with a new name on the server
// of base and returns its name and what drops it (DROP kind name tail).
func fresh(ctx context.Context, driverName, base, server, kind, tail string) (string, func(), error) {
	admin, err := sql.Open(driverName, base)
	if err != nil {
		return "", nil, fmt.Errorf("golden: %w", err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "golden_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE "+kind+" "+name); err != nil {
		return "", nil, fmt.Errorf("golden: %s does not answer or refuses CREATE %s: %w", server, kind, err)
	}
	return name, func() {
		if a, err := sql.Open(driverName, base); err == nil {
			_, _ = a.Exec("DROP " + kind + " " + name + tail)
			a.Close()
		}
	}, nil
}

// openFresh opens the pool of a database fresh made; cleanup closes it
// and drops the database.
func openFresh(driverName, dsn string, d inbox.Dialect, drop func()) (Database, func(), error) {
	open := func() (*sql.DB, error) { return sql.Open(driverName, dsn) }
	pool, err := open()
	if err != nil {
		drop()
		return Database{}, nil, fmt.Errorf("golden: %w", err)
	}
	return Database{DB: pool, Dialect: d, Open: open}, func() { pool.Close(); drop() }, nil
}
