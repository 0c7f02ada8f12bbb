// Package tcpproxy is a loopback TCP proxy that puts faults between a
// client and a server without touching the server (the shared services of
// the machine are never stopped): put the proxy between them, then
//
//   - Cut it: every open connection is closed and new ones are refused (a
//     server that is down, a database outage);
//   - Hang it: every connection, open or new, stays open and silently stops
//     forwarding (a server or network that stopped answering);
//   - Delay it: every chunk arrives a fixed time after it was sent, both
//     ways (a slow network or a distant server), open connections too;
//   - Limit it: at most a number of bytes per second each way (a thin link);
//   - Garble it: every byte one way is replaced by garbage (a hostile or
//     broken peer, a middlebox that corrupts), open connections too;
//   - GarbleAfter: each connection turns to garbage one way after a number
//     of frames (a peer that behaves for a while, then goes bad);
//   - Restore it: new connections go through again, without delay or
//     limit.
//
// Tests start one with Start (closed at test end); the black-box recorder
// of package golden with New. The package does not import testing, so a
// program that links the recorder (inboxctl) does not link it either.
//
// # Where faults attach
//
// A fault is a state of the proxy read at two points: admit, when a
// connection arrives or its way to the target is dialed (Cut refuses it),
// and forward, for each chunk read from one side before it is written to
// the other, with its Direction (Hang drops it, Delay holds it until it
// is due, Limit paces it). A new fault (a one-way partition, a slow
// reader) is one more state read at these two points; nothing else in the
// proxy changes.
package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// TB is the part of testing.TB that Start uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Direction is the way a chunk of bytes travels through a connection.
type Direction int

// Directions.
const (
	// ToTarget: from the client to the target.
	ToTarget Direction = iota
	// ToClient: from the target back to the client.
	ToClient
)

// Proxy forwards connections from its loopback address to a target
// address. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}

	hung      atomic.Bool
	delay     atomic.Int64   // time.Duration added to every chunk
	limit     atomic.Int64   // bytes per second each way; 0: no limit
	garbled   [2]atomic.Bool // per Direction: bytes replaced by garbage
	after     [2]atomic.Pointer[garbleRule]
	forwarded atomic.Int64
	dropped   atomic.Int64
	spoiled   atomic.Int64 // bytes garbled by GarbleAfter
}

// New listens on 127.0.0.1:0 and forwards every accepted connection to
// target until Close.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is New for a test: it fails the test when the proxy cannot
// listen, and closes the proxy at test end.
func Start(t TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port) for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection; until Restore, new connections are
// accepted and closed at once (the client sees the connection reset, as
// with a server that is down).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Hang stops forwarding: what either side sends from now on, on open or
// new connections, is dropped, and no connection is closed until Restore
// or Close.
func (p *Proxy) Hang() { p.hung.Store(true) }

// Delay makes every chunk read from now on, either way, arrive d after it
// was read (a round trip takes 2d longer); 0 ends it. Chunks keep their
// order.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Limit lets at most bytesPerSecond through each way and connection from
// now on; 0 ends it.
func (p *Proxy) Limit(bytesPerSecond int64) { p.limit.Store(bytesPerSecond) }

// Garble replaces every byte that travels in dir from now on by garbage
// (as many bytes, lines and NULs among them, so that a parser of a text
// protocol sees frames it must refuse).
func (p *Proxy) Garble(dir Direction) { p.garbled[dir].Store(true) }

// garbleRule is a GarbleAfter in force: n frames, each ended by delim.
type garbleRule struct {
	delim byte
	n     int
}

// GarbleAfter lets n frames, each ended by the byte delim (NUL for STOMP),
// through intact in dir on every connection, then replaces every later
// byte of that connection in dir by garbage, as Garble does. The frames are
// counted on each connection from the moment the rule applies to it (from
// now on for open connections, from their first byte for new ones), so
// every connection the client opens again goes bad after n frames too,
// until Restore.
func (p *Proxy) GarbleAfter(dir Direction, delim byte, n int) {
	p.after[dir].Store(&garbleRule{delim: delim, n: n})
}

