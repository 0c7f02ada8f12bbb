package stomp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// A request whose RECEIPT never comes, on a connection that otherwise
// lives, fails after ReceiptTimeout and gives the connection up (issue
// 29.4: an ACK lost on the way left the consumer waiting for ever while
// heart-beats kept the connection alive).
func TestReceiptTimeoutGivesTheConnectionUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := NewFrameReader(c, Limits{})
		if _, err := r.ReadFrame(); err != nil { // CONNECT
			return
		}
		_ = WriteFrame(c, NewFrame(CmdConnected, "version", "1.2"))
		for { // every later frame is read and never answered
			if _, err := r.ReadFrame(); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, ln.Addr().String(), ConnOptions{HeartBeat: -1, ReceiptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Ack(ctx, "m-1")
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Ack without a receipt: %v, want an error wrapping ErrConnClosed", err)
	}
	if err := c.Ack(ctx, "m-2"); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("a request on the given-up connection: %v, want ErrConnClosed", err)
	}
}
