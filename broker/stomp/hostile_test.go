package stomp_test

// Hostile peers: a STOMP "server" on 127.0.0.1:0 that sends malformed or
// oversized frames, stops reading, or sends slowly. The client must fail
// with a clear error (wrapping ErrConnClosed and naming the problem), leave
// no goroutine behind, and never report a message as done that was not:
// a Publish without the broker's RECEIPT fails, an Ack on a broken
// connection fails (so the broker redelivers).
//
// These tests do not call t.Parallel: they count the goroutines of this
// package, which parallel tests would disturb.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/stomp"
)

// hostile is a listener that runs script on every accepted connection
// after answering CONNECT with CONNECTED (unless script is a handshake
// script, see handshake).
type hostile struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// serve answers every connection's CONNECT with connected (a raw frame),
// then runs script. Cleanup closes everything and waits for the scripts.
func serve(t *testing.T, connected string, script func(r *bufio.Reader, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := stomp.NewFrameReader(r, stomp.Limits{}).ReadFrame(); err != nil {
					return
				}
				if _, err := c.Write([]byte(connected)); err != nil {
					return
				}
				script(r, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return ln.Addr().String()
}

const connected = "CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00"

// noLeak fails the test when goroutines running this package's code are
// still alive after it (they get a few seconds to end).
func noLeak(t *testing.T) {
	t.Helper()
	before := stompGoroutines()
	t.Cleanup(func() {
		var now []string
		for i := 0; i < 100; i++ {
			if now = stompGoroutines(); len(now) <= len(before) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("%d goroutine(s) of package stomp left (%d before):\n%s", len(now), len(before), strings.Join(now, "\n\n"))
	})
}

func stompGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "inboxkit/broker/stomp.") && !strings.Contains(g, "broker/stomp_test.") {
			out = append(out, g)
		}
	}
	return out
}

// drain reads and discards frames until the connection ends.
func drain(r *bufio.Reader, c net.Conn) {
	_, _ = bytes.NewBuffer(nil).ReadFrom(r)
}

// answerThen reads the client's first frame (the SUBSCRIBE), answers its
// receipt, then writes raw and drains; with hangup it closes instead.
func answerThen(raw string, hangup bool) func(r *bufio.Reader, c net.Conn) {
	return func(r *bufio.Reader, c net.Conn) {
		f, err := stomp.NewFrameReader(r, stomp.Limits{}).ReadFrame()
		if err != nil {
			return
		}
		if id := f.Value("receipt"); id != "" {
			stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", id))
		}
		if _, err := c.Write([]byte(raw)); err != nil || hangup {
			return
		}
		drain(r, c)
	}
}

func TestHostileMalformedFrames(t *testing.T) {
	big := strings.Repeat("x", 5000)
	for _, tt := range []struct {
		name, raw string
		want      error
	}{
		{"invalid command", "hello there\n\n\x00", stomp.ErrMalformedFrame}, // (an unknown upper-case command is skipped)
		{"header without colon", "MESSAGE\nsubscription\n\n\x00", stomp.ErrMalformedFrame},
		{"bad escape", "MESSAGE\nsubscription:s-1\nk:a\\tb\n\n\x00", stomp.ErrInvalidEncoding},
		{"bad content-length", "MESSAGE\ncontent-length:-4\n\nabcd\x00", stomp.ErrMalformedFrame},
		{"no NUL after body", "MESSAGE\ncontent-length:2\n\nabcd\x00", stomp.ErrMalformedFrame},
		{"binary garbage", "\x00\x01\x02\xff\xfe\n\n\x00", stomp.ErrMalformedFrame},
		// An oversize MESSAGE is skipped and delivered without its body (see
		// TestHostileOversizeMessageSkipped); any other oversize frame is fatal.
		{"oversized receipt", "RECEIPT\nreceipt-id:x\n\n" + big + "\x00", stomp.ErrFrameTooLarge},
		{"oversized content-length", "ERROR\ncontent-length:99999999999\n\n\x00", stomp.ErrFrameTooLarge},
		{"too many headers", "MESSAGE\n" + strings.Repeat("h:v\n", 40) + "\n\x00", stomp.ErrTooManyHeaders},
		{"line too long", "MESSAGE\nk:" + big + "\n\n\x00", stomp.ErrLineTooLong},
		{"cut mid-frame", "MESSAGE\nsubscription:s-1\ncontent-length:100\n\nabc", nil}, // then the server hangs up
	} {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			addr := serve(t, connected, answerThen(tt.raw, tt.want == nil))
			limits := stomp.Limits{MaxBodySize: 1024, MaxHeaders: 16, MaxLineLength: 1024}
			c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{HeartBeat: -1, Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			sub, err := c.Subscribe(testCtx(t), "/queue/q", stomp.SubscribeOptions{Prefetch: 1})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			f, err := sub.Next(testCtx(t))
			if err == nil {
				t.Fatalf("a %s frame was delivered: %s", tt.name, f)
			}
			if !errors.Is(err, stomp.ErrConnClosed) {
				t.Fatalf("err = %v, want one wrapping ErrConnClosed", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want one wrapping %v", err, tt.want)
			}
			<-c.Done()
			if err := c.Send(testCtx(t), "/queue/q", nil, []byte("x")); !errors.Is(err, stomp.ErrConnClosed) {
				t.Fatalf("send on the broken connection: %v", err)
			}
			t.Logf("%s: %v", tt.name, err)
		})
	}
}

