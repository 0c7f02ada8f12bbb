// Package hangproxy is a loopback TCP proxy for tests that need a service
// to hang (not to fail): after Hang, every connection through the proxy,
// open or new, stays open and silently stops forwarding, as with a server
// or network that stopped answering. The shared server itself is never
// touched.
package hangproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections from its loopback address to a target address.
type Proxy struct {
	target  string
	ln      net.Listener
	hung    atomic.Bool
	dropped atomic.Int64
	closed  chan struct{}

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// Start listens on 127.0.0.1:0 and forwards every accepted connection to
// target. The proxy is closed at test end.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hangproxy: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port) for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hang stops forwarding: what either side sends from now on is dropped,
// and no connection is closed until Close.
func (p *Proxy) Hang() { p.hung.Store(true) }

// Dropped is how many bytes were dropped since Hang: above 0 once a client
// has sent something into the hung connection.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	select {
	case <-p.closed:
		return
	default:
	}
	close(p.closed)
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	select {
	case <-p.closed:
		_ = c.Close()
	default:
	}
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
		p.track(c)
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(s)
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.hung.Load() {
			p.dropped.Add(int64(n))
		} else if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.hung.Load() {
				_ = dst.Close()
			}
			return
		}
	}
}
