package golden

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// tcpProxy forwards loopback connections to a target (the database), so a
// recording can cut the process under test off without touching the shared
// server: SetDown(true) closes every open connection and refuses new ones.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	forwarded atomic.Int64
}

func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("golden: database proxy: %w", err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// SetDown cuts (true) or restores (false) the way to the target.
func (p *tcpProxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Down reports whether the way to the target is cut.
func (p *tcpProxy) Down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		t, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[t] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, t)
		go p.pipe(t, c)
	}
}

// Forwarded is the number of bytes forwarded so far, both ways.
func (p *tcpProxy) Forwarded() int64 { return p.forwarded.Load() }

type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(counter{dst, &p.forwarded}, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Close stops accepting and closes every connection.
func (p *tcpProxy) Close() {
	p.ln.Close()
	p.SetDown(true)
	p.wg.Wait()
}
