package jetstream_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/jetstream/embedded"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/consumer/consumertest"
	"github.com/inboxkit/inboxkit/dlq"
)

// TestConformance runs the broker conformance suite against the machine's
// NATS JetStream server (127.0.0.1:4222) and against the embedded server
// (not under -short).
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		const url = "nats://127.0.0.1:4222"
		nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
		if err != nil {
			t.Fatalf("NATS JetStream is not reachable at 127.0.0.1:4222; start it with: "+
				"start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- "+
				"-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log: %v", err)
		}
		nc.Close()
		consumertest.Run(t, conformanceBroker("jetstream", url))
	})
	t.Run("embedded", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short runs the suite on the machine's server only; ./scripts/test runs it on the embedded server too")
		}
		e, err := embedded.Start(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		consumertest.Run(t, conformanceBroker("jetstream-embedded", e.URL()))
	})
}

// streamOf names the stream holding one test subject.
func streamOf(subject string) string {
	return "CT_" + strings.NewReplacer(".", "_", "-", "_").Replace(subject)
}

func conformanceBroker(name, url string) consumertest.Broker {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(t testing.TB, subject string) *jetstream.Adapter {
		t.Helper()
		cfg := jetstream.Config{URL: url, Logger: quiet, AckWait: 10 * time.Second, Prefetch: 4, PollWait: time.Second, Reconnect: inboxkit.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}}
		if subject != "" {
			cfg.Stream, cfg.Subject = streamOf(subject), subject
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, err := jetstream.Open(ctx, cfg)
		if err != nil {
			t.Fatalf("jetstream open %q: %v", subject, err)
		}
		return a
	}
	return consumertest.Broker{
		Name:     name,
		Features: consumertest.Features{DeliveryCount: true, RedeliveredFlag: true, FirstDelivery: true},
		NewSource: func(t testing.TB, subject string) consumer.Source {
			a := open(t, subject)
			t.Cleanup(func() { a.Close() })
			return a
		},
		NewPublisher: func(t testing.TB) dlq.Publisher { return open(t, "") },
		Declare: func(t testing.TB, subjects ...string) {
			t.Helper()
			// The consumed subject gets its work-queue stream and durable
			// consumer; DLQ and reject subjects get a stream each.
			open(t, subjects[0]).Close()
			p := open(t, "")
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, s := range subjects[1:] {
				if err := p.EnsureStream(ctx, streamOf(s), s); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				nc, err := nats.Connect(url)
				if err != nil {
					return
				}
				defer nc.Close()
				js, _ := natsjs.New(nc)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for _, s := range subjects {
					if err := js.DeleteStream(ctx, streamOf(s)); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
						t.Logf("delete stream %s: %v", streamOf(s), err)
					}
				}
			})
		},
	}
}
