//go:build linux

package stomp

import (
	"net"
	"syscall"
)

// quickAcker turns on TCP_QUICKACK after every read, so that the kernel
// acknowledges what the broker sent at once instead of delaying the ACK by
// up to 40 ms. A broker that leaves Nagle's algorithm on (ActiveMQ's STOMP
// connector without transport.tcpNoDelay, as shipped) holds its next small
// write (the MESSAGE after a RECEIPT) until that ACK arrives; with one
// message in flight every message would wait for the delayed-ACK timer.
// Linux resets the flag on its own, hence after every read.
type quickAcker struct{ rc syscall.RawConn }

func newQuickAcker(nc net.Conn) *quickAcker {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &quickAcker{rc: rc}
}

// ack asks the kernel to send the pending ACK now (best effort: an error
// only means the ACK is delayed as usual).
func (q *quickAcker) ack() {
	if q == nil {
		return
	}
	_ = q.rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
