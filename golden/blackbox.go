package golden

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
)

// Environment variables the black-box recorder gives every process it
// starts (see BlackBox).
const (
	// EnvDB: PostgreSQL URL of the recording's schema (search_path set),
	// through the recorder's TCP proxy.
	EnvDB = "INBOXKIT_DB"
	// EnvJDBCURL: the same database as a JDBC URL (currentSchema set).
	EnvJDBCURL = "INBOXKIT_JDBC_URL"
	// EnvBroker: the broker's STOMP URL, stomp://host:port.
	EnvBroker = "INBOXKIT_BROKER"
	// EnvOpenWire: the broker's OpenWire URL, tcp://host:port (JMS clients).
	EnvOpenWire = "INBOXKIT_OPENWIRE_URL"
	// EnvQueue: the queue to consume (unique per recording).
	EnvQueue = "INBOXKIT_QUEUE"
	// EnvDLQ: DLQ.<queue>, the dead-letter queue the transcript reads
	// (ActiveMQ's individualDeadLetterStrategy prefix, and inboxkit's DLQ).
	EnvDLQ = "INBOXKIT_DLQ"
	// EnvRejectQueue: <queue>.REJECTED, for business rejections.
	EnvRejectQueue = "INBOXKIT_REJECT_QUEUE"
	// EnvMaxAttempts: the scenario's max-attempts (an inbox's backout
	// threshold).
	EnvMaxAttempts = "INBOXKIT_MAX_ATTEMPTS"
	// EnvMaxRedeliveries: broker-max-deliveries - 1, for ActiveMQ's
	// RedeliveryPolicy.maximumRedeliveries.
	EnvMaxRedeliveries = "INBOXKIT_MAX_REDELIVERIES"
	// EnvInstance: the instance number, from 1.
	EnvInstance = "INBOXKIT_INSTANCE"
)

// BlackBoxBackend is the backend name black-box recordings report.
const BlackBoxBackend = "black-box"

// BlackBox describes a consumer process for the black-box recorder: the
// same scenario files as Play, played against a running program from the
// outside. The recorder publishes the scenario's messages to the real broker
// (STOMP, with amq-msg-type:text so JMS consumers read a TextMessage), serves
// the downstream service over HTTP itself, injects faults from outside, waits
// until the system is quiet and snapshots the business tables, the inbox
// table (if the process created one), and the queue, DLQ.<queue> and
// <queue>.REJECTED.
//
// Every instance runs `sh -c Command` in its own process group with the
// environment variables EnvDB, EnvJDBCURL, EnvBroker, EnvOpenWire, EnvQueue,
// EnvDLQ, EnvRejectQueue, EnvMaxAttempts, EnvMaxRedeliveries, EnvInstance
// and INBOXKIT_<SERVICE> (the service name in upper case with '_' for '-',
// e.g. INBOXKIT_LETTER_SERVICE): the URL to POST each call to.
//
// The HTTP service contract: a POST with the request as body and, when the
// caller has one, an Idempotency-Key header. 201 means sent; 200 means a
// duplicate key (nothing sent again); 503 means the service failed (a
// "fail SERVICE N" step). A call with a key seen before answers 200.
//
// Faults: "fail SERVICE N" fails the next N calls; "crash during SERVICE"
// kills the calling process (SIGKILL to its process group) from inside the
// next call, records what the service did with it (sent, or a duplicate
// of a key it took before), and starts the instance again;
// "send M parallel N" publishes N copies at once and holds the service's
// calls until N have arrived (or HoldTimeout passed), so that competing
// instances really overlap. "crash before-commit", "crash after-commit" and
// "fail commit" need a hook inside the process and are refused.
type BlackBox struct {
	// Name describes the consumer in the recorder's log and errors and in
	// Transcript.Consumer ("java LegacyInvoiceEventMdb"). Required. The
	// transcript is headed by the label (see Label), not by Name, so that a
	// record and its verify agree whatever each caller calls the process.
	Name string
	// Command starts one consumer instance, run with sh -c. Required.
	Command string
	// Dir is Command's working directory. Defaults to the current directory.
	Dir string
	// Env is added to the environment of Command (KEY=VALUE).
	Env []string
	// DB is the PostgreSQL server; every recording creates a fresh schema on
	// it and drops it afterwards. Defaults to INBOXKIT_TEST_POSTGRES, else
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	DB string
	// Broker is the broker's STOMP URL. Defaults to stomp://127.0.0.1:61613.
	Broker string
	// OpenWire is the same broker's OpenWire URL (tcp://host:port), handed
	// to the process as EnvOpenWire for JMS clients. Defaults to
	// tcp://<Broker's host>:61616 when Broker is at ActiveMQ's default
	// STOMP port 61613 (its default OpenWire port beside it); for a broker
	// on other ports there is no default and EnvOpenWire is not set: a
	// STOMP consumer needs none, a JMS bean must be given it, or it would
	// join whatever broker listens on 61616.
	OpenWire string
	// SetupFunc creates the business tables and seed data in the fresh
	// schema before the first instance starts. Required.
	SetupFunc func(ctx context.Context, db *sql.DB) error
	// Tables are the business tables in the transcript (rows are sorted by
	// their normalized text; OrderBy is not used).
	Tables []Table
	// Service is the downstream HTTP service the recorder plays. Defaults to
	// "letter-service".
	Service string
	// SummaryFunc turns a call's request body into its summary in the
	// transcript. Defaults to the body as it is.
	SummaryFunc func(body []byte) string
	// Quiet is how long nothing observable may change (calls, processes,
	// rows, queue depths) with the queue empty before a step counts as
	// settled. It must exceed the longest pause of the consumer between two
	// deliveries of one message (its redelivery delay). Defaults to 2s.
	Quiet time.Duration
	// HoldTimeout bounds how long calls are held during a parallel send.
	// Defaults to 3s.
	HoldTimeout time.Duration
	// Timeout bounds each step and the start of the instances. Defaults to
	// 120s.
	Timeout time.Duration
	// Stall is how long messages may wait on the queue, while every
	// instance is up (printed Ready, or Quiet passed since its start), with
	// no sign of life at all (no call, no row, no byte to the database, no
	// line of output) before the recording fails as "not consumed", naming
	// the broker, OpenWire address and queue the processes were told. It
	// must exceed Quiet. Defaults to 10s or 2×Quiet, whichever is longer.
	Stall time.Duration
	// Output receives the processes' stdout and stderr. Defaults to none.
	Output io.Writer
	// Log receives one line per recording: what the processes are told
	// (broker, OpenWire address and where it came from, queue). Defaults
	// to none.
	Log io.Writer
	// Ready is a regular expression an instance prints (stdout or stderr)
	// once it consumes from its queue; the recorder sends nothing before
	// every instance printed it, so competing instances really compete.
	// Empty: the recorder waits Quiet after starting them.
	Ready string
}

