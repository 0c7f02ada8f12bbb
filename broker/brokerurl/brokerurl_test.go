package brokerurl_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/internal/rabbittest"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
	"github.com/inboxkit/inboxkit/observe"
)

// The machine's brokers, with the command that starts each.
var brokers = []struct {
	name, addr, url, start string
}{
	{"activemq", "127.0.0.1:61613", "stomp://%s", "scripts/activemq start"},
	{"rabbitmq", "127.0.0.1:5672", "amqp://guest:guest@%s/", "rabbitmq-server -detached"},
	{"amqp10", "127.0.0.1:5672", "amqp10://guest:guest@%s", "rabbitmq-server -detached; rabbitmq-plugins enable rabbitmq_amqp1_0"},
	{"jetstream", "127.0.0.1:4222", "nats://%s", "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"},
}

func queueName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "inboxkit.test." + strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readyz returns /readyz's status code and its "broker" check.
func readyz(t *testing.T, srv *httptest.Server) (int, observe.CheckResult) {
	t.Helper()
	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var r observe.Readiness
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Checks {
		if c.Name == "broker" {
			return res.StatusCode, c
		}
	}
	t.Fatalf("/readyz has no broker check: %+v", r)
	return 0, observe.CheckResult{}
}

// waitReadyz polls /readyz until it answers want, failing after a minute.
func waitReadyz(t *testing.T, srv *httptest.Server, want int) observe.CheckResult {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, c := readyz(t, srv)
		if code == want {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still answers %d (broker check %+v), want %d", code, c, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReadinessFollowsTheConnection: on every real broker, a source opened
// through brokerurl behind a loopback proxy makes /readyz (observe.Health
// with observe.SourceCheck) answer 200; when the proxy cuts the connection
// and refuses new ones, 503 with the adapter's reason; when the proxy lets
// connections through again, 200 once the adapter has reconnected by
// itself, and it receives again.
func TestReadinessFollowsTheConnection(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			p := tcpproxy.Start(t, bk.addr)
			b, err := brokerurl.Open(fmt.Sprintf(bk.url, p.Addr()), brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			queue := queueName(t)
			if b.URL.Kind == brokerurl.AMQP10 {
				rabbittest.Declare(t, queue)
			}
			t.Cleanup(func() { // not through the proxy, which may be cut
				if direct, err := brokerurl.Open(fmt.Sprintf(bk.url, bk.addr), brokerurl.Options{}); err == nil {
					cleanup(direct, queue)
					direct.Close()
				}
			})
			ctx := ctxFor(t, 2*time.Minute)
			src, err := b.Source(ctx, queue, "readiness", 1)
			if err != nil {
				t.Fatalf("%s not reachable (start it with %s): %v", bk.name, bk.start, err)
			}
			h := observe.NewHealth()
			h.Add("broker", observe.SourceCheck(src))
			srv := httptest.NewServer(observe.Mux(nil, h))
			t.Cleanup(srv.Close)

			if code, c := readyz(t, srv); code != http.StatusOK {
				t.Fatalf("before the cut: /readyz %d %+v, want 200", code, c)
			}
			p.Cut()
			c := waitReadyz(t, srv, http.StatusServiceUnavailable)
			t.Logf("during the cut: 503 %s", c.Error)
			if c.OK || c.Error == "" || strings.Contains(c.Error, "guest:guest") {
				t.Errorf("broker check during the cut: %+v; want a reason without the password", c)
			}
			p.Restore()
			waitReadyz(t, srv, http.StatusOK)

			// The adapter works again: what is published now is received.
			pub, err := b.Publisher(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := pub.Publish(ctx, queue, map[string]string{"eventId": "after-the-cut"}, []byte("x")); err != nil {
				t.Fatalf("publish after the cut: %v", err)
			}
			d, err := src.Receive(ctx)
			if err != nil {
				t.Fatalf("receive after the cut: %v", err)
			}
			if got := d.Message().Header("eventId"); got != "after-the-cut" {
				t.Errorf("received %q, want after-the-cut", got)
			}
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// threeDeadLetters opens the broker at url and publishes three messages
// (eventId e-0, e-1, e-2) to a new queue DLQ.<test name>, removed at test
// end.
func threeDeadLetters(t *testing.T, name, url, start string) (*brokerurl.Broker, context.Context, string) {
	t.Helper()
	b, err := brokerurl.Open(url, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := ctxFor(t, time.Minute)
	queue := "DLQ." + queueName(t)
	if b.URL.Kind == brokerurl.AMQP10 {
		rabbittest.Declare(t, queue)
	}
	pub, err := b.Publisher(ctx)
	if err != nil {
		t.Fatalf("%s not reachable (start it with %s): %v", name, start, err)
	}
	for i := range 3 {
		if err := pub.Publish(ctx, queue, map[string]string{"eventId": fmt.Sprint("e-", i)}, []byte("dead")); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { cleanup(b, queue) })
	return b, ctx, queue
}

// TestDepth: the depth of a queue holding three messages, on every broker
// that can tell without receiving them; AMQP 1.0 says it cannot.
func TestDepth(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			b, ctx, queue := threeDeadLetters(t, bk.name, fmt.Sprintf(bk.url, bk.addr), bk.start)
			n, atLeast, err := b.Depth(ctx, queue)
			if b.URL.Kind == brokerurl.AMQP10 {
				if !errors.Is(err, brokerurl.ErrDepthUnknown) {
					t.Errorf("Depth on AMQP 1.0 = %d, %v; want ErrDepthUnknown", n, err)
				}
				return
			}
			if err != nil || n != 3 || atLeast {
				t.Errorf("Depth = %d, %v, %v; want 3, false, nil", n, atLeast, err)
			}
		})
	}
}

// cleanup removes what TestDepth left on the broker: the queue's messages
// (ActiveMQ) or the queue or stream itself.
func cleanup(b *brokerurl.Broker, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch b.URL.Kind {
	case brokerurl.AMQP:
		if conn, err := amqp.Dial(b.URL.URL); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
			}
			conn.Close()
		}
	case brokerurl.NATS:
		if nc, err := nats.Connect(b.URL.URL); err == nil {
			if js, err := natsjs.New(nc); err == nil {
				_ = js.DeleteStream(ctx, jetstream.StreamName(queue))
			}
			nc.Close()
		}
	case brokerurl.STOMP:
		src, err := b.Source(ctx, queue, "cleanup", 100)
		if err != nil {
			return
		}
		defer src.Close()
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := src.Receive(rctx)
			cancel()
			if err != nil {
				return
			}
			_ = d.Ack(ctx)
		}
	}
}

