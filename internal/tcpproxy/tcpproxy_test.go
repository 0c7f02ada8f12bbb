package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// echo sends a line and reads the answer, waiting at most wait.
func echo(t *testing.T, c net.Conn, wait time.Duration) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && got != "ping\n" {
		t.Fatalf("echo %q", got)
	}
	return err
}

func dial(t *testing.T, p *tcpproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCutAndRestore(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p)
	if err := echo(t, c, 10*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	// The proxy counts the echo after its write to the client returns, so
	// the client can read the echo before the count has grown: wait for it.
	for deadline := time.Now().Add(10 * time.Second); p.Forwarded() < 10 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if p.Forwarded() != 10 {
		t.Errorf("Forwarded = %d, want 10 (ping and its echo)", p.Forwarded())
	}
	p.Cut()
	if !p.IsCut() {
		t.Error("IsCut = false after Cut")
	}
	if err := echo(t, c, 10*time.Second); err == nil {
		t.Fatal("an open connection still works after Cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if err := echo(t, c2, 10*time.Second); err == nil {
			t.Fatal("a new connection works while cut")
		}
		c2.Close()
	}
	p.Restore()
	if err := echo(t, dial(t, p), 10*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

// After Hang an open connection and a new one stay open and answer
// nothing; what is sent is dropped and counted; Restore lets bytes through
// again.
func TestHang(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p)
	if err := echo(t, c, 10*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Hang()
	for _, conn := range []net.Conn{c, dial(t, p)} {
		err := echo(t, conn, 300*time.Millisecond)
		var ne net.Error
		if ne, _ = err.(net.Error); ne == nil || !ne.Timeout() {
			t.Fatalf("echo while hung: %v, want a timeout (the connection stays open, nothing comes back)", err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); p.Dropped() < 10 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Dropped() != 10 {
		t.Errorf("Dropped = %d, want 10 (two pings)", p.Dropped())
	}
	p.Restore()
	if err := echo(t, dial(t, p), 10*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

// A delayed proxy answers, later; Restore takes the delay away.
func TestDelay(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p)
	p.Delay(300 * time.Millisecond)
	start := time.Now()
	if err := echo(t, c, 10*time.Second); err != nil {
		t.Fatalf("echo while delayed: %v", err)
	}
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Errorf("a round trip took %v with 300ms each way, want at least 600ms", took)
	}
	p.Restore()
	if err := echo(t, c, 10*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

// A limited proxy passes a chunk no faster than its rate.
func TestLimit(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p)
	p.Limit(1000) // bytes per second: "ping\n" takes 5ms each way
	line := make([]byte, 999)
	for i := range line {
		line[i] = 'x'
	}
	line = append(line, '\n')
	start := time.Now()
	if _, err := c.Write(line); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || len(got) != 1000 {
		t.Fatalf("echo of 1000 bytes: %d bytes, %v", len(got), err)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("1000 bytes each way at 1000 B/s took %v, want at least 2s", took)
	}
}

// Garble replaces what travels one way by garbage of the same length;
// Restore ends it.
func TestGarble(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p)
	p.Garble(tcpproxy.ToClient)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) == "ping\n" {
		t.Fatalf("the echo came back unchanged while garbled: %q", got)
	}
	p.Restore()
	if err := echo(t, dial(t, p), 10*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

// GarbleAfter lets each connection's first n frames through intact, then
// garbles the rest of it; a new connection gets n frames again; Restore
// ends it.
func TestGarbleAfter(t *testing.T) {
	p := tcpproxy.Start(t, echoServer(t))
	p.GarbleAfter(tcpproxy.ToClient, 0, 2)
	const sent = "one\x00two\x00three\x00four\x00\n"
	for i := range 2 {
		c := dial(t, p)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(sent)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(sent))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if want := "one\x00two\x00"; string(got[:len(want)]) != want {
			t.Fatalf("connection %d: the first two frames came back as %q, want them intact", i, got[:len(want)])
		}
		if string(got[8:]) == sent[8:] {
			t.Fatalf("connection %d: the frames after the second came back unchanged: %q", i, got)
		}
	}
	if got, want := p.GarbledAfter(), int64(2*(len(sent)-8)); got != want {
		t.Errorf("GarbledAfter() = %d, want %d (the bytes after two frames, two connections)", got, want)
	}
	p.Restore()
	if err := echo(t, dial(t, p), 10*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}