func (b *BlackBox) setDefaults() {
	if b.DB == "" {
		b.DB = os.Getenv("INBOXKIT_TEST_POSTGRES")
	}
	if b.DB == "" {
		b.DB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if b.Broker == "" {
		b.Broker = "stomp://127.0.0.1:61613"
	}
	if b.Service == "" {
		b.Service = "letter-service"
	}
	if b.SummaryFunc == nil {
		b.SummaryFunc = func(body []byte) string { return strconv.Quote(string(body)) }
	}
	if b.Quiet <= 0 {
		b.Quiet = 2 * time.Second
	}
	if b.HoldTimeout <= 0 {
		b.HoldTimeout = 3 * time.Second
	}
	if b.Timeout <= 0 {
		b.Timeout = 120 * time.Second
	}
	if b.Stall <= 0 {
		b.Stall = max(10*time.Second, 2*b.Quiet)
	}
	if b.Output == nil {
		b.Output = io.Discard
	}
	if b.Log == nil {
		b.Log = io.Discard
	}
}

func (b *BlackBox) validate() error {
	switch {
	case b.Name == "":
		return errors.New("golden: BlackBox.Name is required (it heads the transcript)")
	case strings.TrimSpace(b.Command) == "":
		return errors.New("golden: BlackBox.Command is required: the shell command that starts one consumer instance")
	case b.SetupFunc == nil:
		return errors.New("golden: BlackBox.SetupFunc is required: it creates the business tables")
	}
	if _, err := regexp.Compile(b.Ready); err != nil {
		return fmt.Errorf("golden: BlackBox.Ready: %w", err)
	}
	return nil
}

// ServiceEnv is the environment variable holding the URL of service.
func ServiceEnv(service string) string {
	return "INBOXKIT_" + strings.ToUpper(strings.ReplaceAll(service, "-", "_"))
}

// blackBoxSlots bounds how many recordings run at once in one process
// (INBOXKIT_BLACKBOX_PARALLEL, default 2): each starts JVMs or consumers.
var blackBoxSlots = func() chan struct{} {
	n, err := strconv.Atoi(os.Getenv("INBOXKIT_BLACKBOX_PARALLEL"))
	if err != nil || n < 1 {
		n = 2
	}
	return make(chan struct{}, n)
}()

// CheckBlackBoxCase is CheckCase for a process: one case directory is
// recorded against bb and compared with its approved file (label from the
// options). goldentest.RunBlackBox calls it per case.
func CheckBlackBoxCase(ctx context.Context, caseDir string, bb BlackBox, approve bool, opts ...Option) (*Mismatch, *Transcript, error) {
	if approve && InCI() {
		return nil, nil, ErrCI
	}
	o := buildOptions(opts)
	o.backends = []string{BlackBoxBackend}
	return verifyCase(ctx, caseDir, blackBoxPlay(bb, o.label), o, approve)
}

// VerifyBlackBox is Verify for a process (inboxctl golden verify --black-box).
func VerifyBlackBox(ctx context.Context, dir string, bb BlackBox, opts ...Option) ([]Mismatch, error) {
	o := buildOptions(opts)
	o.backends = []string{BlackBoxBackend}
	return verifyAll(ctx, dir, blackBoxPlay(bb, o.label), o, false)
}

// RecordBlackBox is Approve for a process (inboxctl golden record
// --black-box): it writes the approved files. It refuses to run in CI.
func RecordBlackBox(ctx context.Context, dir string, bb BlackBox, opts ...Option) ([]Mismatch, error) {
	if InCI() {
		return nil, ErrCI
	}
	o := buildOptions(opts)
	o.backends = []string{BlackBoxBackend}
	return verifyAll(ctx, dir, blackBoxPlay(bb, o.label), o, true)
}

func blackBoxPlay(bb BlackBox, label string) playFunc {
	return func(ctx context.Context, caseDir, _ string) (*Transcript, error) {
		sc, err := ReadScenario(caseDir)
		if err != nil {
			return nil, err
		}
		tr, err := playBlackBox(ctx, sc, bb, label, caseDir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caseDir, err)
		}
		return tr, nil
	}
}