// TestBrowse: Browse lists a queue's messages and leaves them there, on
// every broker: a queue browser on ActiveMQ, received and handed back on
// the others.
func TestBrowse(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			b, ctx, queue := threeDeadLetters(t, bk.name, fmt.Sprintf(bk.url, bk.addr), bk.start)
			for _, limit := range []int{2, 0} {
				ms, err := b.Browse(ctx, queue, limit)
				var ids []string
				for _, m := range ms {
					ids = append(ids, m.Header("eventId"))
				}
				want := []string{"e-0", "e-1", "e-2"}
				if limit > 0 {
					want = want[:limit]
				}
				if err != nil || strings.Join(ids, " ") != strings.Join(want, " ") {
					t.Errorf("Browse(limit %d) = %v, %v; want %v (the messages stay on the queue)", limit, ids, err, want)
				}
			}
		})
	}
}

// TestBrowseStopsAtTheDepth: where the broker tells a queue's depth
// (RabbitMQ, JetStream), Browse returns once it has read that many, without
// waiting for one more: with an hour's BrowseWait it returns the three
// messages within the test's minute, and they stay on the queue.
func TestBrowseStopsAtTheDepth(t *testing.T) {
	for _, bk := range brokers {
		if bk.name != "rabbitmq" && bk.name != "jetstream" {
			continue
		}
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			_, _, queue := threeDeadLetters(t, bk.name, fmt.Sprintf(bk.url, bk.addr), bk.start)
			b, err := brokerurl.Open(fmt.Sprintf(bk.url, bk.addr), brokerurl.Options{BrowseWait: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			for range 2 { // the second finds them still there
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ms, err := b.Browse(ctx, queue, 0)
				cancel()
				if err != nil || len(ms) != 3 {
					t.Fatalf("Browse with BrowseWait 1h = %d messages, %v; want the 3 at once (it waited for a fourth)", len(ms), err)
				}
			}
		})
	}
}

// TestBrowseAll: with limit 0, Browse reads a queue deeper than the 1000
// unsettled messages a browse was handed before (the soak's ledger missed
// dead letters past them): every message, once, and leaves them there.
// On ActiveMQ the bound is the queue's maxBrowsePageSize (scripts/activemq
// sets 20000).
func TestBrowseAll(t *testing.T) {
	if testing.Short() {
		t.Skip("1100 messages on each broker; skipped with -short")
	}
	const n = 1100
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			b, ctx, queue := threeDeadLetters(t, bk.name, fmt.Sprintf(bk.url, bk.addr), bk.start)
			pub, err := b.Publisher(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := 3; i < n; i++ {
				if err := pub.Publish(ctx, queue, map[string]string{"eventId": fmt.Sprint("e-", i)}, []byte("dead")); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 { // the second browse finds them all still there
				ms, err := b.Browse(ctx, queue, 0)
				ids := map[string]bool{}
				for _, m := range ms {
					ids[m.Header("eventId")] = true
				}
				if err != nil || len(ms) != n || len(ids) != n {
					t.Fatalf("Browse(limit 0) = %d messages, %d distinct, %v; want %d", len(ms), len(ids), err, n)
				}
			}
		})
	}
}

