package stomp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// A request whose RECEIPT never comes, on a connection that otherwise
// lives, fails after ReceiptTimeout and gives the connection up (issue
// 29.4: an ACK lost on the way left the consumer waiting for ever while
// heart-beats kept the connection alive).
func TestReceiptTimeoutGivesTheConnectionUp(t *testing.T) {
	c := silentBroker(t, 0)
	ctx := context.Background()
	err := c.Ack(ctx, "m-1")
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Ack without a receipt: %v, want an error wrapping ErrConnClosed", err)
	}
	if err := c.Ack(ctx, "m-2"); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("a request on the given-up connection: %v, want ErrConnClosed", err)
	}
}

// An AckAsync returns once written, but its RECEIPT is watched: none within
// ReceiptTimeout gives the connection up all the same, so a broker that
// stopped answering is noticed although nobody waits (the adapter's Ack).
func TestAsyncAckWithoutReceiptGivesTheConnectionUp(t *testing.T) {
	c := silentBroker(t, 1) // answers the first receipt asked for, then none
	ctx := context.Background()
	if err := c.AckAsync(ctx, "m-1"); err != nil { // asks for a receipt, answered
		t.Fatalf("AckAsync: %v, want nil once written", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n := 2; ; n++ { // one of the next asks for a receipt once the first came
		if err := c.AckAsync(ctx, fmt.Sprintf("m-%d", n)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the connection lives on 20s after ACKs whose RECEIPT never came (ReceiptTimeout 300ms)")
	}
	if err := c.Err(); !errors.Is(err, ErrConnClosed) || !strings.Contains(err.Error(), "no receipt for ACK") {
		t.Fatalf("connection ended with %v, want the missing receipt", err)
	}
	if err := c.AckAsync(ctx, "m-0"); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("AckAsync on the given-up connection: %v, want ErrConnClosed", err)
	}
}

// silentBroker returns a connection to a server that reads every frame
// after CONNECT and answers the first answered requests with a receipt
// and none after, with ReceiptTimeout 300ms.
func silentBroker(t *testing.T, answered int) *Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
		for { // every later frame is read; the first answered ones answered
			f, err := r.ReadFrame()
			if err != nil {
				return
			}
			if id := f.Value("receipt"); id != "" && answered > 0 {
				answered--
				_ = WriteFrame(c, NewFrame(CmdReceipt, "receipt-id", id))
			}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, ln.Addr().String(), ConnOptions{HeartBeat: -1, ReceiptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
