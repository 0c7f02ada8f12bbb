package brokerurl_test

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
)

// A broker URL becomes a source and a publisher; "embedded" runs JetStream
// inside the process, so this example needs no broker.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := brokerurl.Open("embedded", brokerurl.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close() // closes every adapter opened here, then the server
	src, err := b.Source(ctx, "invoices", "invoice-consumer", 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	pub, err := b.Publisher(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := pub.Publish(ctx, "invoices", map[string]string{"eventId": "inv-1"}, []byte(`{}`)); err != nil {
		fmt.Println(err)
		return
	}
	d, err := src.Receive(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Message().Header("eventId"), "ready:", src.Ready(ctx) == nil)
	if err := d.Ack(ctx); err != nil {
		fmt.Println(err)
	}
	// A dead letter creates its stream; Depth counts it without consuming.
	if err := pub.Publish(ctx, "DLQ.invoices", map[string]string{"eventId": "inv-2"}, []byte(`{}`)); err != nil {
		fmt.Println(err)
		return
	}
	n, _, err := b.Depth(ctx, "DLQ.invoices")
	fmt.Println("dead letters:", n, err)
	// Output:
	// inv-1 ready: true
	// dead letters: 1 <nil>
}