// TestDepthOfAMissingQueue: on RabbitMQ, which can tell, the depth of a
// queue that does not exist is ErrNoSuchQueue, and the queue is not made.
func TestDepthOfAMissingQueue(t *testing.T) {
	b, err := brokerurl.Open("amqp://guest:guest@127.0.0.1:5672/", brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := ctxFor(t, time.Minute)
	queue := queueName(t)
	if _, _, err := b.Depth(ctx, queue); !errors.Is(err, brokerurl.ErrNoSuchQueue) {
		t.Fatalf("Depth of a missing queue = %v; want ErrNoSuchQueue (is RabbitMQ up? rabbitmq-server -detached)", err)
	}
	if exists, known, err := b.QueueExists(ctx, queue); err != nil || !known || exists {
		t.Errorf("QueueExists after Depth = %v, %v, %v; want false, true, nil", exists, known, err)
	}
}

// TestRefused: a broker's refusal of the configuration is told apart from
// an outage (issue 23.15).
func TestRefused(t *testing.T) {
	if !brokerurl.Refused(fmt.Errorf("open: %w", rabbitmq.ErrPreconditionFailed)) {
		t.Error("a RabbitMQ precondition failure is not a refusal")
	}
	if !brokerurl.Refused(fmt.Errorf("open: %w", amqp10.ErrPresettled)) {
		t.Error("an AMQP 1.0 broker that settles deliveries itself is not a refusal")
	}
	if brokerurl.Refused(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) {
		t.Error("a refused TCP connection is an outage, not a refusal of the configuration")
	}
}

// TestQueueTypeFromURL: ?queue-type= on an amqp:// URL gives the type of
// the queue a Source creates, and an existing queue of another type is
// consumed as it is (issue 23.15).
func TestQueueTypeFromURL(t *testing.T) {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("RabbitMQ not reachable (start it with rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	created, existing := queueName(t)+".created", queueName(t)+".existing"
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(created, false, false, false)
		_, _ = ch.QueueDelete(existing, false, false, false)
	})
	if _, err := ch.QueueDeclare(existing, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	for _, tc := range []struct{ url, queue string }{{url + "?queue-type=quorum", created}, {url + "?queue-type=classic", existing}} {
		b, err := brokerurl.Open(tc.url, brokerurl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if _, err := b.Source(ctx, tc.queue, "queue-type", 1); err != nil {
			t.Fatalf("Source(%s) on %s: %v", tc.queue, tc.url, err)
		}
	}
	// Equivalent declarations: both are quorum queues.
	for _, q := range []string{created, existing} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Errorf("%s is not a quorum queue: %v", q, err)
		}
	}
}

// TestHeartbeatFromURL: ?heartbeat= sets the interval that finds a
// partitioned connection (issue 29.3); NATS's is taken off the URL, which
// nats.go would not read; a value that is no interval is refused, naming
// the form to use.
func TestHeartbeatFromURL(t *testing.T) {
	u, err := brokerurl.Parse("nats://127.0.0.1:4222?heartbeat=2s")
	if err != nil {
		t.Fatal(err)
	}
	if u.Heartbeat != 2*time.Second || strings.Contains(u.URL, "heartbeat") {
		t.Errorf("Parse(nats ?heartbeat=2s) = heartbeat %v, URL %q; want 2s and the URL without it", u.Heartbeat, u.URL)
	}
	if _, err := brokerurl.Parse("nats://127.0.0.1:4222?heartbeat=soon"); err == nil || !strings.Contains(err.Error(), "?heartbeat=5s") {
		t.Errorf("Parse(nats ?heartbeat=soon): %v, want an error showing ?heartbeat=5s", err)
	}
	for _, tc := range []struct{ url, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/?heartbeat=1s", "?heartbeat=5"},
		{"stomp://127.0.0.1:61613?heartbeat=-1s", "?heartbeat=5s"},
		{"stomp://127.0.0.1:61613?exclusive=yes", "use true or false"},
		{"amqp://guest:guest@127.0.0.1:5672/?queue-type=lazy", "use quorum, classic or stream"},
	} {
		// Refused when parsed, before any connection: a wrong option is the
		// caller's mistake, not an outage.
		if _, err := brokerurl.Parse(tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s): %v, want an error showing %s", tc.url, err, tc.want)
		}
	}
}

