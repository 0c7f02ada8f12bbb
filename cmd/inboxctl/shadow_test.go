package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
)

// The shadow tests' own ActiveMQ (scripts/activemq with
// INBOXKIT_ACTIVEMQ_SHADOW): the composite queues below copy each
// production queue to its .shadow queue. OpenWire on a free loopback port
// P, STOMP on P+1, in a directory of P's own, so that two runs on one
// machine do not meet; INBOXKIT_SHADOW_ACTIVEMQ_PORT=P sets P.
var shadowAMQDir, shadowAMQOpenWire, shadowAMQStomp = shadowAMQPorts(os.Getenv("INBOXKIT_SHADOW_ACTIVEMQ_PORT"))

func shadowAMQPorts(p string) (dir, openwire, stomp string) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65534 {
		n = freePortPair()
	}
	return filepath.Join(os.TempDir(), "inboxkit-activemq-shadowtest-"+strconv.Itoa(n)), strconv.Itoa(n), strconv.Itoa(n + 1)
}

// freePortPair returns a loopback port P such that P and P+1 are free now,
// below the kernel's ephemeral range (32768 and up here): a port in that
// range can be taken by any outgoing connection of a parallel test between
// this check and the JVM's bind, which failed a full run once.
func freePortPair() int {
	for {
		n := 17000 + rand.IntN(2999) // clear of the fixed ports of scripts/ and the tests
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(n))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(n+1))
		l.Close()
		if err == nil {
			l2.Close()
			return n
		}
	}
}

const (
	shadowQueueRun  = "shadowtest.invoices" // TestShadowActiveMQ/run
	shadowQueueJava = "shadowtest.java"     // TestShadowActiveMQ/java
	// shadowCopySuffix names the Java queue's second copy, which a second
	// legacy bean consumes for the calibration.
	shadowCopySuffix = ".legacycopy"
	// shadowBugSuffix names a production queue's copy that the build of
	// inboxctl with the seeded bug (build tag inboxkit_seededbug) consumes.
	shadowBugSuffix   = ".rounded" + shadowSuffix
	shadowQueueVerify = "shadowtest.verify" // TestShadowActiveMQ/setup
)

// startShadowActiveMQ starts the test's ActiveMQ with composite queues and
// stops it when the test ends. It fails loudly when it cannot.
func startShadowActiveMQ(t *testing.T) string {
	t.Helper()
	script := filepath.Join("..", "..", "scripts", "activemq")
	env := append(os.Environ(), "INBOXKIT_ACTIVEMQ_DIR="+shadowAMQDir, "INBOXKIT_ACTIVEMQ_OPENWIRE_PORT="+shadowAMQOpenWire,
		"INBOXKIT_ACTIVEMQ_STOMP_PORT="+shadowAMQStomp, "INBOXKIT_ACTIVEMQ_HEAP=256m",
		"INBOXKIT_ACTIVEMQ_TIMEOUT=240", // a JVM start on the shared 2-core machine under parallel tests took over 60s
		"INBOXKIT_ACTIVEMQ_SHADOW="+shadowQueueRun+":"+shadowQueueRun+shadowSuffix+","+shadowQueueJava+":"+shadowQueueJava+shadowSuffix+"+"+shadowQueueJava+shadowCopySuffix+
			"+"+shadowQueueJava+shadowBugSuffix+","+shadowQueueVerify+":"+shadowQueueVerify+shadowSuffix)
	do := func(verb string) {
		cmd := exec.Command(script, verb)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/activemq %s (the shadow tests' broker, %s): %v\n%s", verb, shadowAMQDir, err, out)
		}
	}
	// A broker a killed run left behind may have another config; the
	// cleanup also stops a JVM whose start timed out.
	do("stop")
	t.Cleanup(func() {
		do("stop")
		_ = os.RemoveAll(shadowAMQDir)
	})
	do("start")
	return "stomp://127.0.0.1:" + shadowAMQStomp
}

