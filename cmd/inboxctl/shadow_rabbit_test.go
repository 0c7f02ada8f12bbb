package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/dbtest"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/invoice/legacy"
)

// seededBugBinary builds, once, inboxctl with the build tag
// inboxkit_seededbug (variant_seededbug.go): its run uses roundingHandler.
var seededBugBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(binary), "inboxctl-seededbug")
	build := exec.Command("go", "build", "-tags", "inboxkit_seededbug", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -tags inboxkit_seededbug: %v\n%s", err, out)
	}
	return bin, nil
})

// legacyDeliveryLimit is the production queue's x-delivery-limit: a message
// the legacy bean threw back is redelivered this many times, then the
// broker dead-letters it (the Java run's INBOXKIT_MAX_REDELIVERIES).
const legacyDeliveryLimit = 2

// TestShadowRabbitLegacy is issue 26, item 5, on RabbitMQ: the Go port of
// the legacy bean (invoice/legacy) consumes the production queue (a quorum
// queue whose delivery limit dead-letters what the bean keeps throwing
// back, as the bean's broker does) into the production database and calls
// the letter service; `shadow setup --apply` binds two copies; `run
// --shadow` consumes one into a shadow database, and a build of inboxctl
// with the seeded bug (build tag inboxkit_seededbug: the letter's amount
// rounded) the other into a second one. The producer's traffic is the Java
// run's (javaMix: 5 % resends, 2 % malformed, 1 % unknown customers), paced
// at INBOXKIT_SHADOW_RATE (100 msg/s); INBOXKIT_SHADOW_EVENTS events
// (default 200). Then `shadow diff` of the production database and the
// shadow: exit 0, each event in the category the traffic put it in, 0
// unexpected; of the production database and the seeded bug's: exit 1,
// naming exactly the events whose amount has cents and letters.body.amount.
// On PostgreSQL and MariaDB.
func TestShadowRabbitLegacy(t *testing.T) {
	if testing.Short() {
		t.Skip("a live shadow run of tens of seconds per database: not under -short")
	}
	t.Parallel()
	for _, backend := range []string{dbtest.Postgres, dbtest.MySQL} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			shadowRabbitLegacyTest(t, backend)
		})
	}
}

