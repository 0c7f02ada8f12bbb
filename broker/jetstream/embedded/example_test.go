package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
)

// An embedded server, a consumer of one subject, one message round trip.
func Example() {
	dir, err := os.MkdirTemp("", "inboxkit-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Stream: "INVOICE", Subject: "invoice.events"})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	if err := a.Publish(ctx, "invoice.events", map[string]string{"event-id": "E-1"}, []byte("hello")); err != nil {
		log.Fatal(err)
	}
	d, err := a.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := d.Message()
	fmt.Println(m.Header("event-id"), string(m.Body), m.DeliveryCount)
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: E-1 hello 1
}