// Restore ends Cut, Hang, Delay, Limit, Garble and GarbleAfter: new
// connections, and bytes on the open ones, go through again at full speed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.hung.Store(false)
	p.delay.Store(0)
	p.limit.Store(0)
	p.garbled[ToTarget].Store(false)
	p.garbled[ToClient].Store(false)
	p.after[ToTarget].Store(nil)
	p.after[ToClient].Store(nil)
}

// IsCut reports whether Cut is in force.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Forwarded is the number of bytes forwarded so far, both ways: it grows
// while client and target talk.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// Dropped is the number of bytes dropped while hung: above 0 once a side
// has sent something into a hung connection.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// GarbledAfter is the number of bytes GarbleAfter has garbled so far:
// above 0 once a connection went past its frames under the rule.
func (p *Proxy) GarbledAfter() int64 { return p.spoiled.Load() }

// Close stops the proxy, closes every connection and waits for its
// goroutines. It may be called more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.admit(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// admit tracks a new connection (from a client, or to the target), or
// closes it while cut or closed.
func (p *Proxy) admit(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) drop(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

// serve dials the target for client c and forwards both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	if !p.admit(s) {
		p.drop(c)
		return
	}
	p.wg.Add(2)
	go p.pipe(ToTarget, s, c)
	go p.pipe(ToClient, c, s)
}

// chunk is what one read of a side brought, and when it is due at the
// other side.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies what src sends to dst, chunk by chunk through forward, until
// either side fails; then it closes both, unless the proxy hangs (a hung
// connection stays open until Restore or Close). A reader takes the
// chunks from src and a writer gives them to dst when they are due, so
// that a delay adds latency without slowing the stream down.
func (p *Proxy) pipe(dir Direction, dst, src net.Conn) {
	defer p.wg.Done()
	chunks := make(chan chunk, 64)
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		var frames frameCount
		for c := range chunks {
			if !p.forward(dir, dst, c, &frames) {
				p.drop(dst, src) // ends the reader's Read
				close(stop)
				for range chunks { // let the reader finish
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.hung.Load() {
				p.dropped.Add(int64(n))
			} else {
				c := chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
				select {
				case chunks <- c:
				case <-stop:
					err = net.ErrClosed
				}
			}
		}
		if err != nil {
			break
		}
	}
	close(chunks)
	<-wrote
	if !p.hung.Load() {
		p.drop(dst, src)
	}
}

// frameCount is one connection's count of frames in one direction under
// a GarbleAfter rule.
type frameCount struct {
	rule *garbleRule // the rule counted under; another one starts again at 0
	n    int
}

// pass returns how many leading bytes of b may go through intact under
// rule (nil: all of them), counting the frames b ends.
func (f *frameCount) pass(rule *garbleRule, b []byte) int {
	if rule == nil {
		return len(b)
	}
	if f.rule != rule {
		f.rule, f.n = rule, 0
	}
	for i, x := range b {
		if f.n >= rule.n {
			return i
		}
		if x == rule.delim {
			f.n++
		}
	}
	return len(b)
}

// forward gives one chunk to dst when it is due, at the proxy's rate, or
// drops it when the proxy hangs by then. It reports false when dst failed.
func (p *Proxy) forward(dir Direction, dst net.Conn, c chunk, frames *frameCount) bool {
	time.Sleep(time.Until(c.due))
	if p.hung.Load() {
		p.dropped.Add(int64(len(c.b)))
		return true
	}
	if p.garbled[dir].Load() {
		garble(c.b)
	} else if n := frames.pass(p.after[dir].Load(), c.b); n < len(c.b) {
		garble(c.b[n:])
		p.spoiled.Add(int64(len(c.b) - n))
	}
	if limit := p.limit.Load(); limit > 0 {
		time.Sleep(time.Duration(int64(len(c.b)) * int64(time.Second) / limit))
	}
	n, err := dst.Write(c.b)
	p.forwarded.Add(int64(n))
	return err == nil
}

// garble overwrites b with garbage: a repeating pattern of bytes a text
// protocol cannot parse, with line ends and NULs among them.
func garble(b []byte) {
	const junk = "\x01\xfe#garbage\xff\n\x00\x7f:\x00\n"
	for i := range b {
		b[i] = junk[i%len(junk)]
	}
}