// A malformed or hostile answer to CONNECT fails Dial with a clear error.
func TestHostileHandshake(t *testing.T) {
	for _, tt := range []struct{ name, reply, want string }{
		{"garbage", "HTTP/1.1 400 Bad Request\r\n\r\n", "malformed"},
		{"not CONNECTED", "RECEIPT\nreceipt-id:1\n\n\x00", "expected CONNECTED"},
		{"old version", "CONNECTED\nversion:1.0\n\n\x00", "STOMP 1.2"},
		{"error", "ERROR\nmessage:go away\n\n\x00", "go away"},
		{"oversized", "CONNECTED\nversion:1.2\nk:" + strings.Repeat("v", 2000) + "\n\n\x00", "exceeds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			addr := serve(t, tt.reply, drain)
			c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{Limits: stomp.Limits{MaxLineLength: 1024}})
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// A server that says nothing after CONNECT: Dial ends with the context.
func TestHostileSilentHandshake(t *testing.T) {
	noLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			drain(bufio.NewReader(c), c)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = stomp.Dial(ctx, ln.Addr().String(), stomp.ConnOptions{})
	// The socket deadline is the context's: either may be seen first.
	if err == nil || !strings.Contains(err.Error(), "read CONNECTED") ||
		!(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout")) {
		t.Fatalf("err = %v, want the deadline while reading CONNECTED", err)
	}
}

// A server that stops reading: writes block until WriteTimeout, Publish
// fails (the message is not reported as sent), the connection is closed.
func TestHostileServerStopsReading(t *testing.T) {
	noLeak(t)
	stop := make(chan struct{})
	addr := serve(t, connected, func(r *bufio.Reader, c net.Conn) {
		<-stop // never reads again
	})
	defer close(stop)
	pub, err := stomp.Open(testCtx(t), stomp.Config{Addr: addr, Heartbeat: -1, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	body := bytes.Repeat([]byte("x"), 1<<20)
	var perr error
	for i := 0; i < 256; i++ { // until the socket buffers are full and a write times out
		ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
		perr = pub.Publish(ctx, "q", map[string]string{"eventId": "e"}, body)
		cancel()
		if perr == nil {
			t.Fatal("Publish succeeded without a receipt")
		}
		if errors.Is(perr, stomp.ErrConnClosed) {
			break
		}
		if !errors.Is(perr, context.DeadlineExceeded) {
			t.Fatalf("publish: %v", perr)
		}
	}
	t.Logf("publish: %v", perr)
	if !errors.Is(perr, stomp.ErrConnClosed) || !strings.Contains(perr.Error(), "write SEND") || !strings.Contains(perr.Error(), "timeout") {
		t.Fatalf("err = %v, want the write timeout that closed the connection", perr)
	}
}

// A server that never sends the RECEIPT and then hangs up: Publish fails.
func TestHostileNoReceipt(t *testing.T) {
	noLeak(t)
	addr := serve(t, connected, func(r *bufio.Reader, c net.Conn) {
		stomp.NewFrameReader(r, stomp.Limits{}).ReadFrame() // the SEND
		c.Close()
	})
	pub, err := stomp.Open(testCtx(t), stomp.Config{Addr: addr, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(testCtx(t), "q", nil, []byte("x"))
	if !errors.Is(err, stomp.ErrConnClosed) {
		t.Fatalf("publish without receipt: %v, want an error wrapping ErrConnClosed", err)
	}
}

// A server that sends slowly, byte by byte, within the heart-beat
// tolerance: the message arrives intact. Then it breaks the connection
// mid-frame: the delivered message's Ack fails (the broker would redeliver
// it), and the Source reconnects and receives the redelivery.
func TestHostileSlowServerLosesNothing(t *testing.T) {
	noLeak(t)
	msg := "MESSAGE\nsubscription:s-1\nmessage-id:m-1\nack:a-1\neventId:ev-1\ndestination:/queue/q\ncontent-length:5\n\nhello\x00"
	var mu sync.Mutex
	conns := 0
	addr := serve(t, "CONNECTED\nversion:1.2\nheart-beat:100,0\n\n\x00", func(r *bufio.Reader, c net.Conn) {
		mu.Lock()
		conns++
		n := conns
		mu.Unlock()
		fr := stomp.NewFrameReader(r, stomp.Limits{})
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", f.Value("receipt")))
		frame := msg
		if n > 1 {
			frame = strings.Replace(msg, "\nack:a-1", "\nredelivered:true\nack:a-1", 1)
		}
		for i := 0; i < len(frame); i++ { // slowly: 2 ms a byte
			if _, err := c.Write([]byte{frame[i]}); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		if n == 1 {
			c.Write([]byte("MESSAGE\nsubscription:s-1\ncontent-length:50\n\ncut")) // and hang up
			return
		}
		for { // acknowledge what comes
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if id := f.Value("receipt"); id != "" {
				stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", id))
			}
		}
	})
	// The client allows 3 heart-beats of silence per read: 3 s, against
	// the server's 2 ms a byte, however late a loaded machine runs it.
	// AckWait: an Ack that does not wait may be written before the client
	// sees that the server broke the connection.
	src, err := stomp.Open(testCtx(t), stomp.Config{Addr: addr, Queue: "q", Prefetch: 1, Heartbeat: time.Second, AckWait: true,
		Reconnect: inboxkit.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	d, err := src.Receive(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Message(); string(m.Body) != "hello" || m.Header("eventId") != "ev-1" || m.Redelivered {
		t.Fatalf("first delivery: %+v", m)
	}
	if err := d.Ack(testCtx(t)); !errors.Is(err, stomp.ErrConnClosed) {
		t.Fatalf("ack on the connection the server broke: %v, want an error wrapping ErrConnClosed", err)
	}
	d, err = src.Receive(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Message(); string(m.Body) != "hello" || !m.Redelivered {
		t.Fatalf("redelivery: %+v", m)
	}
	if err := d.Ack(testCtx(t)); err != nil {
		t.Fatalf("ack of the redelivery: %v", err)
	}
}

// A server that announces an absurd heart-beat interval must not break the
// connection: 3 × 4,000,000,000,000 ms overflowed time.Duration, the read
// deadline landed in the past and every read timed out at once.
func TestHostileHugeHeartBeat(t *testing.T) {
	noLeak(t)
	addr := serve(t, "CONNECTED\nversion:1.2\nheart-beat:4000000000000,9223372036854775807\n\n\x00", func(r *bufio.Reader, c net.Conn) {
		fr := stomp.NewFrameReader(r, stomp.Limits{})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if id := f.Value("receipt"); id != "" {
				stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", id))
			}
		}
	})
	c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{HeartBeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send, recv := c.HeartBeats()
	if send < 0 || recv < 0 {
		t.Fatalf("negotiated heart-beats %s / %s", send, recv)
	}
	if err := c.Send(testCtx(t), "/queue/q", nil, []byte("x")); err != nil {
		t.Fatalf("send after CONNECTED with a huge heart-beat: %v", err)
	}
}

// An oversize MESSAGE (with or without content-length) reaches the
// subscriber without its body and with Oversize set, so that it can be
// settled; the message behind it arrives intact.
func TestHostileOversizeMessageSkipped(t *testing.T) {
	noLeak(t)
	big := strings.Repeat("x", 5000)
	addr := serve(t, connected, answerThen("MESSAGE\nsubscription:s-1\nack:a-1\n\n"+big+"\x00"+
		"MESSAGE\nsubscription:s-1\nack:a-2\ncontent-length:5000\n\n"+big+"\x00"+
		"MESSAGE\nsubscription:s-1\nack:a-3\n\nok\x00", false))
	c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{HeartBeat: -1, Limits: stomp.Limits{MaxBodySize: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(testCtx(t), "/queue/q", stomp.SubscribeOptions{Prefetch: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		ack      string
		oversize bool
		body     string
	}{{"a-1", true, ""}, {"a-2", true, ""}, {"a-3", false, "ok"}} {
		f, err := sub.Next(testCtx(t))
		if err != nil {
			t.Fatalf("%s: %v", want.ack, err)
		}
		if f.Value("ack") != want.ack || (f.Oversize >= 5000) != want.oversize || string(f.Body) != want.body {
			t.Fatalf("got %s (oversize %d, body %q), want %+v", f, f.Oversize, f.Body, want)
		}
	}
}

// floodThenAck answers the SUBSCRIBE, sends n MESSAGE frames at once (a
// broker ignoring activemq.prefetchSize), then answers every receipt and
// reports the acknowledged ack ids on acked.
func floodThenAck(n int, acked chan<- string) func(r *bufio.Reader, c net.Conn) {
	return func(r *bufio.Reader, c net.Conn) {
		fr := stomp.NewFrameReader(r, stomp.Limits{})
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", f.Value("receipt")))
		var flood bytes.Buffer
		for i := 0; i < n; i++ {
			stomp.WriteFrame(&flood, &stomp.Frame{Command: stomp.CmdMessage, Headers: []stomp.Header{{"subscription", "s-1"},
				{"message-id", fmt.Sprint("m-", i)}, {"ack", fmt.Sprint("a-", i)}, {"eventId", fmt.Sprint("ev-", i)}}, Body: []byte("hello")})
		}
		go c.Write(flood.Bytes()) // the client reads while this writes
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if f.Command == stomp.CmdAck && acked != nil {
				acked <- f.Value("id")
			}
			if id := f.Value("receipt"); id != "" {
				stomp.WriteFrame(c, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", id))
			}
		}
	}
}

// A server that ignores the prefetch and sends 50 messages at once to a
// Source with Prefetch 1: every Ack still gets its RECEIPT (the reader must
// not wait for the consumer while RECEIPTs queue behind the messages), and
// every message arrives once, in order.
func TestHostileServerIgnoresPrefetch(t *testing.T) {
	noLeak(t)
	const n = 50
	acked := make(chan string, n)
	addr := serve(t, connected, floodThenAck(n, acked))
	src, err := stomp.Open(testCtx(t), stomp.Config{Addr: addr, Queue: "q", Prefetch: 1, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := 0; i < n; i++ {
		d, err := src.Receive(testCtx(t))
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got, want := d.Message().Header("eventId"), fmt.Sprint("ev-", i); got != want {
			t.Fatalf("message %d is %s, want %s", i, got, want)
		}
		if err := d.Ack(testCtx(t)); err != nil {
			t.Fatalf("ack %d of %d on a broker that ignores the prefetch: %v", i, n, err)
		}
		if id := <-acked; id != fmt.Sprint("a-", i) {
			t.Fatalf("ack %d sent for %s", i, id)
		}
	}
}

// A server that floods without end: past MaxOverflowMessages the
// connection fails with an error that says so (the broker takes back the
// unacknowledged messages), instead of holding them all in memory.
func TestHostileServerFloodBeyondPrefetch(t *testing.T) {
	noLeak(t)
	addr := serve(t, connected, floodThenAck(stomp.MaxOverflowMessages+10, nil))
	c, err := stomp.Dial(testCtx(t), addr, stomp.ConnOptions{HeartBeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Subscribe(testCtx(t), "/queue/q", stomp.SubscribeOptions{Prefetch: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-testCtx(t).Done():
		t.Fatal("the connection took every message beyond the prefetch")
	}
	err = c.Err()
	if !errors.Is(err, stomp.ErrConnClosed) || !strings.Contains(err.Error(), "beyond the prefetch of 1") {
		t.Fatalf("err = %v, want one saying the broker sent beyond the prefetch", err)
	}
	t.Log(err)
}
