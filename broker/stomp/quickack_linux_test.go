//go:build linux

package stomp

import (
	"bufio"
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// Issue 15.4: against a broker that leaves Nagle on (ActiveMQ's STOMP
// connector as shipped), the client's delayed ACK held every message back
// by up to 40 ms. The connection must leave each read with TCP_QUICKACK on.
// (The throughput itself is measured by cmd/inboxbench -brokers stomp-stock.)
func TestQuickAckAfterRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const rounds = 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fr := NewFrameReader(bufio.NewReader(c), Limits{})
		if _, err := fr.ReadFrame(); err != nil {
			return
		}
		_ = WriteFrame(c, NewFrame(CmdConnected, "version", "1.2"))
		sub, err := fr.ReadFrame()
		if err != nil {
			return
		}
		_ = WriteFrame(c, NewFrame(CmdReceipt, "receipt-id", sub.Value("receipt")))
		// One message in flight: MESSAGE, wait for the client's ACK, ...
		for i := 0; i <= rounds; i++ {
			_ = WriteFrame(c, NewFrame(CmdMessage, "subscription", sub.Value("id"), "message-id", "m", "ack", "a"))
			if i < rounds {
				if _, err := fr.ReadFrame(); err != nil {
					return
				}
			}
		}
		time.Sleep(2 * time.Second)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, ln.Addr().String(), ConnOptions{HeartBeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "/queue/q", SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= rounds; i++ {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatal(err)
		}
		if i < rounds {
			if err := c.write(ctx, NewFrame(CmdAck, "id", "a")); err != nil {
				t.Fatal(err)
			}
		}
	}
	rc, err := c.nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if v != 1 {
		t.Fatalf("TCP_QUICKACK = %d after reads, want 1", v)
	}
}