// PlayBlackBox records one scenario against the process bb describes and
// returns its transcript (Deliveries stay empty: a black box shows no
// deliveries, only their effects). The option Label heads the transcript.
func PlayBlackBox(ctx context.Context, sc *Scenario, bb BlackBox, opts ...Option) (*Transcript, error) {
	return playBlackBox(ctx, sc, bb, buildOptions(opts).label, "")
}

// playBlackBox is PlayBlackBox; what names the recording in bb.Log.
func playBlackBox(ctx context.Context, sc *Scenario, bb BlackBox, label, what string) (*Transcript, error) {
	bb.setDefaults()
	if err := bb.validate(); err != nil {
		return nil, err
	}
	for _, st := range sc.Steps {
		switch {
		case st.Kind == StepCrash && st.Point != CrashDuring:
			return nil, fmt.Errorf("golden: scenario line %d: crash %s needs a hook inside the process; a black-box recording can only inject crash %s SERVICE", st.Line, st.Point, CrashDuring)
		case st.Kind == StepSend && len(st.With) > 0:
			return nil, fmt.Errorf("golden: scenario line %d: send of several messages at once is played in process only (it exists to fill a consumer's batch)", st.Line)
		case (st.Kind == StepCrash || st.Kind == StepFail) && st.Service != bb.Service:
			return nil, fmt.Errorf("golden: scenario line %d: the black-box recorder plays only the service %q, not %q (fail commit needs a hook inside the process)", st.Line, bb.Service, st.Service)
		}
	}
	select {
	case blackBoxSlots <- struct{}{}:
		defer func() { <-blackBoxSlots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	began := time.Now()
	r := &bbRun{sc: sc, bb: bb, label: label, what: what, svc: newServices("the caller was killed (kill -9) before the answer")}
	if r.what == "" {
		r.what = bb.Name
	}
	if bb.Ready != "" {
		r.ready = regexp.MustCompile(bb.Ready)
	}
	defer r.close()
	err := r.setup(ctx)
	if err == nil {
		err = r.play(ctx)
	}
	if err != nil {
		return nil, r.explain(err)
	}
	r.tr.Elapsed = time.Since(began)
	return r.tr, nil
}

// bbRun is one black-box recording.
type bbRun struct {
	sc    *Scenario
	bb    BlackBox
	label string // heads the transcript
	what  string // names the recording in bb.Log

	openWire, openWireFrom string // EnvOpenWire ("": not set) and why

	schema, queue string
	admin, db     *sql.DB
	proxy         *tcpProxy
	srv           *http.Server
	serviceURL    string
	stompCfg      stomp.Config
	pub           *stomp.Adapter
	procs         []*bbProc
	out           strings.Builder
	tr            *Transcript

	mu       sync.Mutex
	svc      *services
	hold     int // calls to hold until this many arrived (parallel send)
	arrived  int // calls held so far
	holdCh   chan struct{}
	events   []string // process events of the current step
	changes  int      // process starts and kills
	outBuf   []byte
	outAt    time.Time // last output of any process
	ready    *regexp.Regexp
	closeFns []func()
}

type bbProc struct {
	n       int
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
	gone    bool // killed or stopped on purpose
	ready   chan struct{}
	readyAt time.Time // when it printed Ready (zero: not yet)
	once    sync.Once
	line    []byte // output since the last line break, for Ready
}

// procOutput is an instance's stdout and stderr.
type procOutput struct {
	r *bbRun
	p *bbProc
}

func (o procOutput) Write(b []byte) (int, error) {
	if re := o.r.ready; re != nil {
		o.r.mu.Lock()
		o.p.line = append(o.p.line, b...)
		for {
			i := slices.Index(o.p.line, '\n')
			if i < 0 {
				break
			}
			if re.Match(o.p.line[:i]) {
				o.p.once.Do(func() {
					o.p.readyAt = time.Now()
					close(o.p.ready)
				})
			}
			o.p.line = o.p.line[i+1:]
		}
		o.r.mu.Unlock()
	}
	return o.r.Write(b)
}

func (r *bbRun) close() {
	r.stopAll()
	for i := len(r.closeFns) - 1; i >= 0; i-- {
		r.closeFns[i]()
	}
}

func (r *bbRun) onClose(f func()) { r.closeFns = append(r.closeFns, f) }

func randomSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *bbRun) setup(ctx context.Context) error {
	r.tr = &Transcript{Consumer: r.bb.Name, Rows: map[string][][]string{}}
	suffix := randomSuffix()
	r.schema = "golden_bb_" + suffix
	r.queue = r.sc.Queue + ".bb" + suffix

	// Database: a fresh schema, reached by the process through a proxy.
	base, err := url.Parse(r.bb.DB)
	if err != nil || base.Scheme != "postgres" && base.Scheme != "postgresql" {
		return fmt.Errorf("golden: black-box DB %q: want a postgres:// URL", r.bb.DB)
	}
	if r.admin, err = sql.Open("pgx", r.bb.DB); err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.onClose(func() { r.admin.Close() })
	if _, err := r.admin.ExecContext(ctx, "CREATE SCHEMA "+r.schema); err != nil {
		return fmt.Errorf("golden: PostgreSQL at %s does not answer or refuses CREATE SCHEMA: %w", base.Redacted(), err)
	}
	r.onClose(func() { _, _ = r.admin.Exec("DROP SCHEMA " + r.schema + " CASCADE") })
	own := *base
	q := own.Query()
	q.Set("search_path", r.schema)
	own.RawQuery = q.Encode()
	if r.db, err = sql.Open("pgx", own.String()); err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.onClose(func() { r.db.Close() })
	if err := r.bb.SetupFunc(ctx, r.db); err != nil {
		return fmt.Errorf("golden: black-box setup: %w", err)
	}
	port := base.Port()
	if port == "" {
		port = "5432"
	}
	if r.proxy, err = newTCPProxy(net.JoinHostPort(base.Hostname(), port)); err != nil {
		return err
	}
	r.onClose(r.proxy.Close)

	// Broker.
	bu, err := url.Parse(r.bb.Broker)
	if err != nil || bu.Scheme != "stomp" || bu.Host == "" {
		return fmt.Errorf("golden: black-box broker %q: want stomp://host:port", r.bb.Broker)
	}
	r.stompCfg = stomp.Config{Addr: bu.Host, Heartbeat: -1}
	if bu.User != nil {
		r.stompCfg.Login = bu.User.Username()
		r.stompCfg.Passcode, _ = bu.User.Password()
	}
	r.openWire, r.openWireFrom = openWireURL(r.bb.OpenWire, bu)
	fmt.Fprintf(r.bb.Log, "golden: recording %s: the processes are told %s\n", r.what, r.told())
	if r.pub, err = stomp.Open(ctx, r.stompCfg); err != nil {
		return fmt.Errorf("golden: broker %s: %w (is ActiveMQ running? scripts/activemq start)", bu.Host, err)
	}
	r.onClose(func() { r.pub.Close() })
	r.onClose(r.drainQueues)

	// The downstream service.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.serviceURL = "http://" + ln.Addr().String() + "/" + r.bb.Service + "/"
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln) //nolint:errcheck // ends with Close
	r.onClose(func() { r.srv.Close() })

	// The instances, and a wait until each one consumes.
	for i := 1; i <= r.sc.Instances; i++ {
		if err := r.start(i); err != nil {
			return err
		}
	}
	return r.waitReady(ctx)
}