// checksums returns a digest per table of the database or schema db
// writes to (PostgreSQL: its search_path's schema; MySQL: its database):
// every row as text, sorted. A table created or dropped changes the map.
func checksums(t *testing.T, db *sql.DB, backend string) map[string]string {
	t.Helper()
	q := `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	if backend == dbtest.MySQL {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'`
	}
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	out := map[string]string{}
	for _, tb := range tables {
		rs, err := db.Query("SELECT * FROM " + tb)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rs.Columns()
		var lines []string
		for rs.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, v := range vals {
				fmt.Fprintf(&b, "%q|", v)
			}
			lines = append(lines, b.String())
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		rs.Close()
		slices.Sort(lines)
		sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
		out[strings.ToLower(tb)] = fmt.Sprintf("%d rows %s", len(lines), hex.EncodeToString(sum[:8]))
	}
	return out
}

func wantSameChecksums(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("%s: the production tables changed:\nbefore %v\nafter  %v", what, before, after)
	}
}

// letterService is a recording letter service: every call is logged.
type letterService struct {
	*httptest.Server
	mu    sync.Mutex
	calls []letterCall
}

type letterCall struct {
	Key  string // Idempotency-Key ("" for none)
	Body []byte
}

func newLetterService(t *testing.T) *letterService {
	s := &letterService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.calls = append(s.calls, letterCall{Key: r.Header.Get("Idempotency-Key"), Body: body})
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *letterService) log() []letterCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// count runs a COUNT(*) query.
func count(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// shadowMix is the publish file of the shadow tests: n new invoices of
// known customers, every fifth sent twice (a producer resend), one of an
// unknown customer and one malformed. It returns the file, the messages
// and the distinct events.
func shadowMix(p string, n int) (file string, messages, events int) {
	var lines []string
	for i := 1; i <= n; i++ {
		l := invoiceLine(fmt.Sprintf("%s-%d", p, i), "corr-"+p, fmt.Sprintf("INV-%s-%d", p, i), "K-100")
		lines = append(lines, l)
		if i%5 == 0 {
			lines = append(lines, l)
		}
	}
	lines = append(lines, invoiceLine(p+"-unknown", "corr-"+p, "INV-"+p+"-U", "K-999"),
		`{"headers":{"eventId":"`+p+`-bad","correlationId":"corr-`+p+`"},"body":"{not json"}`)
	return strings.Join(lines, "\n") + "\n", len(lines), n + 2
}

// refuseQuickly runs inboxctl and wants it to refuse (exit 2) within 30s:
// a run whose guard let it start would consume and not exit.
func refuseQuickly(t *testing.T, contains string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("inboxctl %s did not refuse: it was still running after 30s (the guard is gone?)\n%s", strings.Join(args, " "), out)
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitUsage || !strings.Contains(string(out), contains) {
		t.Fatalf("inboxctl %s: want exit 2 with %q, got %v\n%s", strings.Join(args, " "), contains, err, out)
	}
}

// waitShadowDone waits until the shadow database holds a terminal inbox
// row for each of events and the relay recorded every outbox message.
func waitShadowDone(t *testing.T, shadow *sql.DB, events int, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var terminal, pending int
		err := shadow.QueryRow(`SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS IN ('PROCESSED','REJECTED','DEAD_LETTERED')`).Scan(&terminal)
		if err == nil {
			err = shadow.QueryRow(`SELECT COUNT(*) FROM INBOXKIT_OUTBOX WHERE STATUS <> 'SENT'`).Scan(&pending)
		}
		if err == nil && terminal == events && pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shadow run did not settle %d events within 90s (terminal %d, outbox not sent %d, %v)\n%s", events, terminal, pending, err, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shadowCalls counts INBOXKIT_SHADOW_CALLS by kind.
func shadowCalls(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT KIND, COUNT(*) FROM INBOXKIT_SHADOW_CALLS GROUP BY KIND`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShadowActiveMQ runs the shadow consumer on the copy of a composite
// queue of the test's own ActiveMQ: /run with inboxctl on both sides of the
// guard, /java beside the Java legacy bean (issue 26, item 5).
func TestShadowActiveMQ(t *testing.T) {
	t.Parallel()
	broker := startShadowActiveMQ(t)
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		shadowRunTest(t, dbtest.Postgres, broker, shadowQueueRun, func(t *testing.T, n int) {
			file, _, _ := shadowMix("x", n)
			wantCode(t, inboxctl(t, file, "publish", "--broker", broker, "--queue", shadowQueueRun, "--file", "-"), 0, "published")
		}, func(t *testing.T) int {
			b, err := brokerurl.Open(broker, brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			n, _, err := b.Depth(context.Background(), shadowQueueRun)
			if err != nil {
				t.Fatal(err)
			}
			return n
		})
	})
	t.Run("setup", func(t *testing.T) {
		t.Parallel()
		r := inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", shadowQueueVerify)
		wantCode(t, r, 0, `<compositeQueue name="`+shadowQueueVerify+`" forwardOnly="false">`, `<queue physicalName="`+shadowQueueVerify+`.shadow"/>`, "--verify")
		wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", shadowQueueVerify, "--apply"), exitUsage, "cannot be configured over STOMP", "<compositeQueue")
		verify := exec.Command(binary, "shadow", "setup", "--broker", broker, "--queue", shadowQueueVerify, "--verify", "--watch", "3s")
		verify.Env = cleanEnv()
		out := &lockedBuffer{}
		verify.Stdout, verify.Stderr = out, out
		if err := verify.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "setup's watch", func() bool { return strings.Contains(out.String(), "watching") }, out)
		file, msgs, _ := shadowMix("v", 2)
		wantCode(t, inboxctl(t, file, "publish", "--broker", broker, "--queue", shadowQueueVerify, "--file", "-"), 0, "published")
		if err := verify.Wait(); err != nil || !strings.Contains(out.String(), fmt.Sprintf("verified: %d copy(ies) arrived on %s.shadow", msgs, shadowQueueVerify)) {
			t.Fatalf("setup --verify: %v\n%s", err, out)
		}
		wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", shadowQueueVerify, "--verify", "--watch", "1s"),
			exitFindings, "no copy arrived", "the composite queue is in activemq.xml")
	})
	t.Run("java", func(t *testing.T) {
		t.Parallel()
		shadowJavaTest(t, broker)
	})
}

// TestShadowRabbitMQ is TestShadowActiveMQ/run on RabbitMQ and MariaDB: the
// copy is a second queue bound to the exchange ('shadow setup --apply').
func TestShadowRabbitMQ(t *testing.T) {
	t.Parallel()
	broker := rabbittest.URL
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	exchange, queue := "shadowtest.x."+suffix, "shadowtest.q."+suffix
	conn, err := amqp091.Dial(broker)
	if err != nil {
		t.Fatalf("RabbitMQ not reachable at 127.0.0.1:5672 (start it with rabbitmq-server -detached): %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil { // publishes below wait for the broker's confirm
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "invoice.created", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// a connection of their own: the test's channel may be closed by now
		for _, q := range []string{queue, queue + shadowSuffix, "DLQ." + queue + shadowSuffix} {
			dropQueue(t, rabbitURL, q)
		}
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	publish := func(t *testing.T, p string, n int) {
		file, _, _ := shadowMix(p, n)
		for _, line := range strings.Split(strings.TrimSpace(file), "\n") {
			h, body, err := parseEventLine([]byte(line))
			if err != nil {
				t.Fatal(err)
			}
			headers := amqp091.Table{}
			for k, v := range h {
				headers[k] = v
			}
			c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "invoice.created", false, false,
				amqp091.Publishing{Headers: headers, Body: body, DeliveryMode: amqp091.Persistent})
			if err != nil {
				t.Fatal(err)
			}
			if !c.Wait() {
				t.Fatalf("RabbitMQ did not confirm message %s", h["eventId"])
			}
		}
	}
	depth := func(t *testing.T, q string) int {
		t.Helper()
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("queue %s: %v", q, err)
		}
		return info.Messages
	}

	// Without --apply: the plan, nothing changed.
	r := inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange, "--routing-key", "invoice.created")
	wantCode(t, r, 0, "declare queue "+queue+shadowSuffix, `with routing key "invoice.created"`, "nothing changed")
	if ok, err := brokerExists(broker, queue+shadowSuffix); err != nil || ok {
		t.Fatalf("setup without --apply created %s (%v)", queue+shadowSuffix, err)
	}
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue), exitUsage, "needs --exchange", "list_bindings")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue+".mistyped", "--exchange", exchange, "--apply"), exitFindings, "does not exist", "nothing was created")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange+".mistyped", "--apply"), exitUsage, "does not exist", "nothing was created")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange, "--shadow-queue", queue+".copy"), exitUsage, "must end in .shadow")

	// --apply declares, binds and verifies while messages arrive.
	setup := exec.Command(binary, "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange,
		"--routing-key", "invoice.created", "--apply", "--watch", "4s")
	setup.Env = cleanEnv()
	out := &lockedBuffer{}
	setup.Stdout, setup.Stderr = out, out
	if err := setup.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "setup's watch", func() bool { return strings.Contains(out.String(), "watching") }, out)
	publish(t, "rmqv", 3)
	if err := setup.Wait(); err != nil || !strings.Contains(out.String(), "verified: 5 copy(ies) arrived on "+queue+shadowSuffix) {
		t.Fatalf("setup --apply: %v\n%s", err, out)
	}
	// Verification with no traffic fails, naming both causes.
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange, "--verify", "--watch", "1s"),
		exitFindings, "no copy arrived", "longer --watch", "--routing-key")
	// The copies of the verification are not part of the run below.
	if _, err := ch.QueuePurge(queue+shadowSuffix, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueuePurge(queue, false); err != nil {
		t.Fatal(err)
	}

	shadowRunTest(t, dbtest.MySQL, broker, queue, func(t *testing.T, n int) { publish(t, "x", n) },
		func(t *testing.T) int { return depth(t, queue) })
	if n := depth(t, queue+shadowSuffix); n != 0 {
		t.Errorf("%d message(s) left on the shadow copy", n)
	}
}

func brokerExists(broker, queue string) (bool, error) {
	b, err := brokerurl.Open(broker, brokerurl.Options{})
	if err != nil {
		return false, err
	}
	defer b.Close()
	ok, _, err := b.QueueExists(context.Background(), queue)
	return ok, err
}

// shadowRunTest is the shadow run of issue 26, item 2, on one broker and
// database: the guard refuses the production database (by URL, by
// identity, through the search path) and the production queue; then a
// shadow run over the copy of a known mix leaves the production tables,
// the production queue and the letter service as they were, and the
// shadow database holds its effects and the record of its sends.
// publish sends n new invoices (shadowMix) to the production queue;
// prodDepth reads its depth.
func shadowRunTest(t *testing.T, backend, broker, queue string, publish func(t *testing.T, n int), prodDepth func(t *testing.T) int) {
	prod, shadow := dbtest.New(t, backend), dbtest.New(t, backend)
	prodURL, shadowURL := dbURL(t, prod), dbURL(t, shadow)
	wantCode(t, inboxctl(t, "", "migrate", "--db", prodURL, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, "", "migrate", "--db", shadowURL, "--seed-customers"), 0, "migrated") // reference data copied
	// Production has rows of its own.
	if _, err := prod.Exec(`INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES ('L-1', 'INV-0', 'K-100', 'old-1', CURRENT_TIMESTAMP)`); err != nil {
		t.Fatal(err)
	}
	letters := newLetterService(t)
	const n = 10
	publish(t, n)
	_, messages, events := shadowMix("x", n)
	shadowQueue := queue + shadowSuffix
	before := checksums(t, prod.DB, backend)
	waitFor(t, fmt.Sprintf("%d messages on the production queue", messages), func() bool { return prodDepth(t) == messages },
		dump(func() string { return fmt.Sprintf("the production queue holds %d message(s)", prodDepth(t)) }))

	// The guard: each refusal changes nothing.
	run := func(db, production, q string) []string {
		return []string{"run", "--shadow", "--db", db, "--production-db", production, "--broker", broker, "--queue", q, "--letter-service", letters.URL}
	}
	refuseQuickly(t, "is the production database", run(prodURL, prodURL, shadowQueue)...)
	sameDB := prodURL + "&application_name=shadow"
	if backend == dbtest.MySQL {
		sameDB = strings.Replace(prodURL, "root@127.0.0.1", "root@localhost", 1)
	}
	refuseQuickly(t, "is the production database", run(sameDB, prodURL, shadowQueue)...)
	refuseQuickly(t, "does not end in .shadow", run(shadowURL, prodURL, queue)...)
	refuseQuickly(t, "needs --production-db", "run", "--shadow", "--db", shadowURL, "--broker", broker, "--queue", shadowQueue)
	if backend == dbtest.Postgres {
		// An empty shadow schema before the production schema in the
		// search path: the tables would resolve to production's.
		empty := dbtest.New(t, backend)
		u, _ := url.Parse(prodURL)
		q := u.Query()
		q.Set("search_path", schemaOf(t, empty.DSN)+","+schemaOf(t, prodURL))
		u.RawQuery = q.Encode()
		refuseQuickly(t, "is the production table", run(u.String(), prodURL, shadowQueue)...)
	}
	wantSameChecksums(t, "after the refusals", before, checksums(t, prod.DB, backend))

	// The shadow run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, logs := startRun(ctx, t, append(run(shadowURL, prodURL, shadowQueue)[1:], "--reject-queue", queue+".rejected", "--log-format", "json")...)
	waitShadowDone(t, shadow.DB, events, logs)
	stopRun(t, cmd, logs)

	wantSameChecksums(t, "after the shadow run", before, checksums(t, prod.DB, backend))
	// The shadow database is not run or relayed for real.
	refuseQuickly(t, "is a shadow database", "run", "--db", shadowURL, "--broker", broker, "--queue", shadowQueue, "--letter-service", letters.URL)
	refuseQuickly(t, "is a shadow database", "relay", "--db", shadowURL, "--broker", broker)
	if c := letters.log(); len(c) != 0 {
		t.Errorf("the letter service got %d call(s) from the shadow run, want none: %q", len(c), c)
	}
	if d := prodDepth(t); d != messages {
		t.Errorf("the production queue holds %d message(s) after the shadow run, want %d: it acknowledged only its copy", d, messages)
	}
	// The shadow database holds the effects, and what it would have sent.
	if got := count(t, shadow.DB, `SELECT COUNT(*) FROM shipping_letters`); got != n {
		t.Errorf("shadow shipping_letters: %d rows, want %d", got, n)
	}
	for status, want := range map[string]int{"PROCESSED": n, "REJECTED": 1, "DEAD_LETTERED": 1} {
		if got := count(t, shadow.DB, `SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE STATUS = '`+status+`'`); got != want {
			t.Errorf("shadow inbox: %d %s row(s), want %d", got, status, want)
		}
	}
	calls := shadowCalls(t, shadow.DB)
	if calls[shadowKindOutbox] != n || calls[shadowKindDeadLetter] != 1 || calls[shadowKindReject] != 1 || len(calls) != 3 {
		t.Errorf("recorded calls %v, want %d outbox, 1 dead-letter, 1 reject", calls, n)
	}
	var dest, headers string
	if err := shadow.QueryRow(`SELECT DESTINATION, HEADERS FROM INBOXKIT_SHADOW_CALLS WHERE KIND = 'outbox' AND CAUSE_EVENT_ID = 'x-1'`).Scan(&dest, &headers); err != nil {
		t.Fatal(err)
	}
	if dest != letters.URL || !strings.Contains(headers, `"Idempotency-Key"`) {
		t.Errorf("recorded letter request of x-1: destination %s headers %s; want %s with its Idempotency-Key", dest, headers, letters.URL)
	}
}

// schemaOf is the search_path of a PostgreSQL URL.
func schemaOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// TestShadowSetupJetStream: the copy is a second durable on a stream that
// keeps acknowledged messages; a work-queue stream is refused with the fix.
func TestShadowSetupJetStream(t *testing.T) {
	t.Parallel()
	const broker = "nats://127.0.0.1:4222"
	nc, err := nats.Connect(broker)
	if err != nil {
		t.Fatalf("NATS JetStream not reachable at 127.0.0.1:4222 (start it with nats-server -js): %v", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sfx := strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36))
	subject, wq := "shadowtest.js."+sfx, "shadowtest.jswq."+sfx
	// The streams as inboxkit's adapter names them (it reads no other).
	for name, cfg := range map[string]natsjs.StreamConfig{
		jetstream.StreamName(subject): {Subjects: []string{subject}, Retention: natsjs.LimitsPolicy},
		jetstream.StreamName(wq):      {Subjects: []string{wq}, Retention: natsjs.WorkQueuePolicy},
	} {
		cfg.Name = name
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", subject), 0,
		"create durable invoice-consumer_shadow", "--consumer invoice-consumer.shadow", "nothing changed")
	setup := exec.Command(binary, "shadow", "setup", "--broker", broker, "--queue", subject, "--apply", "--watch", "3s")
	setup.Env = cleanEnv()
	out := &lockedBuffer{}
	setup.Stdout, setup.Stderr = out, out
	if err := setup.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "setup's watch", func() bool { return strings.Contains(out.String(), "watching") }, out)
	for i := range 3 {
		if _, err := js.Publish(ctx, subject, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := setup.Wait(); err != nil || !strings.Contains(out.String(), "verified: 3 copy(ies) arrived on invoice-consumer.shadow") {
		t.Fatalf("setup --apply: %v\n%s", err, out)
	}
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", broker, "--queue", wq, "--apply"), exitUsage, "work-queue", "limits retention")
	wantCode(t, inboxctl(t, "", "run", "--shadow", "--broker", broker, "--queue", subject, "--db", "sqlite:"+filepath.Join(t.TempDir(), "s.db")),
		exitUsage, "--consumer \"invoice-consumer\" must end in .shadow")

	// The shadow run reads the durable: the three bodies are not invoices,
	// so it records three dead letters; the stream keeps its messages for
	// the production consumer. SQLite is refused.
	refuseQuickly(t, "not SQLite", "run", "--shadow", "--db", "sqlite:"+filepath.Join(t.TempDir(), "s.db"), "--production-db", "sqlite:"+filepath.Join(t.TempDir(), "p.db"),
		"--broker", broker, "--queue", subject, "--consumer", "invoice-consumer.shadow")
	prod, shadow := dbtest.New(t, dbtest.Postgres), dbtest.New(t, dbtest.Postgres)
	wantCode(t, inboxctl(t, "", "migrate", "--db", prod.DSN), 0, "migrated")
	wantCode(t, inboxctl(t, "", "migrate", "--db", shadow.DSN), 0, "migrated")
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	run, logs := startRun(rctx, t, "--shadow", "--db", shadow.DSN, "--production-db", prod.DSN, "--broker", broker,
		"--queue", subject, "--consumer", "invoice-consumer.shadow")
	waitFor(t, "three dead letters recorded", func() bool {
		var n int
		_ = shadow.QueryRow(`SELECT COUNT(*) FROM INBOXKIT_SHADOW_CALLS WHERE KIND = 'dead-letter'`).Scan(&n)
		return n == 3
	}, logs)
	stopRun(t, run, logs)
	info, err := js.Stream(ctx, jetstream.StreamName(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 3 {
		t.Errorf("the stream holds %d message(s) after the shadow run, want 3", n)
	}
}

// TestShadowSetupIBMMQ: the MQSC text (untested against a queue manager:
// there is none here) and the refusals over AMQP 1.0.
func TestShadowSetupIBMMQ(t *testing.T) {
	t.Parallel()
	ibm := "amqp10://app:secret@mq.example:5672?profile=ibmmq"
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", ibm, "--queue", "INVOICES"), 0,
		"DEFINE QLOCAL('INVOICES.shadow')", "ALTER QLOCAL(INVOICES) STREAMQ('INVOICES.shadow') STRMQOS(BESTEF)", "untested", "CURDEPTH")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", ibm, "--queue", "INVOICES", "--apply"), exitUsage, "runmqsc")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--broker", "amqp10://app:secret@artemis.example:5672", "--queue", "invoices"), exitUsage, "divert")
	wantCode(t, inboxctl(t, "", "shadow", "setup", "--queue", "invoices", "--broker", "stomp://127.0.0.1:1", "--shadow-queue", "copy"), exitUsage, "must end in .shadow")
}
