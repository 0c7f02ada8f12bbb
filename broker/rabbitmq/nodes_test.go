package rabbitmq

import (
	"context"
	"net"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

func TestNodeURLs(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want []string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h1:5681,h2,h3:5683/vh?queue-type=quorum", []string{
			"amqp://u:p@h1:5681/vh?queue-type=quorum", "amqp://u:p@h2/vh?queue-type=quorum", "amqp://u:p@h3:5683/vh?queue-type=quorum",
		}},
	} {
		u, err := url.Parse(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := nodeURLs(c.raw, u)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("nodeURLs(%s) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	cfg := Config{URL: "amqp://u:secret@h1:5681,,h3:5683/"}
	cfg.setDefaults()
	err := cfg.validate()
	if err == nil || !strings.Contains(err.Error(), "host 2 of the node list") || strings.Contains(err.Error(), "secret") {
		t.Errorf("validate of an empty host in the list = %v; want an error naming host 2, without the password", err)
	}
}

// A cluster's URL lists its nodes: the Adapter connects to the first that
// answers, and after its connection is lost, to the next one; consuming
// and confirmed publishing carry on there. Two proxies in front of the
// machine's broker stand for two nodes (scripts/rabbit-cluster and
// cmd/inboxctl's TestRunRabbitClusterFailover do it on a real cluster); a
// port nothing listens on stands for a dead node.
func TestFailsOverToTheNextNode(t *testing.T) {
	t.Parallel()
	q, _ := testQueue(t)
	dead, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := tcpproxy.Start(t, "127.0.0.1:5672"), tcpproxy.Start(t, "127.0.0.1:5672")
	a := open(t, Config{
		URL:   "amqp://guest:guest@" + dead + "," + n1.Addr() + "," + n2.Addr() + "/",
		Queue: q, QueueType: QueueQuorum,
	})
	publish(t, a, q, map[string]string{"event-id": "E-1"}, "one")
	if n1.Forwarded() == 0 || n2.Forwarded() != 0 {
		t.Fatalf("forwarded by node 1 %d, node 2 %d: want the first node that answers (1) only", n1.Forwarded(), n2.Forwarded())
	}
	d := receive(t, a, 10*time.Second)
	if err := d.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}

	n1.Cut() // node 1 is gone: its connections closed, new ones refused
	publish(t, a, q, map[string]string{"event-id": "E-2"}, "two")
	for {
		// "one" comes again when its ack was still on the way at the cut:
		// a redelivery, counted by the quorum queue
		d = receive(t, a, 20*time.Second)
		m := d.Message()
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		if string(m.Body) == "one" {
			if m.FirstDelivery || m.DeliveryCount != 2 {
				t.Errorf("redelivery of one: FirstDelivery %v DeliveryCount %d, want false 2", m.FirstDelivery, m.DeliveryCount)
			}
			continue
		}
		if string(m.Body) != "two" || !m.FirstDelivery || m.DeliveryCount != 1 {
			t.Errorf("after the failover received %q FirstDelivery %v DeliveryCount %d, want two true 1 (a quorum queue's first delivery)",
				m.Body, m.FirstDelivery, m.DeliveryCount)
		}
		break
	}
	if n2.Forwarded() == 0 {
		t.Error("node 2 forwarded nothing: the Adapter did not fail over to it")
	}
	if err := a.Ready(context.Background()); err != nil {
		t.Errorf("Ready after the failover: %v", err)
	}
}

// freePort is a loopback address nothing listens on.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