// openWireURL is the OpenWire URL the processes are told, given or
// derived from the STOMP URL of the broker, and where it came from ("" and
// why not, when it cannot be derived).
func openWireURL(given string, broker *url.URL) (string, string) {
	switch {
	case given != "":
		return given, "given"
	case broker.Port() == "61613":
		return "tcp://" + net.JoinHostPort(broker.Hostname(), "61616"), "derived: ActiveMQ's default OpenWire port beside STOMP 61613"
	}
	return "", fmt.Sprintf("not set: the broker's STOMP port %q is not ActiveMQ's default 61613, so its OpenWire port is unknown; a JMS bean needs it: give BlackBox.OpenWire (inboxctl golden --openwire tcp://host:port)", broker.Port())
}

// told is what the processes are told about where to consume.
func (r *bbRun) told() string {
	ow := EnvOpenWire + " " + r.openWireFrom
	if r.openWire != "" {
		ow = fmt.Sprintf("%s=%s (%s)", EnvOpenWire, r.openWire, r.openWireFrom)
	}
	return fmt.Sprintf("%s=%s, %s, %s=%s", EnvBroker, r.bb.Broker, ow, EnvQueue, r.queue)
}

// explain adds to a failed recording what the processes were told and
// their last output.
func (r *bbRun) explain(err error) error {
	msg := "%w\nthe processes were told %s"
	args := []any{err, r.told()}
	if tail := r.tail(); tail != "" {
		msg += "\nlast output of the processes:\n%s"
		args = append(args, tail)
	}
	return fmt.Errorf(msg, args...)
}

