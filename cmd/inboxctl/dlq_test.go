package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/jetstream"
	"github.com/inboxkit/inboxkit/broker/stomp"
)

// Issue 11.6: `dlq list` / `dlq replay` on a mistyped queue created it.
// Now they say it does not exist (exit 1) and create nothing: asked twice,
// the second answer is the same, and the broker has no such queue/stream.
func TestDLQMistypedQueueIsNotCreated(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	queue := fmt.Sprintf("DLQ.mistyped.%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		broker string
		exists func() bool
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", func() bool {
			conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
			if err != nil {
				t.Fatalf("RabbitMQ: %v", err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			return err == nil
		}},
		{"nats://127.0.0.1:4222", func() bool {
			nc, err := nats.Connect("nats://127.0.0.1:4222")
			if err != nil {
				t.Fatalf("NATS: %v", err)
			}
			defer nc.Close()
			js, err := natsjs.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = js.Stream(ctx, jetstream.StreamName(queue))
			return err == nil
		}},
		{"embedded:" + filepath.Join(t.TempDir(), "js"), nil},
	} {
		t.Run(tc.broker[:4], func(t *testing.T) {
			for i := 0; i < 2; i++ {
				wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", tc.broker, "--queue", queue), 1, "queue "+queue+" does not exist", "nothing was created")
				wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", tc.broker, "--queue", queue, "--all", "--db", sqlite), 1, "queue "+queue+" does not exist")
			}
			if tc.exists != nil && tc.exists() {
				t.Errorf("%s now exists on %s", queue, tc.broker)
			}
		})
	}
}

// embedded:DIR keeps its messages between commands: publish, then list.
func TestEmbeddedDirPersists(t *testing.T) {
	t.Parallel()
	broker := "embedded:" + filepath.Join(t.TempDir(), "js")
	wantCode(t, inboxctl(t, invoiceLine("emb-1", "corr-emb", "INV-E1", "K-100")+"\n", "publish", "--broker", broker, "--queue", "DLQ.emb", "--file", "-"), 0, "published 1 message(s)")
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", "DLQ.emb"), 0, "DLQ.emb: 1 message(s)", "emb-1")
}

// On ActiveMQ a look at a queue creates it and STOMP cannot ask first, so
// an empty result says so instead of staying silent.
func TestDLQListSTOMPNotesCreation(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	queue := fmt.Sprintf("DLQ.mistyped.%d", time.Now().UnixNano())
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", "stomp://"+stompAddr, "--queue", queue), 0, "0 message(s)", "cannot tell over STOMP whether a queue exists", "if "+queue+" is mistyped")
}

