package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every section with a tiny configuration against the real
// PostgreSQL and RabbitMQ: the consumers must each leave exactly one letter
// per distinct event and the purge must delete every old row. It says
// nothing about speed.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	o := options{
		amqp:       "amqp://guest:guest@127.0.0.1:5672/",
		broker:     "rabbitmq",
		db:         postgresKind,
		dsn:        envOr("INBOXKIT_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		n:          200,
		dup:        0.2,
		seed:       1,
		handlers:   []int{2},
		batch:      4,
		rounds:     1,
		concs:      []int{2},
		dur:        300 * time.Millisecond,
		big:        3000,
		bigConc:    2,
		bigSchema:  "inboxbench_smoke_" + suffix(),
		purge:      3000,
		outboxN:    300,
		outboxSent: 2000,
		outboxRate: 100,
		sections:   map[string]bool{"e2e": true, "library": true, "pgbench": true, "big": true, "purge": true, "outbox": true, "outbox-peer": true},
		out:        &out,
		log:        testWriter{t},
	}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s\n(needs PostgreSQL and RabbitMQ: scripts/test starts them)", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"watermill", "raw database/sql", "inboxkit single", "inboxkit single in tx", "inboxkit store-then-process in tx", "inboxkit store-then-process prefetch=handlers", "inboxkit batch 4", "inboxkit batch 4 in tx", "inboxkit duplicate", "first, in tx", "duplicate, in tx", "pgbench 4/tx plain", "pgbench store-then-process", "inboxkit/pgbench marked", "raw marked/raw new", "inboxkit batch 4 effects-in-tx", "rows in the inbox", "first, time-ordered ids", "rows purged", "Process + Add", "drain, 100 keys", "Outbox relay beside Watermill"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output has no %q", want)
		}
	}
}

// TestSmokeBacklog runs the relay's backlog drains with a tiny
// configuration over two rounds: the tables made once, drained a round at a
// time. It says nothing about speed.
func TestSmokeBacklog(t *testing.T) {
	var out bytes.Buffer
	o := options{
		amqp:          "amqp://guest:guest@127.0.0.1:5672/",
		db:            postgresKind,
		dsn:           envOr("INBOXKIT_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		n:             200,
		dup:           0.2,
		rounds:        2,
		dur:           300 * time.Millisecond,
		bigConc:       2,
		outboxN:       300,
		outboxSent:    2000,
		outboxBacklog: 1000,
		outboxRate:    100,
		sections:      map[string]bool{"outbox-relay": true},
		out:           &out,
		log:           testWriter{t},
	}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s\n(needs PostgreSQL and RabbitMQ: scripts/test starts them)", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"next 300 of 1000 pending, no SENT rows", "next 300 of 1000 pending, beside 2000 SENT rows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output has no %q", want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmokeStompMariaDB runs e2e on ActiveMQ over STOMP with the inbox on
// MariaDB, and the library section on MariaDB, with a tiny configuration:
// every consumer one letter per distinct event. It says nothing about
// speed.
func TestSmokeStompMariaDB(t *testing.T) {
	var out bytes.Buffer
	o := options{
		amqp:      "amqp://guest:guest@127.0.0.1:5672/",
		dsn:       envOr("INBOXKIT_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		broker:    "stomp",
		stompAddr: envOr("INBOXKIT_STOMP_ADDR", "127.0.0.1:61613"),
		db:        mysqlKind,
		mysqlDSN:  envOr("INBOXKIT_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/"),
		n:         100,
		dup:       0.2,
		seed:      1,
		handlers:  []int{2},
		batch:     4,
		rounds:    1,
		concs:     []int{2},
		dur:       300 * time.Millisecond,
		sections:  map[string]bool{"e2e": true, "library": true},
		out:       &out,
		log:       testWriter{t},
	}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s\n(needs ActiveMQ, MariaDB and PostgreSQL: scripts/test starts them)", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"raw database/sql", "inboxkit single", "inboxkit batch 4", "MariaDB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output has no %q", want)
		}
	}
}
