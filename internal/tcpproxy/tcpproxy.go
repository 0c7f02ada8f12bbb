// Package tcpproxy is a loopback TCP proxy that puts faults between a
// client and a server without touching the server (the shared services of
// the machine are never stopped): put the proxy between them, then
//
//   - Cut it: every open connection is closed and new ones are refused (a
//     server that is down, a database outage);
//   - Hang it: every connection, open or new, stays open and silently stops
//     forwarding (a server or network that stopped answering);
//   - Restore it: new connections go through again.
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
// the other, with its Direction (Hang drops it). A new fault (latency, a
// one-way partition, a slow reader) is one more state read at these two
// points; nothing else in the proxy changes.
package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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
	forwarded atomic.Int64
	dropped   atomic.Int64
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

// Restore ends Cut and Hang: new connections, and bytes on the open ones,
// go through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.hung.Store(false)
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

// pipe copies what src sends to dst, chunk by chunk through forward, until
// either side fails; then it closes both, unless the proxy hangs (a hung
// connection stays open until Restore or Close).
func (p *Proxy) pipe(dir Direction, dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(dir, dst, buf[:n]) {
			break
		}
		if err != nil {
			break
		}
	}
	if !p.hung.Load() {
		p.drop(dst, src)
	}
}

// forward passes one chunk read from one side to the other, or drops it
// while hung. It reports false when dst failed.
func (p *Proxy) forward(_ Direction, dst net.Conn, b []byte) bool {
	if p.hung.Load() {
		p.dropped.Add(int64(len(b)))
		return true
	}
	n, err := dst.Write(b)
	p.forwarded.Add(int64(n))
	return err == nil
}
