package stomp_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/stomp"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// brokerConfig returns a Config for the test broker, failing the test when
// the broker cannot be reached.
func brokerConfig(t *testing.T) stomp.Config {
	t.Helper()
	addr := os.Getenv("INBOXKIT_STOMP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:61613"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := stomp.Dial(ctx, addr, stomp.ConnOptions{})
	if err != nil {
		t.Fatalf("ActiveMQ (STOMP) not reachable at %s; start it with `scripts/activemq start`: %v", addr, err)
	}
	c.Disconnect(ctx)
	return stomp.Config{Addr: addr, Heartbeat: 2 * time.Second, Reconnect: inboxkit.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}}
}

func uniqueQueue(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "inboxkit.test." + name + "." + hex.EncodeToString(b)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type bundle struct {
	cfg stomp.Config
	pub *stomp.Adapter // publisher-only
}

func setup(t *testing.T) bundle {
	t.Helper()
	cfg := brokerConfig(t)
	cfg.Queue = uniqueQueue(t)
	pc := cfg
	pc.Queue = ""
	pub, err := stomp.Open(testCtx(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return bundle{cfg: cfg, pub: pub}
}

func newSource(t *testing.T, cfg stomp.Config) *stomp.Adapter {
	t.Helper()
	s, err := stomp.Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func receive(t *testing.T, s *stomp.Adapter, within time.Duration) consumer.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d, err := s.Receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return d
}

func TestRoundTripHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	headers := map[string]string{
		"eventId":        "evt-1",
		"correlation-id": "corr:1",
		"weird":          "a:b\nc\\d\re",
		"key:with:colon": "v",
	}
	body := []byte("hello\x00world")
	if err := b.pub.Publish(ctx, b.cfg.Queue, headers, body); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, b.cfg)
	d := receive(t, s, 10*time.Second)
	m := d.Message()
	for k, v := range headers {
		if m.Header(k) != v {
			t.Errorf("header %q = %q, want %q", k, m.Header(k), v)
		}
	}
	if string(m.Body) != string(body) {
		t.Errorf("body = %q", m.Body)
	}
	if m.Destination != "/queue/"+b.cfg.Queue {
		t.Errorf("destination = %q", m.Destination)
	}
	if !strings.HasPrefix(m.BrokerMessageID, "ID:") {
		t.Errorf("broker message id = %q, want unescaped ID:...", m.BrokerMessageID)
	}
	if m.Redelivered || m.DeliveryCount != 0 {
		t.Errorf("first delivery: redelivered=%v count=%d", m.Redelivered, m.DeliveryCount)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// Ack did not wait for its RECEIPT; Close's DISCONNECT, answered after
	// the frames before it, says the broker has the ACK.
	s.Close()
	left, err := stomp.Browse(ctx, b.cfg, b.cfg.Queue, 0)
	if err != nil || len(left) != 0 {
		t.Fatalf("after ack the queue holds %d messages (%v)", len(left), err)
	}
}

// TestAcksWithoutWaitingFromSeveralHandlers: deliveries acknowledged by
// several goroutines at once, none waiting for its RECEIPT (the default),
// are all acknowledged: after Close nothing is left on the queue and
// nothing comes again.
func TestAcksWithoutWaitingFromSeveralHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	const n = 40
	for i := range n {
		if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": fmt.Sprintf("nr-%d", i)}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cfg := b.cfg
	cfg.Prefetch = 8
	s := newSource(t, cfg)
	ds := make(chan consumer.Delivery)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]bool{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ds {
				if err := d.Ack(ctx); err != nil {
					t.Error(err)
				}
				mu.Lock()
				got[d.Message().Header("eventId")] = true
				mu.Unlock()
			}
		}()
	}
	for range n {
		ds <- receive(t, s, 10*time.Second)
	}
	close(ds)
	wg.Wait()
	if t.Failed() {
		return
	}
	s.Close()
	left, err := stomp.Browse(ctx, b.cfg, b.cfg.Queue, 0)
	if err != nil || len(left) != 0 {
		t.Fatalf("after acks of %d events that did not wait the queue holds %d messages (%v)", len(got), len(left), err)
	}
}

func TestUnackedDeliveryComesAgainRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-2"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s1 := newSource(t, b.cfg)
	d1 := receive(t, s1, 10*time.Second)
	s1.Close()
	if err := d1.Ack(ctx); err == nil {
		t.Fatal("ack after Close succeeded, want an error")
	}
	s2 := newSource(t, b.cfg)
	d2 := receive(t, s2, 10*time.Second)
	m := d2.Message()
	if !m.Redelivered || m.Header("eventId") != "evt-2" {
		t.Fatalf("redelivery: redelivered=%v eventId=%q", m.Redelivered, m.Header("eventId"))
	}
	if err := d2.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRequeueComesAgainNotInDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-3", "correlation-id": "c-3"}, []byte("body")); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, b.cfg)
	d := receive(t, s, 10*time.Second)
	if err := d.Requeue(ctx, 0); err != nil {
		t.Fatal(err)
	}
	d2 := receive(t, s, 10*time.Second)
	m := d2.Message()
	if !m.Redelivered || m.Header(stomp.HeaderRequeued) != "1" || m.Header("eventId") != "evt-3" ||
		m.Header("correlation-id") != "c-3" || string(m.Body) != "body" {
		t.Fatalf("requeued copy: redelivered=%v headers=%v body=%q", m.Redelivered, m.Headers, m.Body)
	}

	// A delayed requeue waits in ActiveMQ's scheduler.
	start := time.Now()
	if err := d2.Requeue(ctx, 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d3 := receive(t, s, 10*time.Second)
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Errorf("delayed requeue came after %s, want >= 700ms", waited)
	}
	if got := d3.Message().Header(stomp.HeaderRequeued); got != "2" {
		t.Errorf("%s = %q, want 2", stomp.HeaderRequeued, got)
	}
	if err := d3.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close() // its DISCONNECT's RECEIPT comes after the broker took the ACK
	for _, q := range []string{b.cfg.Queue, "DLQ." + b.cfg.Queue} {
		msgs, err := stomp.Browse(ctx, b.cfg, q, 0)
		if err != nil || len(msgs) != 0 {
			t.Fatalf("%s holds %d messages (%v), want 0", q, len(msgs), err)
		}
	}
}

func TestNackGoesToActiveMQDLQ(t *testing.T) {
	// Documents why Requeue does not NACK.
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-n"}, []byte("n")); err != nil {
		t.Fatal(err)
	}
	c, err := stomp.Dial(ctx, b.cfg.Addr, stomp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(ctx)
	sub, err := c.Subscribe(ctx, "/queue/"+b.cfg.Queue, stomp.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nack(ctx, f.Value("ack")); err != nil {
		t.Fatal(err)
	}
	msgs, err := stomp.Browse(ctx, b.cfg, "DLQ."+b.cfg.Queue, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("DLQ holds %d messages (%v), want 1", len(msgs), err)
	}
}

func TestPublishReceiptAndClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-4"}, []byte("p")); err != nil {
		t.Fatal(err)
	}
	// The receipt means the broker has it: a browse sees it at once.
	msgs, err := stomp.Browse(ctx, b.cfg, b.cfg.Queue, 0)
	if err != nil || len(msgs) != 1 || msgs[0].Header("persistent") != "true" {
		t.Fatalf("browse after publish: %d messages (%v)", len(msgs), err)
	}

	// A broken connection fails the send.
	c, err := stomp.Dial(ctx, b.cfg.Addr, stomp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.NetConn().Close()
	err = c.Send(ctx, "/queue/"+b.cfg.Queue, nil, []byte("lost"))
	if !errors.Is(err, stomp.ErrConnClosed) {
		t.Fatalf("send on a broken connection: %v, want ErrConnClosed", err)
	}

	// The publisher redials after its connection broke.
	b.pub.Conn().NetConn().Close()
	if err := b.pub.Publish(ctx, b.cfg.Queue, nil, []byte("again")); err != nil {
		// The first publish may race the reader noticing the break; the next must succeed.
		if err := b.pub.Publish(ctx, b.cfg.Queue, nil, []byte("again")); err != nil {
			t.Fatalf("publish after a broken connection: %v", err)
		}
	}

	b.pub.Close()
	if err := b.pub.Publish(ctx, b.cfg.Queue, nil, []byte("x")); !errors.Is(err, consumer.ErrClosed) {
		t.Fatalf("publish after Close: %v, want consumer.ErrClosed", err)
	}
}