// waitReady waits until every instance printed bb.Ready (or, without it,
// for bb.Quiet).
func (r *bbRun) waitReady(ctx context.Context) error {
	if r.ready == nil {
		select {
		case <-time.After(r.bb.Quiet):
			return r.exited()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	deadline := time.After(r.bb.Timeout)
	for _, p := range slices.Clone(r.procs) {
		select {
		case <-p.ready:
		case <-p.done:
			return fmt.Errorf("golden: instance %d exited before it printed %q (%v)", p.n, r.bb.Ready, p.err)
		case <-deadline:
			return fmt.Errorf("golden: instance %d did not print %q within %s", p.n, r.bb.Ready, r.bb.Timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *bbRun) env(n int) []string {
	u, _ := url.Parse(r.bb.DB)
	pu := *u
	pu.Host = r.proxy.Addr()
	q := pu.Query()
	q.Set("search_path", r.schema)
	pu.RawQuery = q.Encode()
	jq := url.Values{}
	jq.Set("currentSchema", r.schema)
	if u.User != nil {
		jq.Set("user", u.User.Username())
		if p, ok := u.User.Password(); ok {
			jq.Set("password", p)
		}
	}
	jdbc := "jdbc:postgresql://" + r.proxy.Addr() + u.Path + "?" + jq.Encode()
	env := append(os.Environ(), r.bb.Env...)
	env = append(env,
		EnvDB+"="+pu.String(),
		EnvJDBCURL+"="+jdbc,
		EnvBroker+"="+r.bb.Broker,
		EnvQueue+"="+r.queue,
		EnvDLQ+"=DLQ."+r.queue,
		EnvRejectQueue+"="+r.queue+".REJECTED",
		EnvMaxAttempts+"="+strconv.Itoa(r.sc.MaxAttempts),
		EnvMaxRedeliveries+"="+strconv.Itoa(r.sc.BrokerMaxDeliveries-1),
		EnvInstance+"="+strconv.Itoa(n),
		ServiceEnv(r.bb.Service)+"="+r.serviceURL+strconv.Itoa(n),
	)
	if r.openWire != "" {
		env = append(env, EnvOpenWire+"="+r.openWire)
	}
	return env
}

// Write collects the processes' output (the last 8 KiB, for errors).
func (r *bbRun) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.outAt = time.Now()
	r.outBuf = append(r.outBuf, p...)
	if len(r.outBuf) > 8<<10 {
		r.outBuf = append([]byte(nil), r.outBuf[len(r.outBuf)-8<<10:]...)
	}
	r.mu.Unlock()
	return r.bb.Output.Write(p)
}

func (r *bbRun) tail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.outBuf)
}

func (r *bbRun) start(n int) error {
	cmd := exec.Command("sh", "-c", r.bb.Command)
	cmd.Dir = r.bb.Dir
	cmd.Env = r.env(n)
	p := &bbProc{n: n, cmd: cmd, started: time.Now(), done: make(chan struct{}), ready: make(chan struct{})}
	cmd.Stdout = procOutput{r, p}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("golden: start instance %d (sh -c %q): %w", n, r.bb.Command, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	r.mu.Lock()
	if n <= len(r.procs) {
		r.procs[n-1] = p
	} else {
		r.procs = append(r.procs, p)
	}
	r.changes++
	r.mu.Unlock()
	return nil
}

// kill sends SIGKILL to the process group of instance n and waits for it.
func (r *bbRun) kill(n int) {
	r.mu.Lock()
	p := r.procs[n-1]
	p.gone = true
	r.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stopAll sends SIGTERM to every instance, then SIGKILL after 10s.
func (r *bbRun) stopAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	for _, p := range procs {
		p.gone = true
	}
	r.mu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// exited reports an instance that ended without being killed by the recorder.
func (r *bbRun) exited() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		select {
		case <-p.done:
			if !p.gone {
				return fmt.Errorf("golden: instance %d exited on its own (%v)", p.n, p.err)
			}
		default:
		}
	}
	return nil
}

// serve is the downstream service.
func (r *bbRun) serve(w http.ResponseWriter, req *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/"+r.bb.Service+"/"))
	if req.Method != http.MethodPost || err != nil || n < 1 || n > r.sc.Instances {
		http.Error(w, "POST to the URL in "+ServiceEnv(r.bb.Service), http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := req.Header.Get("Idempotency-Key")
	summary := r.bb.SummaryFunc(body)

	r.mu.Lock()
	if r.hold > 0 {
		ch := r.holdCh
		r.arrived++
		if r.arrived >= r.hold {
			r.hold = 0
			close(ch)
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(r.bb.HoldTimeout):
		case <-req.Context().Done():
		}
		r.mu.Lock()
	}
	c := r.svc.call(r.bb.Service, key, summary)
	if c.CallerDied {
		r.events = append(r.events, fmt.Sprintf("instance %d killed (kill -9) during call %d of %s, then started again", n, len(r.svc.calls), r.bb.Service))
		r.mu.Unlock()
		r.kill(n)
		if err := r.start(n); err != nil {
			r.mu.Lock()
			r.events = append(r.events, err.Error())
			r.mu.Unlock()
		}
		http.Error(w, "caller killed", http.StatusServiceUnavailable)
		return
	}
	r.mu.Unlock()
	w.WriteHeader(map[CallEffect]int{CallSent: http.StatusCreated, CallDuplicate: http.StatusOK, CallFailed: http.StatusServiceUnavailable}[c.Effect])
	fmt.Fprintln(w, c.Result)
}

func (r *bbRun) play(ctx context.Context) error {
	title := "golden black-box transcript"
	if r.label != "" {
		title += ": " + r.label
	}
	fmt.Fprintf(&r.out, "# %s, queue %s\n", title, r.sc.Queue)
	fmt.Fprintf(&r.out, "# max-attempts %d, broker-max-deliveries %d, instances %d\n", r.sc.MaxAttempts, r.sc.BrokerMaxDeliveries, r.sc.Instances)
	fmt.Fprintf(&r.out, "\n== steps\n")
	for i, st := range r.sc.Steps {
		n := i + 1
		switch st.Kind {
		case StepNote:
			fmt.Fprintf(&r.out, "%d. note: %s\n", n, st.Text)
		case StepFail:
			r.mu.Lock()
			r.svc.fails[st.Service] += st.Count
			r.mu.Unlock()
			fmt.Fprintf(&r.out, "%d. fault: the next %d call(s) of %s fail (HTTP 503)\n", n, st.Count, st.Service)
		case StepCrash:
			r.mu.Lock()
			r.svc.during[st.Service]++
			r.mu.Unlock()
			fmt.Fprintf(&r.out, "%d. fault: the process is killed (kill -9) during the next call of %s\n", n, st.Service)
		case StepDatabase:
			r.proxy.SetDown(st.Point == "down")
			if st.Point == "down" {
				fmt.Fprintf(&r.out, "%d. fault: the database is unreachable (the recorder's proxy drops and refuses connections)\n", n)
				break
			}
			fmt.Fprintf(&r.out, "%d. the database is reachable again\n", n)
			if err := r.settle(ctx); err != nil {
				return fmt.Errorf("golden: step %d (database up): %w", n, err)
			}
			r.mu.Lock()
			ncalls := len(r.svc.calls)
			r.mu.Unlock()
			fmt.Fprintf(&r.out, "   quiet; %d call(s) of %s so far\n", ncalls, r.bb.Service)
		case StepSend:
			m := r.sc.Message(st.Message)
			hdr := map[string]string{"amq-msg-type": "text"}
			for _, h := range m.Headers {
				hdr[h.Name] = h.Value
			}
			if st.Parallel > 1 {
				r.mu.Lock()
				r.hold, r.arrived, r.holdCh = st.Parallel, 0, make(chan struct{})
				r.mu.Unlock()
				fmt.Fprintf(&r.out, "%d. send %s parallel %d (%d copies at once; calls of %s held until %d arrived)\n", n, m.Name, st.Parallel, st.Parallel, r.bb.Service, st.Parallel)
			} else {
				fmt.Fprintf(&r.out, "%d. send %s\n", n, m.Name)
			}
			for range st.Parallel {
				if err := r.pub.Publish(ctx, r.queue, hdr, []byte(m.Body)); err != nil {
					return fmt.Errorf("golden: publish %s: %w", m.Name, err)
				}
			}
			if err := r.settle(ctx); err != nil {
				return fmt.Errorf("golden: step %d (send %s): %w", n, m.Name, err)
			}
			r.mu.Lock()
			events := r.events
			r.events, r.hold = nil, 0
			ncalls := len(r.svc.calls)
			r.mu.Unlock()
			for _, e := range events {
				fmt.Fprintf(&r.out, "   %s\n", e)
			}
			fmt.Fprintf(&r.out, "   quiet; %d call(s) of %s so far\n", ncalls, r.bb.Service)
		}
	}
	r.stopAll()
	return r.final(ctx)
}

// settle waits until the queue is empty and nothing observable changed for
// bb.Quiet. It fails when messages wait on the queue with no sign of life
// for bb.Stall while every instance is up (see BlackBox.Stall).
func (r *bbRun) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.bb.Timeout)
	defer cancel()
	var last string
	since := time.Now()
	alive, sent := since, r.proxy.Forwarded()
	for {
		if err := r.exited(); err != nil {
			return err
		}
		fp, queued, err := r.fingerprint(ctx)
		if err != nil {
			return err
		}
		if r.proxy.Down() {
			// A consumer that hands messages back while the database is
			// unreachable keeps them moving between the queue and the
			// broker's scheduler: only calls, processes and rows count.
			fp, _, _ = strings.Cut(fp, "|queues|")
			queued = 0
		}
		if fp != last {
			last, since = fp, time.Now()
			alive = since
		} else if queued == 0 && time.Since(since) >= r.bb.Quiet {
			return nil
		}
		if n := r.proxy.Forwarded(); n != sent {
			sent, alive = n, time.Now()
		}
		if queued > 0 {
			if up, ok := r.upSince(); ok && time.Since(later(alive, up, r.lastOutput())) >= r.bb.Stall {
				return fmt.Errorf("nothing consumed from queue %s for %s: %d message(s) wait there on the broker %s while every instance is up, with no call, no row, no byte to the database and no output; is the process consuming from another broker? Give the OpenWire address of this one (BlackBox.OpenWire, inboxctl golden --openwire)",
					r.queue, r.bb.Stall, queued, r.bb.Broker)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not quiet after %s (last state: %s)", r.bb.Timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// upSince reports whether every instance is up (printed bb.Ready since its
// last start or, without Ready, was started bb.Quiet ago), and since when.
func (r *bbRun) upSince() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t time.Time
	for _, p := range r.procs {
		up := p.started.Add(r.bb.Quiet)
		if r.ready != nil {
			if p.readyAt.IsZero() {
				return time.Time{}, false
			}
			up = p.readyAt
		}
		if time.Now().Before(up) {
			return time.Time{}, false
		}
		t = later(t, up)
	}
	return t, true
}

func (r *bbRun) lastOutput() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outAt
}

func later(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func (r *bbRun) fingerprint(ctx context.Context) (string, int, error) {
	var b strings.Builder
	r.mu.Lock()
	fmt.Fprintf(&b, "calls=%d changes=%d held=%d;", len(r.svc.calls), r.changes, r.hold)
	r.mu.Unlock()
	tables := append(slices.Clone(r.bb.Tables), Table{Name: "inbox_event_processing"})
	for _, t := range tables {
		var n int
		if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.Name).Scan(&n); err != nil {
			if t.Name == "inbox_event_processing" {
				continue // no inbox (yet)
			}
			return "", 0, fmt.Errorf("golden: count %s: %w", t.Name, err)
		}
		fmt.Fprintf(&b, "%s=%d;", t.Name, n)
	}
	if cols, _ := r.inboxColumns(ctx); slices.Contains(cols, "STATUS") {
		rows, err := r.db.QueryContext(ctx, "SELECT STATUS FROM INBOX_EVENT_PROCESSING ORDER BY 1")
		if err == nil {
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				b.WriteString(s + ",")
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return "", 0, fmt.Errorf("golden: read the inbox's statuses: %w", err)
			}
		}
	}
	b.WriteString("|queues|")
	queued := 0
	for i, q := range r.queues() {
		msgs, err := stomp.Browse(ctx, r.stompCfg, q, 0)
		if err != nil {
			return "", 0, fmt.Errorf("golden: browse %s: %w", q, err)
		}
		if i == 0 {
			queued = len(msgs)
		}
		fmt.Fprintf(&b, "%s=%d;", q, len(msgs))
	}
	return b.String(), queued, nil
}

func (r *bbRun) queues() []string {
	return []string{r.queue, "DLQ." + r.queue, r.queue + ".REJECTED"}
}

// inboxColumns lists the inbox columns the transcript shows that exist in
// the schema's INBOX_EVENT_PROCESSING (none when there is no such table).
func (r *bbRun) inboxColumns(ctx context.Context) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT upper(column_name) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'inbox_event_processing'`, r.schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		have[c] = true
	}
	var out []string
	for _, c := range []string{"EVENT_ID", "CONSUMER_NAME", "STATUS", "CORRELATION_ID", "REASON_CODE", "ERROR_CLASS", "ATTEMPTS", "LAST_ERROR", "CREATED_AT", "PROCESSED_AT"} {
		if have[c] {
			out = append(out, c)
		}
	}
	return out, rows.Err()
}

// final writes the snapshot: calls, tables, inbox, queues.
func (r *bbRun) final(ctx context.Context) error {
	r.mu.Lock()
	calls := slices.Clone(r.svc.calls)
	unused, during := r.svc.unused()
	unused = append(unused, during...)
	r.mu.Unlock()
	fmt.Fprintf(&r.out, "\n== calls to external services\n")
	if len(calls) == 0 {
		r.out.WriteString("   (none)\n")
	}
	r.tr.Calls = calls
	for i, c := range calls {
		key := c.Key
		if key == "" {
			key = "(none)"
		}
		fmt.Fprintf(&r.out, "   %d. %s key=%s %s -> %s\n", i+1, c.Service, key, c.Summary, c.Result)
	}
	for _, t := range r.bb.Tables {
		if err := r.dumpSorted(ctx, "table "+t.Name, t.Name, t.Columns, fmt.Sprintf("SELECT %s FROM %s", strings.Join(t.Columns, ", "), t.Name)); err != nil {
			return err
		}
	}
	cols, err := r.inboxColumns(ctx)
	if err != nil {
		return fmt.Errorf("golden: inbox columns: %w", err)
	}
	if len(cols) > 0 {
		if err := r.dumpSorted(ctx, "inbox INBOX_EVENT_PROCESSING", "inbox", cols, fmt.Sprintf("SELECT %s FROM INBOX_EVENT_PROCESSING", strings.Join(cols, ", "))); err != nil {
			return err
		}
	} else {
		r.out.WriteString("\n== inbox\n   (none: the consumer created no INBOX_EVENT_PROCESSING table)\n")
	}
	for i, q := range r.queues() {
		name := strings.ReplaceAll(q, r.queue, r.sc.Queue)
		title := "queue " + name
		if i == 0 {
			title += " (left on the broker)"
		}
		fmt.Fprintf(&r.out, "\n== %s\n", title)
		msgs, err := stomp.Browse(ctx, r.stompCfg, q, 0)
		if err != nil {
			return fmt.Errorf("golden: browse %s: %w", q, err)
		}
		if len(msgs) == 0 {
			r.out.WriteString("   (nothing)\n")
		}
		for j, m := range msgs {
			hdr := map[string]string{}
			for k, v := range m.Headers {
				if keepHeader(k) {
					hdr[k] = r.normalizeHeader(k, v)
				}
			}
			if i > 0 {
				r.tr.Published = append(r.tr.Published, Published{Destination: name, Headers: hdr, Body: string(m.Body)})
				if i == 1 && hdr["inboxkit-dlq-reason"] == "" {
					r.tr.BrokerDeadLetters = append(r.tr.BrokerDeadLetters, r.messageName(hdr["eventId"], string(m.Body)))
				}
			}
			fmt.Fprintf(&r.out, "   %d. body %s\n", j+1, strconv.Quote(string(m.Body)))
			for _, k := range slices.Sorted(maps.Keys(hdr)) {
				fmt.Fprintf(&r.out, "      %s: %s\n", k, hdr[k])
			}
		}
	}
	if len(unused) > 0 {
		r.out.WriteString("\n== faults never triggered\n")
		for _, u := range unused {
			fmt.Fprintf(&r.out, "   %s\n", u)
		}
	}
	r.tr.Text = r.normalize(r.out.String())
	return nil
}

// normalize replaces what differs between recordings: the unique queue name,
// the service's URL (its port), ids and times.
func (r *bbRun) normalize(text string) string {
	text = strings.ReplaceAll(text, r.queue, r.sc.Queue)
	text = strings.ReplaceAll(text, r.serviceURL, "<"+r.bb.Service+" URL>/")
	return scrubBlackBox(text)
}

// keepHeader selects the message headers the transcript shows: the
// scenario's own, inboxkit's dead-letter envelope, and ActiveMQ's
// dead-letter cause; never the broker's ids, times and flags.
func keepHeader(k string) bool {
	switch k {
	case "eventId", "correlationId", "dlqDeliveryFailureCause", "original-destination":
		return true
	case "inboxkit-dlq-first-failure", "inboxkit-dlq-last-failure", "inboxkit-dlq-time", "inboxkit-dlq-error":
		return false
	}
	return strings.HasPrefix(k, "inboxkit-dlq-")
}

var deliveryRe = regexp.MustCompile(`Delivery\[\d+\] exceeds redelivery policy limit`)

func (r *bbRun) normalizeHeader(k, v string) string {
	v = strings.ReplaceAll(v, r.queue, r.sc.Queue)
	if k == "dlqDeliveryFailureCause" {
		// "java.lang.Throwable: Delivery[5] exceeds redelivery policy limit:RedeliveryPolicy {...}, cause:..."
		if m := deliveryRe.FindString(v); m != "" {
			return m
		}
		return "(other cause)"
	}
	return v
}

// messageName finds the scenario message with this event id (or body).
func (r *bbRun) messageName(eventID, body string) string {
	for _, m := range r.sc.Messages {
		if eventID != "" && header(m, "eventId") == eventID || eventID == "" && m.Body == body {
			return m.Name
		}
	}
	return "(unknown message)"
}

// dumpSorted prints the rows of q sorted by their normalized text (a black
// box has random ids and real times: only the normalized rows are stable).
func (r *bbRun) dumpSorted(ctx context.Context, title, key string, cols []string, q string) error {
	fmt.Fprintf(&r.out, "\n== %s (%s)\n", title, strings.Join(cols, ", "))
	rows, err := queryCells(ctx, r.db, title, len(cols), q)
	if err != nil {
		return err
	}
	var lines []string
	for _, cells := range rows {
		r.tr.Rows[key] = append(r.tr.Rows[key], cells)
		lines = append(lines, r.normalize(strings.Join(cells, " | ")))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Fprintf(&r.out, "   %s\n", l)
	}
	if len(lines) == 0 {
		r.out.WriteString("   (no rows)\n")
	}
	return nil
}

var blackBoxIDRe = regexp.MustCompile(`\b(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})\b`)

// scrubBlackBox normalizes what a process makes up: random ids (UUIDs, 32
// hex digits) become <id> and times <time>, unnumbered, because their order
// and equality depend on timing the recorder does not control.
func scrubBlackBox(text string) string {
	text = blackBoxIDRe.ReplaceAllString(text, "<id>")
	return timeRe.ReplaceAllString(text, "<time>")
}

// drainQueues empties the recording's queues (they are unique to it).
func (r *bbRun) drainQueues() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := stomp.Dial(ctx, r.stompCfg.Addr, stomp.ConnOptions{HeartBeat: -1, Login: r.stompCfg.Login, Passcode: r.stompCfg.Passcode})
	if err != nil {
		return
	}
	defer c.Disconnect(ctx) //nolint:errcheck // cleanup
	for _, q := range r.queues() {
		sub, err := c.Subscribe(ctx, stomp.QueueDestination(q), stomp.SubscribeOptions{Ack: "auto", Prefetch: 100})
		if err != nil {
			return
		}
		for {
			nctx, ncancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := sub.Next(nctx)
			ncancel()
			if err != nil {
				break
			}
		}
		_ = sub.Unsubscribe(ctx)
	}
}
