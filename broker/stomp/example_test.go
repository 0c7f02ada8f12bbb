package stomp_test

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit/broker/stomp"
)

// Publish one message, receive it and acknowledge it. Needs the broker
// started by `scripts/activemq start`.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queue := fmt.Sprintf("inboxkit.example.%d", time.Now().UnixNano())
	a, err := stomp.Open(ctx, stomp.Config{URL: "stomp://127.0.0.1:61613", Queue: queue})
	if err != nil {
		fmt.Println("start the broker with scripts/activemq start:", err)
		return
	}
	defer a.Close()
	if err := a.Publish(ctx, queue, map[string]string{"eventId": "inv-42"}, []byte(`{"amount":10}`)); err != nil {
		fmt.Println(err)
		return
	}
	d, err := a.Receive(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := d.Message()
	fmt.Println(m.Header("eventId"), string(m.Body), m.Redelivered)
	if err := d.Ack(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: inv-42 {"amount":10} false
}
