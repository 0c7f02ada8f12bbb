package golden

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
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
// table and the outbox table INBOXKIT_OUTBOX (each if the process created
// it), and the queue, DLQ.<queue> and <queue>.REJECTED. A step is quiet only
// when no outbox message is PENDING (a relay has yet to send it).
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
// kills the calling process (SIGKILL to its process group; the instance
// whose URL the call went to, which for a call an outbox relay makes is the
// instance that wrote the request) from inside the next call, records what the service did with it (sent, or a duplicate
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
	r.out.tr.Elapsed = time.Since(began)
	return r.out.tr, nil
}

// bbRun is one black-box recording.
type bbRun struct {
	sc       *Scenario
	bb       BlackBox
	label    string // heads the transcript
	what     string // names the recording in bb.Log
	out      *writer
	closeFns []func()

	// Database and proxy (blackbox_db.go).
	schema    string
	admin, db *sql.DB
	proxy     *tcpproxy.Proxy

	// Broker: what the processes are told, and the recorder's connection.
	queue                  string
	openWire, openWireFrom string // EnvOpenWire ("": not set) and why
	stompCfg               stomp.Config
	pub                    *stomp.Adapter

	// The downstream service (blackbox_service.go).
	srv        *http.Server
	serviceURL string
	serviceRe  *regexp.Regexp // serviceURL and an instance number

	// Process group (blackbox_proc.go).
	procs []*bbProc
	ready *regexp.Regexp

	// mu guards what follows, procs and each bbProc's state.
	mu      sync.Mutex
	svc     *services
	hold    int // calls to hold until this many arrived (parallel send)
	arrived int // calls held so far
	holdCh  chan struct{}
	events  []string  // process events of the current step
	changes int       // process starts and kills
	outBuf  []byte    // the processes' last output
	outAt   time.Time // last output of any process
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
	r.out = newWriter(r.bb.Name)
	suffix := randomSuffix()
	r.schema = "golden_bb_" + suffix
	r.queue = r.sc.Queue + ".bb" + suffix
	if err := r.openDatabase(ctx); err != nil {
		return err
	}
	if err := r.openBroker(ctx); err != nil {
		return err
	}
	if err := r.serveService(); err != nil {
		return err
	}
	// The instances, and a wait until each one consumes.
	for i := 1; i <= r.sc.Instances; i++ {
		if err := r.start(i); err != nil {
			return err
		}
	}
	return r.waitReady(ctx)
}

// openBroker connects the recorder to the broker (it publishes the
// scenario's messages and browses the queues) and logs what the processes
// are told.
func (r *bbRun) openBroker(ctx context.Context) error {
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
	return nil
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

func (r *bbRun) play(ctx context.Context) error {
	title := "golden black-box transcript"
	if r.label != "" {
		title += ": " + r.label
	}
	r.out.header(title, r.sc)
	r.out.section("steps")
	for i, st := range r.sc.Steps {
		n := i + 1
		switch st.Kind {
		case StepNote:
			r.out.step(n, "note: %s", st.Text)
		case StepFail:
			r.mu.Lock()
			r.svc.fails[st.Service] += st.Count
			r.mu.Unlock()
			r.out.step(n, "fault: the next %d call(s) of %s fail (HTTP 503)", st.Count, st.Service)
		case StepCrash:
			r.mu.Lock()
			r.svc.during[st.Service]++
			r.mu.Unlock()
			r.out.step(n, "fault: the process is killed (kill -9) during the next call of %s", st.Service)
		case StepDatabase:
			if st.Point == "down" {
				r.proxy.Cut()
				r.out.step(n, "fault: the database is unreachable (the recorder's proxy drops and refuses connections)")
				break
			}
			r.proxy.Restore()
			r.out.step(n, "the database is reachable again")
			if err := r.settle(ctx); err != nil {
				return fmt.Errorf("golden: step %d (database up): %w", n, err)
			}
			r.mu.Lock()
			ncalls := len(r.svc.calls)
			r.mu.Unlock()
			r.out.item("quiet; %d call(s) of %s so far", ncalls, r.bb.Service)
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
				r.out.step(n, "send %s parallel %d (%d copies at once; calls of %s held until %d arrived)", m.Name, st.Parallel, st.Parallel, r.bb.Service, st.Parallel)
			} else {
				r.out.step(n, "send %s", m.Name)
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
				r.out.item("%s", e)
			}
			r.out.item("quiet; %d call(s) of %s so far", ncalls, r.bb.Service)
		}
	}
	r.stopAll()
	return r.final(ctx)
}