func TestBrowseDoesNotConsume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	for i := range 3 {
		if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": fmt.Sprint("evt-b", i)}, []byte("b")); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := stomp.Browse(ctx, b.cfg, b.cfg.Queue, 0)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("browse: %d messages (%v), want 3", len(msgs), err)
	}
	if msgs[0].Header("eventId") != "evt-b0" || msgs[2].Header("eventId") != "evt-b2" {
		t.Errorf("browse order: %q, %q", msgs[0].Header("eventId"), msgs[2].Header("eventId"))
	}
	if two, err := stomp.Browse(ctx, b.cfg, b.cfg.Queue, 2); err != nil || len(two) != 2 {
		t.Fatalf("browse limit 2: %d (%v)", len(two), err)
	}
	if empty, err := stomp.Browse(ctx, b.cfg, uniqueQueue(t), 0); err != nil || len(empty) != 0 {
		t.Fatalf("browse of an empty queue: %d (%v)", len(empty), err)
	}
	s := newSource(t, b.cfg)
	for range 3 {
		d := receive(t, s, 10*time.Second)
		if d.Message().Redelivered {
			t.Error("a browsed message came as redelivered")
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReconnectAfterBrokenConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-5"}, []byte("r")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []error
	b.cfg.ErrorFunc = func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }
	s := newSource(t, b.cfg)
	d1 := receive(t, s, 10*time.Second)
	old := s.Conn()
	old.NetConn().Close() // the connection breaks under the source
	<-old.Done()
	if err := d1.Ack(ctx); !errors.Is(err, stomp.ErrConnClosed) {
		t.Fatalf("ack on the broken connection: %v, want ErrConnClosed", err)
	}
	d2 := receive(t, s, 15*time.Second)
	if m := d2.Message(); !m.Redelivered || m.Header("eventId") != "evt-5" {
		t.Fatalf("after reconnect: redelivered=%v eventId=%q", m.Redelivered, m.Header("eventId"))
	}
	if err := d2.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Error("ErrorFunc was not told about the broken connection")
	}
}

func TestConcurrentPublishReceiveAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Prefetch = 8
	ctx := testCtx(t)
	const producers, perProducer, receivers = 4, 15, 4
	const total = producers * perProducer
	s := newSource(t, b.cfg)

	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range perProducer {
				id := fmt.Sprintf("evt-%d-%d", p, i)
				if err := b.pub.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": id}, []byte(id)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}

	var mu sync.Mutex
	got := map[string]int{}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rwg sync.WaitGroup
	for range receivers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				d, err := s.Receive(rctx)
				if err != nil {
					return
				}
				if err := d.Ack(rctx); err != nil {
					if rctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				got[d.Message().Header("eventId")]++
				n := len(got)
				mu.Unlock()
				if n == total {
					cancel()
				}
			}
		}()
	}
	pwg.Wait()
	rwg.Wait()
	if len(got) != total {
		t.Fatalf("received %d distinct events, want %d", len(got), total)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s received %d times", id, n)
		}
	}
}

func TestSourceClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSource(t, b.cfg)
	s.Close()
	if _, err := s.Receive(testCtx(t)); !errors.Is(err, consumer.ErrClosed) {
		t.Fatalf("receive after close: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	ctx := testCtx(t)
	if _, err := stomp.Open(ctx, stomp.Config{URL: "http://127.0.0.1:61613"}); err == nil || !strings.Contains(err.Error(), "Config.URL") {
		t.Errorf("http URL: %v", err)
	}
	if _, err := stomp.Open(ctx, stomp.Config{Queue: "q", Prefetch: -1}); err == nil || !strings.Contains(err.Error(), "Config.Prefetch") {
		t.Errorf("negative prefetch: %v", err)
	}
}

// TestReceiptTimeoutFromURL: ?receipt-timeout= in the URL bounds the wait
// for a RECEIPT (a broker that reads frames and never answers them), and
// a value that is no positive duration is refused, naming the parameter.
func TestReceiptTimeoutFromURL(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, "0,0", func(r *bufio.Reader, c net.Conn) {
		fr := stomp.NewFrameReader(r, stomp.Limits{})
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	a, err := stomp.Open(ctx, stomp.Config{URL: "stomp://" + addr + "?receipt-timeout=300ms"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Publish(ctx, "q", nil, []byte("x")); err == nil || !strings.Contains(err.Error(), "no receipt for SEND within 300ms") {
		t.Errorf("Publish to a broker that never answers = %v; want the receipt timeout of the URL (300ms)", err)
	}
	for _, v := range []string{"soon", "-1s", "0s"} {
		if err := stomp.CheckURL("stomp://127.0.0.1:61613?receipt-timeout=" + v); err == nil || !strings.Contains(err.Error(), "receipt-timeout=\""+v+"\" is not a positive duration") {
			t.Errorf("receipt-timeout=%s: %v; want a refusal naming it", v, err)
		}
	}
}

// fakeServer accepts one connection, answers CONNECTED with the given
// heart-beat, and then runs script on the connection.
func fakeServer(t *testing.T, heartBeat string, script func(r *bufio.Reader, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		fr := stomp.NewFrameReader(r, stomp.Limits{})
		if _, err := fr.ReadFrame(); err != nil {
			return
		}
		stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdConnected, "version", "1.2", "heart-beat", heartBeat))
		script(r, c)
	}()
	return ln.Addr().String()
}

func TestDeadServerDetected(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, "100,100", func(r *bufio.Reader, c net.Conn) {
		time.Sleep(3 * time.Second) // silent: no heart-beats
	})
	c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{HeartBeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if send, recv := c.HeartBeats(); send != 100*time.Millisecond || recv != 100*time.Millisecond {
		t.Fatalf("negotiated %s/%s", send, recv)
	}
	select {
	case <-c.Done():
		if !strings.Contains(c.Err().Error(), "heart-beat") {
			t.Errorf("err = %v", c.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("silent server not detected")
	}
}

func TestBrokerErrorFailsSend(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, "0,0", func(r *bufio.Reader, c net.Conn) {
		f, err := stomp.NewFrameReader(r, stomp.Limits{}).ReadFrame()
		if err != nil {
			return
		}
		stomp.WriteFrame(c, &stomp.Frame{Command: stomp.CmdError,
			Headers: []stomp.Header{{Key: "message", Value: "not allowed"}, {Key: "receipt-id", Value: f.Value("receipt")}},
			Body:    []byte("details")})
		time.Sleep(200 * time.Millisecond)
	})
	c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Send(testCtx(t), "/queue/x", nil, []byte("x"))
	var be *stomp.BrokerError
	if !errors.As(err, &be) || be.Message != "not allowed" {
		t.Fatalf("send: %v, want a BrokerError", err)
	}
	if err := c.Send(testCtx(t), "/queue/x", nil, nil); !errors.Is(err, stomp.ErrConnClosed) {
		t.Fatalf("send after ERROR: %v", err)
	}
}

func TestHeartBeatWithActiveMQ(t *testing.T) {
	t.Parallel()
	cfg := brokerConfig(t)
	c, err := stomp.Dial(testCtx(t), cfg.Addr, stomp.ConnOptions{HeartBeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(testCtx(t))
	send, recv := c.HeartBeats()
	t.Logf("server %s, heart-beats send %s recv %s", c.Server(), send, recv)
	time.Sleep(time.Second)
	if err := c.Err(); err != nil {
		t.Fatalf("connection died while idle with heart-beats: %v", err)
	}
}

func TestCanceledContextKeepsConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := stomp.Dial(testCtx(t), b.cfg.Addr, stomp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(testCtx(t))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Send(canceled, "/queue/"+b.cfg.Queue, nil, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("send with a canceled context: %v", err)
	}
	if err := c.Send(testCtx(t), "/queue/"+b.cfg.Queue, nil, []byte("y")); err != nil {
		t.Fatalf("the connection did not survive a canceled caller: %v", err)
	}
}

// TestAddressListFailsOver: Config.Addr lists a master and a slave (here
// two proxies in front of the one broker). The source connects to the
// first; when it dies (its port refuses, as a killed ActiveMQ master's
// does) the source reconnects to the next by itself and the delivery whose
// ACK was lost comes again. A first address that refuses from the start
// is passed over by Open (issue 29.1, ActiveMQ master/slave).
func TestAddressListFailsOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testCtx(t)
	master := tcpproxy.Start(t, b.cfg.Addr)
	slave := tcpproxy.Start(t, b.cfg.Addr)
	cfg := b.cfg
	cfg.Addr = master.Addr() + "," + slave.Addr()
	// An Ack that waits for its RECEIPT cannot succeed on the dead
	// master's connection; one that does not may be written before the
	// client sees the connection end (the message comes again all the
	// same).
	cfg.AckWait = true
	if err := b.pub.Publish(ctx, cfg.Queue, map[string]string{"eventId": "evt-m"}, []byte("m")); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, cfg)
	d1 := receive(t, s, 10*time.Second)
	if got := s.Conn().NetConn().RemoteAddr().String(); got != master.Addr() {
		t.Fatalf("connected to %s, want the first address %s", got, master.Addr())
	}
	master.Close() // the master dies: its connections close, its port refuses
	if err := d1.Ack(ctx); err == nil {
		t.Fatal("ack on the dead master's connection succeeded")
	}
	d2 := receive(t, s, 15*time.Second)
	if m := d2.Message(); !m.Redelivered || m.Header("eventId") != "evt-m" {
		t.Fatalf("after the failover: redelivered=%v eventId=%q", m.Redelivered, m.Header("eventId"))
	}
	if got := s.Conn().NetConn().RemoteAddr().String(); got != slave.Addr() {
		t.Errorf("reconnected to %s, want the slave %s", got, slave.Addr())
	}
	if err := d2.Ack(ctx); err != nil {
		t.Fatal(err)
	}

	cfg.Addr = master.Addr() + "," + slave.Addr() // the first refuses from the start
	cfg.Queue = ""
	p, err := stomp.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open with a dead first address: %v", err)
	}
	defer p.Close()
	if err := p.Publish(ctx, b.cfg.Queue, map[string]string{"eventId": "evt-s"}, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, s, 10*time.Second).Message(); m.Header("eventId") != "evt-s" {
		t.Errorf("got %q, want evt-s", m.Header("eventId"))
	}
	cfg.Addr = master.Addr() + ",," + slave.Addr()
	if _, err := stomp.Open(ctx, stomp.Config{URL: "stomp://" + cfg.Addr}); err == nil || !strings.Contains(err.Error(), "host1:61613,host2:61613") {
		t.Errorf("Open with an empty address in the list: %v, want the form to use", err)
	}
}