// TestUnknownURLOptionRefused: a query parameter no adapter reads is refused
// by Parse, naming it and the known ones, never silently ignored (a
// mistyped ?single-active-consumer would otherwise drop the order it asks
// for); the password never shows.
func TestUnknownURLOptionRefused(t *testing.T) {
	for _, tc := range []struct{ url, known string }{
		{"stomp://127.0.0.1:61613?prefetch=3", "heartbeat, receipt-timeout, exclusive"},
		{"amqp://guest:secret@127.0.0.1:5672/?single-active=true", "single-active-consumer"},
		{"amqp://guest:secret@h1:5672,h2:5672/?prefetch=x", "queue-type"},
		{"nats://127.0.0.1:4222?replica=3", "heartbeat, replicas"},
		{"amqp10://guest:secret@127.0.0.1:5672?profil=ibmmq", "profile"},
	} {
		_, err := brokerurl.Parse(tc.url)
		if err == nil || !strings.Contains(err.Error(), "unknown query parameter") || !strings.Contains(err.Error(), tc.known) {
			t.Errorf("Parse(%s): %v, want unknown query parameter naming %s", tc.url, err, tc.known)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%s): the error shows the password: %v", tc.url, err)
		}
	}
	for _, ok := range []string{
		"stomp://127.0.0.1:61613,127.0.0.1:61615?heartbeat=2s&receipt-timeout=10s&exclusive=true",
		"amqp://guest:guest@127.0.0.1:5672/?queue-type=quorum&single-active-consumer=true&heartbeat=5&connection_timeout=5000&channel_max=16",
		"nats://127.0.0.1:4222,127.0.0.1:4223?replicas=3&heartbeat=1s",
		"amqp10://guest:guest@127.0.0.1:5672?profile=ibmmq&prefetch=10",
	} {
		if _, err := brokerurl.Parse(ok); err != nil {
			t.Errorf("Parse(%s): %v, want it accepted", ok, err)
		}
	}
}

// TestNATSClusterURL: a NATS URL lists the servers of a cluster after the
// scheme and the credentials once; Parse hands nats.go one whole URL per
// server, each with the credentials and none with the query, and reads
// ?replicas= (issue 29.1). A count JetStream cannot keep is refused.
func TestNATSClusterURL(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"nats://127.0.0.1:14223,127.0.0.1:14224,127.0.0.1:14225?replicas=3&heartbeat=2s",
			"nats://127.0.0.1:14223,nats://127.0.0.1:14224,nats://127.0.0.1:14225"},
		{"nats://u:secret@h1:4222,h2:4222/?replicas=3", "nats://u:secret@h1:4222,nats://u:secret@h2:4222"},
		{"nats://h1:4222,nats://v:pw@h2:4222?replicas=3", "nats://h1:4222,nats://v:pw@h2:4222"},
		{"tls://h1:4222,h2:4222?replicas=3", "tls://h1:4222,tls://h2:4222"},
	} {
		u, err := brokerurl.Parse(tc.raw)
		if err != nil {
			t.Errorf("Parse(%s): %v", tc.raw, err)
			continue
		}
		if u.Kind != brokerurl.NATS || u.URL != tc.want || u.Replicas != 3 {
			t.Errorf("Parse(%s) = kind %s, URL %q, replicas %d; want nats, %q, 3", tc.raw, u.Kind, u.URL, u.Replicas, tc.want)
		}
		if strings.Contains(u.Display, "secret") {
			t.Errorf("Parse(%s).Display %q shows the password", tc.raw, u.Display)
		}
	}
	if u, err := brokerurl.Parse("nats://127.0.0.1:4222"); err != nil || u.Replicas != 0 || u.URL != "nats://127.0.0.1:4222" {
		t.Errorf("Parse(nats://127.0.0.1:4222) = %+v, %v; want the URL as given, replicas 0", u, err)
	}
	for _, raw := range []string{"nats://h1:4222,h2:4222?replicas=7", "nats://h1:4222?replicas=three", "nats://h1:4222,,h3:4222"} {
		_, err := brokerurl.Parse(raw)
		if err == nil || !(strings.Contains(err.Error(), "?replicas=3") || strings.Contains(err.Error(), "nats://h1:4222,h2:4222,h3:4222")) {
			t.Errorf("Parse(%s): %v, want an error showing the form to use", raw, err)
		}
	}
}
