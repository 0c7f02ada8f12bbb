package amqp10_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/inboxkit/inboxkit/broker/amqp10"
	"github.com/inboxkit/inboxkit/internal/protonbroker"
)

// putOnProton sends one message to queue on the example broker at addr.
func putOnProton(t *testing.T, addr, queue, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://"+addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, &amqp.Message{Data: [][]byte{[]byte(body)}}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestPresettlingPeerRefused (issue 23.12): Apache Qpid Proton's example
// broker answers a request for unsettled deliveries with snd-settle-mode
// mixed and then sends every delivery pre-settled: what the consumer
// holds at a crash is gone. Open refuses it, naming the mode; with
// ?allow-presettled it opens and logs a warning naming the mode, and a
// delivery not acknowledged before Close is lost, as warned. Before the
// fix Open accepted the peer without a word.
func TestPresettlingPeerRefused(t *testing.T) {
	addr := protonbroker.Start(t)
	putOnProton(t, addr, "invoices", "m1")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := amqp10.Open(ctx, amqp10.Config{URL: "amqp10://" + addr, Queue: "invoices"})
	if err == nil {
		a.Close()
		t.Fatal("Open succeeded on a broker that settles deliveries itself")
	}
	if !errors.Is(err, amqp10.ErrPresettled) || !strings.Contains(err.Error(), "snd-settle-mode mixed") || !strings.Contains(err.Error(), "allow-presettled") {
		t.Errorf("Open = %v; want ErrPresettled naming snd-settle-mode mixed and allow-presettled", err)
	}

	var logs lockedBuffer
	a, err = amqp10.Open(ctx, amqp10.Config{URL: "amqp10://" + addr + "?allow-presettled", Queue: "invoices",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open with ?allow-presettled: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "snd-settle-mode=mixed") || !strings.Contains(l, "allow-presettled") {
		t.Errorf("no warning naming the mode and allow-presettled:\n%s", l)
	}
	d := receive(t, a)
	if string(d.Message().Body) != "m1" {
		t.Fatalf("received %q, want m1", d.Message().Body)
	}
	a.Close() // a crash: m1 was never acknowledged

	// What allow-presettled accepts: the broker did not keep m1.
	a = open(t, amqp10.Config{URL: "amqp10://" + addr + "?allow-presettled", Queue: "invoices"})
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if d, err := a.Receive(rctx); err == nil {
		t.Errorf("after the crash the broker delivered %q again; the test's premise (a peer that settles itself) is gone", d.Message().Body)
	}
}