// Issue 23.8: on a DLQ holding dead letters, `dlq replay --event-id no-such`
// printed "0 left" and "has no messages ... mistyped"; a message the broker
// dead-lettered itself (over the consumer's body limit: MESSAGE_TOO_LARGE,
// no inboxkit envelope) replayed as ": :" (exit 1), lost its body on the
// way (the replay's hand-back re-sent it without the body it had not
// read), and could never be removed. Now replay says what is true, has a
// --dry-run, leaves that message whole, dlq list shows its reason and size,
// and dlq drop removes it.
func TestDLQReplayAndDropSayWhatIsTrue(t *testing.T) {
	t.Parallel()
	needActiveMQ(t)
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite, "--seed-customers"), 0)
	broker := "stomp://" + stompAddr
	queue := fmt.Sprintf("inboxctl.dlqtruth.%d", time.Now().UnixNano())
	dlqName := "DLQ." + queue
	wantCode(t, inboxctl(t, poisonLines("dt", 4), "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 4")
	big := `{"headers":{"eventId":"dt-big","correlationId":"c-dt"},"body":"` + strings.Repeat("x", 6<<20) + `"}` + "\n"
	wantCode(t, inboxctl(t, big, "publish", "--broker", broker, "--queue", queue, "--file", "-", "--allow-invalid"), 0, "published 1")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, logs := startRun(ctx, t, "--db", sqlite, "--broker", broker, "--queue", queue, "--log-format", "json")
	waitFor(t, "5 dead letters", func() bool { return strings.Count(logs.String(), `"action":"dead-letter"`) == 5 }, logs)
	stopRun(t, run, logs)
	defer inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--all") // 6 MB on the shared broker

	r := inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "no-such", "--db", sqlite)
	wantCode(t, r, 1, "0 replayed; 5 left in "+dlqName+" (none has event id no-such)", `no dead letter with event id "no-such" in `+dlqName+" (it holds 5 other message(s)); nothing was changed")
	if strings.Contains(r.stdout+r.stderr, "mistyped") || strings.Contains(r.stdout, "0 left") {
		t.Errorf("replay of a missing event id on a full DLQ:\n%s", r)
	}

	r = inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName, "-o", "json")
	wantCode(t, r, 0)
	var es []dlqEntry
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil {
		t.Fatal(err)
	}
	var foreign dlqEntry
	for _, e := range es {
		if e.EventID == "dt-big" {
			foreign = e
		}
	}
	if len(es) != 5 || !foreign.NotEnvelope || foreign.Reason != "MESSAGE_TOO_LARGE" || foreign.Size != 6<<20 || foreign.BrokerMessageID == "" {
		t.Fatalf("dlq list: %d entries, the broker's copy %+v; want 5, MESSAGE_TOO_LARGE, %d bytes, with its broker message id", len(es), foreign, 6<<20)
	}
	wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName), 0, "MESSAGE_TOO_LARGE", "6291456", "not an inboxkit envelope; broker message id "+foreign.BrokerMessageID, "dlq drop")

	r = inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--all", "--dry-run", "--db", sqlite)
	wantCode(t, r, 1, "would replay dt-1", "would replay dt-4", "message "+foreign.BrokerMessageID+" (event id dt-big), 6291456 bytes: not an inboxkit dead letter",
		"dry run, nothing changed: 4 would be replayed; 5 left in "+dlqName)
	wantCode(t, inboxctl(t, "", "audit", "--db", sqlite, "--event-id", "dt-1"), 0, "DEAD_LETTERED") // the dry run reset nothing
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--event-id", "dt-big", "--db", sqlite), 1,
		"0 replayed; 5 left", "not an inboxkit dead letter", "'inboxctl dlq drop'")

	// The broker's copy is whole after all this handing back.
	bcfg := stomp.Config{URL: broker}
	bcfg.Limits.MaxBodySize = 8 << 20
	ms, err := stomp.Browse(ctx, bcfg, dlqName, 0)
	if err != nil || len(ms) != 5 {
		t.Fatalf("browse %s: %d messages, %v", dlqName, len(ms), err)
	}
	for _, m := range ms {
		if m.Header("eventId") == "dt-big" && len(m.Body) != 6<<20 {
			t.Errorf("the oversize dead letter has %d bytes of body now, want %d", len(m.Body), 6<<20)
		}
	}

	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--not-envelope", "--dry-run"), 0,
		"would drop "+foreign.BrokerMessageID+" (event id dt-big, reason MESSAGE_TOO_LARGE, 6291456 bytes)", "dry run, nothing changed: 1 would be dropped; 5 left")
	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--message-id", "ID:no-such"), 1, "0 dropped; 5 left", "no message in "+dlqName+" matched")
	wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", dlqName, "--message-id", foreign.BrokerMessageID, "--db", sqlite, "--operator", "erin"), 0, "dropped "+foreign.BrokerMessageID, "1 dropped; 4 left")
	wantCode(t, inboxctl(t, "", "audit", "--db", sqlite, "--operator", "erin"), 0, "actions of operator erin: 1", "dlq-drop", "dt-big", "queue "+dlqName)
	r = inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", dlqName)
	wantCode(t, r, 0, dlqName+": 4 message(s)")
	if strings.Contains(r.stdout, "dt-big") {
		t.Errorf("dropped, still listed:\n%s", r)
	}
	wantCode(t, inboxctl(t, "", "dlq", "replay", "--broker", broker, "--queue", dlqName, "--all", "--db", sqlite), 0, "4 replayed; 0 left in "+dlqName)
}

// dlq drop on RabbitMQ and JetStream (a real server and embedded:DIR): a
// message without the envelope is listed with its size and dropped, and on
// embedded:DIR a second command still sees what the first one handed back.
func TestDLQDropOnRabbitMQAndJetStream(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"amqp://guest:guest@127.0.0.1:5672/", "nats://127.0.0.1:4222", "embedded:" + filepath.Join(t.TempDir(), "js")} {
		t.Run(broker[:4], func(t *testing.T) {
			t.Parallel()
			queue := fmt.Sprintf("DLQ.inboxctl.drop.%d", time.Now().UnixNano())
			lines := `{"headers":{"eventId":"fd-1"},"body":"not an envelope"}` + "\n" + `{"headers":{"eventId":"fd-2"},"body":"kept"}` + "\n"
			wantCode(t, inboxctl(t, lines, "publish", "--broker", broker, "--queue", queue, "--file", "-"), 0, "published 2")
			if strings.HasPrefix(broker, "amqp") {
				defer deleteRabbitQueue(t, queue)
			} else if strings.HasPrefix(broker, "nats") {
				defer deleteStream(t, queue)
			}
			for range 2 {
				wantCode(t, inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", queue), 0, queue+": 2 message(s)", "UNKNOWN", "15  ")
			}
			wantCode(t, inboxctl(t, "", "dlq", "drop", "--broker", broker, "--queue", queue, "--event-id", "fd-1"), 0, "1 dropped; 1 left")
			r := inboxctl(t, "", "dlq", "list", "--broker", broker, "--queue", queue)
			wantCode(t, r, 0, queue+": 1 message(s)", "fd-2")
		})
	}
}

func deleteRabbitQueue(t *testing.T, queue string) {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		t.Errorf("RabbitMQ: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		_, _ = ch.QueueDelete(queue, false, false, false)
	}
}

func deleteStream(t *testing.T, queue string) {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Errorf("NATS: %v", err)
		return
	}
	defer nc.Close()
	if js, err := natsjs.New(nc); err == nil {
		_ = js.DeleteStream(context.Background(), jetstream.StreamName(queue))
	}
}