func shadowRabbitLegacyTest(t *testing.T, backend string) {
	n, rate := envInt(t, envShadowEvents, 200), envInt(t, envShadowRate, 100)
	bugBin, err := seededBugBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	broker := rabbittest.URL
	sfx := strconv.FormatInt(time.Now().UnixNano(), 36)
	exchange, queue := "shadowlive.x."+sfx, "shadowlive."+backend+"."+sfx
	copyQueue, bugQueue, dlq := queue+shadowSuffix, queue+shadowBugSuffix, "DLQ."+queue
	conn, err := amqp091.Dial(broker)
	if err != nil {
		t.Fatalf("RabbitMQ not reachable at 127.0.0.1:5672 (start it with rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { conn.Close() }) // after the cleanup below, which deletes on it
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum",
		"x-delivery-limit": legacyDeliveryLimit, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "invoice.created", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range []string{queue, copyQueue, bugQueue, dlq} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	depth := func(q string) int {
		t.Helper()
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("queue %s: %v", q, err)
		}
		return info.Messages
	}

	// The production database (the bean's business tables only) and two
	// shadow databases.
	prod, shadow, bug := dbtest.New(t, backend), dbtest.New(t, backend), dbtest.New(t, backend)
	prodURL, shadowURL, bugURL := dbURL(t, prod), dbURL(t, shadow), dbURL(t, bug)
	d, err := inbox.DialectByName(backend)
	dbtest.Must(t, err, "dialect")
	dbtest.Must(t, invoice.Migrate(ctx, prod.DB, backend), "invoice tables")
	dbtest.Must(t, invoice.SeedCustomers(ctx, prod.DB, d), "customers")
	wantCode(t, inboxctl(t, "", "migrate", "--db", shadowURL, "--seed-customers"), 0, "migrated")
	wantCode(t, inboxctl(t, "", "migrate", "--db", bugURL, "--seed-customers"), 0, "migrated")
	letters := newLetterService(t)

	// The legacy bean on the production queue: nil acknowledges, an error
	// (the bean's thrown exception) hands the message back to the broker.
	mdb, err := legacy.New(legacy.Config{DB: prod.DB, Dialect: d, Letters: httpLetters(letters.URL)})
	dbtest.Must(t, err, "legacy bean")
	legacyCtx, stopLegacy := context.WithCancel(ctx)
	legacyDone := runLegacyBean(legacyCtx, t, conn, queue, mdb)
	defer func() { stopLegacy(); <-legacyDone }()

	// The two copies, configured while the traffic starts: each setup
	// declares and binds its copy, then watches it grow.
	msgs, valid, malformed, unknown, resends := javaMix(n)
	var setups []*exec.Cmd
	var setupOuts []*lockedBuffer
	for _, q := range []string{copyQueue, bugQueue} {
		setup := exec.Command(binary, "shadow", "setup", "--broker", broker, "--queue", queue, "--exchange", exchange,
			"--routing-key", "invoice.created", "--shadow-queue", q, "--apply", "--watch", "3s")
		setup.Env = cleanEnv()
		out := &lockedBuffer{}
		setup.Stdout, setup.Stderr = out, out
		if err := setup.Start(); err != nil {
			t.Fatal(err)
		}
		setups, setupOuts = append(setups, setup), append(setupOuts, out)
	}
	for _, out := range setupOuts {
		waitFor(t, "setup's watch", func() bool { return strings.Contains(out.String(), "watching") }, out)
	}
	began := time.Now()
	var pubTime time.Duration
	published := make(chan error, 1)
	go func() {
		var err error
		pubTime, err = publishPaced(ctx, conn, exchange, msgs, rate)
		published <- err
	}()
	for i, setup := range setups {
		if err := setup.Wait(); err != nil || !strings.Contains(setupOuts[i].String(), "verified:") {
			t.Fatalf("shadow setup --apply: %v\n%s", err, setupOuts[i])
		}
	}

	// The shadow runs on the copies: the refactored consumer, and its
	// build with the seeded bug.
	run, logs := startBinary(ctx, t, binary, nil, shadowRunArgs(shadowURL, prodURL, broker, copyQueue, letters.URL)...)
	bugRun, bugLogs := startBinary(ctx, t, bugBin, nil, shadowRunArgs(bugURL, prodURL, broker, bugQueue, letters.URL)...)
	if err := <-published; err != nil {
		t.Fatal(err)
	}

	// Both sides process everything: the bean a letter per valid message,
	// resends included, the broker's DLQ the rest after the delivery
	// limit; each shadow a terminal row per event.
	legacyLetters := valid + resends
	deadline := time.Now().Add(max(2*time.Minute, time.Duration(len(msgs))*50*time.Millisecond))
	for {
		l, dl := count(t, prod.DB, `SELECT COUNT(*) FROM shipping_letters`), depth(dlq)
		s, sb := shadowSettled(t, shadow.DB), shadowSettled(t, bug.DB)
		if l == legacyLetters && dl == malformed+unknown && depth(queue) == 0 && s == n && sb == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done: the legacy bean has %d of %d letters, %d of %d dead letters, %d on its queue; the shadows %d and %d of %d events settled\n%s\n%s",
				l, legacyLetters, dl, malformed+unknown, depth(queue), s, sb, n, logs, bugLogs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitShadowDone(t, shadow.DB, n, logs)
	waitShadowDone(t, bug.DB, n, bugLogs)
	stopRun(t, run, logs)
	stopRun(t, bugRun, bugLogs)
	stopLegacy()
	<-legacyDone
	t.Logf("%s: %d events (%d messages: %d resends, %d malformed, %d unknown customers) published in %s (%.0f msg/s, paced at %d); all settled after %s",
		backend, n, len(msgs), resends, malformed, unknown, pubTime.Round(time.Millisecond), float64(len(msgs))/pubTime.Seconds(), rate, time.Since(began).Round(time.Millisecond))
	wantVariantLogged(t, bugLogs)

	// Nothing from the shadows in production: the letter service saw the
	// bean's calls only (no Idempotency-Key: the shadow relay's would carry
	// one), the production database has no table of theirs.
	calls := letters.log()
	wantBeanCallsOnly(t, calls, legacyLetters)
	if got := len(checksums(t, prod.DB, backend)); got != 3 {
		t.Errorf("the production database has %d tables, want the bean's 3: %v", got, checksums(t, prod.DB, backend))
	}
	for _, q := range []string{copyQueue, bugQueue, "DLQ." + copyQueue, "DLQ." + bugQueue} {
		if ok, err := brokerExists(broker, q); err != nil {
			t.Fatal(err)
		} else if ok && depth(q) != 0 {
			t.Errorf("%d message(s) left on %s", depth(q), q)
		}
	}
	for _, db := range []*sql.DB{shadow.DB, bug.DB} {
		wantShadowOutcomes(t, db, d, valid, malformed, unknown)
	}

	// The legacy side's outgoing effects beside its business rows.
	var dead []inboxkit.Message
	for {
		m, ok, err := ch.Get(dlq, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		dead = append(dead, inboxkit.Message{BrokerMessageID: m.MessageId, Headers: stringHeaders(m.Headers), Body: m.Body})
	}
	writeLegacyCalls(ctx, t, prod.DB, d, letters.URL, calls, dlq, dead)

	// The reconciliation: the expected categories, 0 unexpected; against
	// the seeded bug's shadow, exactly the events whose amount has cents.
	exp := javaMixExpected(msgs)
	wantReconciled(t, backend+": ", prodURL, shadowURL, exp)
	wantSeededBugFound(t, backend+": ", prodURL, bugURL, exp)
}

// httpLetters is the legacy bean's letter client: a POST of the letter
// request to url, without an Idempotency-Key; anything but 2xx is thrown.
func httpLetters(url string) invoice.LetterService {
	return invoice.LetterServiceFunc(func(ctx context.Context, l invoice.Letter, _ string) error {
		b, err := json.Marshal(invoice.NewLetterRequest(l))
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("letter service: %s", resp.Status)
		}
		return nil
	})
}

// runLegacyBean consumes queue with the legacy bean as its container would:
// two sessions, each message acknowledged when OnMessage returns nil and
// handed back (nack, requeue) when it throws. When ctx ends it cancels the
// consumers, hands back what is still delivered and closes the channels
// (amqp091 cannot close a channel while a delivery waits to be read); the
// returned channel is closed then.
func runLegacyBean(ctx context.Context, t *testing.T, conn *amqp091.Connection, queue string, mdb *legacy.MDB) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var chans []*amqp091.Channel
	for i := range 2 {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		tag := fmt.Sprintf("legacy-%d", i)
		ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
		go func() {
			<-ctx.Done()
			_ = ch.Cancel(tag, false) // closes ds once the deliveries in flight are read
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dl := range ds {
				if ctx.Err() != nil {
					_ = dl.Nack(false, true)
					continue
				}
				h := stringHeaders(dl.Headers)
				m := inboxkit.Message{ID: h["eventId"], Headers: h, Body: dl.Body, Redelivered: dl.Redelivered}
				if mdb.OnMessage(ctx, m) == nil {
					_ = dl.Ack(false)
				} else {
					_ = dl.Nack(false, true)
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		for _, ch := range chans {
			_ = ch.Close()
		}
		close(done)
	}()
	return done
}

// publishPaced publishes msgs to exchange with routing key
// invoice.created, message i due at start + i/rate (a late one at once),
// and waits for the broker's confirms. It returns the time from the first
// publish to the last confirm.
func publishPaced(ctx context.Context, conn *amqp091.Connection, exchange string, msgs []javaEvent, rate int) (time.Duration, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	began := time.Now()
	confirms := make([]*amqp091.DeferredConfirmation, 0, len(msgs))
	for i, m := range msgs {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "invoice.created", false, false, amqp091.Publishing{
			Headers: amqp091.Table{"eventId": m.id, "correlationId": "corr-rabbit"}, Body: []byte(m.body), DeliveryMode: amqp091.Persistent})
		if err != nil {
			return 0, err
		}
		confirms = append(confirms, c)
	}
	for i, c := range confirms {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			return 0, fmt.Errorf("RabbitMQ did not confirm message %s (%v)", msgs[i].id, err)
		}
	}
	return time.Since(began), nil
}

// stringHeaders are the string-valued headers of an AMQP 0-9-1 message.
func stringHeaders(t amqp091.Table) map[string]string {
	h := map[string]string{}
	for k, v := range t {
		if s, ok := v.(string); ok {
			h[k] = s
		}
	}
	return h
}
