package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inboxkit/broker/rabbitmq"
	"github.com/inboxkit/inboxkit/outbox"
)

// The side-by-side peer of the outbox relay: what a Go user writes with
// Watermill for the same job. Per transaction the same business write (one
// shipping_letters row) and one message for a RabbitMQ queue; after the
// commit something forwards the message to RabbitMQ with publisher
// confirms. inboxkit: outbox.Add in the transaction, outbox.Relay (LISTEN
// wake-up). Watermill: the forwarder's publisher over watermill-sql's
// publisher on the transaction (the message enveloped into the forwarder
// topic's table), and forwarder.Forwarder reading that table with
// watermill-sql's subscriber (PostgreSQL schema and offsets adapters, its
// default batch of 100) and publishing with watermill-amqp (durable queue,
// ConfirmDelivery, one pooled channel). The lag is the same for both: from
// the write (before the commit) to the broker's confirm.

// wmPollInterval is the Watermill subscriber's poll interval when its table
// has nothing new: 10 ms, where inboxkit's woken relay looks every 10 ms
// (its default is 1 s, which would put a second into its lag).
const wmPollInterval = 10 * time.Millisecond

// wmTopic is the forwarder's topic: its table holds the enveloped messages.
const wmTopic = "outbox"

// writtenAt is the Watermill message's metadata with the write's time.
const writtenAt = "bench_written_at"

// peerSide is one contender: write adds one message in tx; start begins
// forwarding and returns its stop; lags records the confirms.
type peerSide struct {
	name  string
	write func(ctx context.Context, tx *sql.Tx, queue string) error
	start func(ctx context.Context) (stop func(), err error)
	lags  *lagObserver
	done  func()
	queue string
	db    *sql.DB
	// noLetter leaves the business row out: a transaction of the message
	// alone.
	noLetter bool
}

// confirmClock is the Forwarder's outgoing publisher: watermill-amqp's,
// with every confirmed message's lag recorded.
type confirmClock struct {
	pub  message.Publisher
	lags *lagObserver
}

func (c confirmClock) Publish(topic string, msgs ...*message.Message) error {
	if err := c.pub.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	for _, m := range msgs {
		ns, err := strconv.ParseInt(m.Metadata.Get(writtenAt), 10, 64)
		if err != nil {
			return fmt.Errorf("message %s without %s: %w", m.UUID, writtenAt, err)
		}
		c.lags.Sent("", now.Sub(time.Unix(0, ns)))
	}
	return nil
}

func (c confirmClock) Close() error { return c.pub.Close() }

// inboxkitPeer is inboxkit's side on a fresh schema and queue.
func inboxkitPeer(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, pub *rabbitmq.Adapter, conns int) (*peerSide, error) {
	sc, _, ob, err := outboxStores(ctx, admin, o, conns, outbox.Config{})
	if err != nil {
		return nil, err
	}
	queue := "inboxbench.peer." + suffix()
	if err := declareQueue(conn, queue); err != nil {
		sc.drop(admin)
		return nil, err
	}
	lags := &lagObserver{}
	body := make([]byte, 200)
	return &peerSide{
		name: "inboxkit relay", lags: lags, queue: queue, db: sc.DB,
		write: func(ctx context.Context, tx *sql.Tx, queue string) error {
			_, err := ob.Add(ctx, tx, outbox.Message{Destination: queue, Body: body})
			return err
		},
		start: func(ctx context.Context) (func(), error) { return startBenchRelay(ctx, sc, ob, pub, lags), nil },
		done:  func() { deleteQueues(conn, queue); sc.drop(admin) },
	}, nil
}

// watermillPeer is Watermill's side on a fresh schema and queue.
func watermillPeer(ctx context.Context, admin *sql.DB, o options, conn *amqp.Connection, conns int) (*peerSide, error) {
	sc, _, _, err := outboxStores(ctx, admin, o, conns, outbox.Config{})
	if err != nil {
		return nil, err
	}
	queue := "inboxbench.peer.wm." + suffix()
	logger := watermill.NopLogger{}
	schemaAdapter := wmsql.DefaultPostgreSQLSchema{}
	subscriber := func() (*wmsql.Subscriber, error) {
		return wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(sc.DB), wmsql.SubscriberConfig{
			SchemaAdapter: schemaAdapter, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true, PollInterval: wmPollInterval,
		}, logger)
	}
	// The forwarder topic's tables exist before the first write (the
	// publisher does not create them inside a transaction).
	sub, err := subscriber()
	if err == nil {
		err = sub.SubscribeInitialize(wmTopic)
		_ = sub.Close()
	}
	if err != nil {
		sc.drop(admin)
		return nil, fmt.Errorf("watermill-sql: %w", err)
	}
	lags := &lagObserver{}
	body := make([]byte, 200)
	side := &peerSide{name: "watermill-sql + forwarder", lags: lags, queue: queue, db: sc.DB,
		done: func() { deleteQueues(conn, queue); sc.drop(admin) }}
	side.write = func(ctx context.Context, tx *sql.Tx, queue string) error {
		sqlPub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: schemaAdapter}, logger)
		if err != nil {
			return err
		}
		m := message.NewMessage(watermill.NewUUID(), body)
		m.Metadata.Set(writtenAt, strconv.FormatInt(time.Now().UnixNano(), 10))
		m.SetContext(ctx)
		return forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: wmTopic}).Publish(queue, m)
	}
	side.start = func(ctx context.Context) (func(), error) {
		cfg := wmamqp.NewDurableQueueConfig(o.amqp)
		cfg.Publish.ConfirmDelivery = true
		cfg.Publish.ChannelPoolSize = 1
		out, err := wmamqp.NewPublisher(cfg, logger)
		if err != nil {
			return nil, err
		}
		in, err := subscriber()
		if err != nil {
			_ = out.Close()
			return nil, err
		}
		f, err := forwarder.NewForwarder(in, confirmClock{out, lags}, logger, forwarder.Config{ForwarderTopic: wmTopic})
		if err != nil {
			_ = out.Close()
			_ = in.Close()
			return nil, err
		}
		fctx, cancel := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { defer close(ran); _ = f.Run(fctx) }()
		<-f.Running()
		return func() { _ = f.Close(); cancel(); <-ran; _ = in.Close(); _ = out.Close() }, nil
	}
	return side, nil
}

// writeOne is one transaction of the business write and its message.
func writeOne(ctx context.Context, p *peerSide) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if !p.noLetter {
		if _, err := tx.ExecContext(ctx, insertLetter, newID(), "I-1", "C-1"); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := p.write(ctx, tx, p.queue); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// peerDrain writes n transactions first, then forwards them: the rate of
// confirms from the forwarder's start to the last confirm.
func peerDrain(ctx context.Context, p *peerSide, n, writers int) (relayRun, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := writeOne(ctx, p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return relayRun{}, err
	}
	began := time.Now()
	stop, err := p.start(ctx)
	if err != nil {
		return relayRun{}, err
	}
	defer stop()
	for p.lags.sent.Load() < int64(n) {
		if ctx.Err() != nil {
			return relayRun{}, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	return relayRun{sent: p.lags.sent.Load(), seconds: time.Since(began).Seconds()}, nil
}

// peerFlow runs writers for d (paced to perSecond in all, or as fast as
// they go with 0) with the forwarder running: the confirms' rate from the
// first write to the last confirm, and the lags.
func peerFlow(ctx context.Context, p *peerSide, d time.Duration, perSecond, writers int) (relayRun, error) {
	stop, err := p.start(ctx)
	if err != nil {
		return relayRun{}, err
	}
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var added atomic.Int64
	var wg sync.WaitGroup
	var werr error
	var once sync.Once
	began := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var interval time.Duration
			if perSecond > 0 {
				interval = time.Duration(writers) * time.Second / time.Duration(perSecond)
			}
			next := time.Now()
			for wctx.Err() == nil {
				if interval > 0 {
					next = next.Add(interval)
					time.Sleep(time.Until(next))
				}
				if err := writeOne(wctx, p); err != nil {
					if wctx.Err() == nil {
						once.Do(func() { werr = err })
					}
					return
				}
				added.Add(1)
			}
		}()
	}
	wg.Wait()
	writing := time.Since(began)
	if werr != nil {
		return relayRun{}, werr
	}
	for p.lags.sent.Load() < added.Load() {
		if ctx.Err() != nil {
			return relayRun{}, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(began)
	r := relayRun{sent: p.lags.sent.Load(), seconds: elapsed.Seconds()}
	r.p50, r.p95 = p.lags.percentiles()
	r.extra = fmt.Sprintf("written %.0f/s for %s; drained %.2fs after", float64(added.Load())/writing.Seconds(), writing.Round(time.Millisecond), (elapsed - writing).Seconds())
	return r, nil
}

// outboxPeerSection measures inboxkit's relay and Watermill's SQL publisher +
// Forwarder side by side, interleaved, each cell on a fresh schema and
// queue: a drain of -outbox-n messages written before, a writer at
// -outbox-rate msg/s for -d, and -big-c writers at full speed for -d.
func outboxPeerSection(ctx context.Context, admin *sql.DB, o options) error {
	conn, pub, closeRabbit, err := openRabbit(ctx, o)
	if err != nil {
		return err
	}
	defer closeRabbit()
	conns := o.bigConc + 24
	sides := []struct {
		name string
		open func() (*peerSide, error)
	}{
		{"inboxkit relay", func() (*peerSide, error) { return inboxkitPeer(ctx, admin, o, conn, pub, conns) }},
		{"watermill-sql + forwarder", func() (*peerSide, error) { return watermillPeer(ctx, admin, o, conn, conns) }},
	}
	cells := []struct {
		name string
		run  func(p *peerSide) (relayRun, error)
	}{
		{fmt.Sprintf("drain of %d", o.outboxN), func(p *peerSide) (relayRun, error) { return peerDrain(ctx, p, o.outboxN, o.bigConc) }},
		{fmt.Sprintf("%d msg/s, 1 writer", o.outboxRate), func(p *peerSide) (relayRun, error) { return peerFlow(ctx, p, o.dur, o.outboxRate, 1) }},
		{fmt.Sprintf("saturation, %d writers", o.bigConc), func(p *peerSide) (relayRun, error) { return peerFlow(ctx, p, o.dur, 0, o.bigConc) }},
	}
	results := map[string][]relayRun{}
	for round := 1; round <= o.rounds; round++ {
		for _, c := range cells {
			for _, s := range sides {
				p, err := s.open()
				if err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				r, err := c.run(p)
				p.done()
				if err != nil {
					return fmt.Errorf("%s, %s: %w", s.name, c.name, err)
				}
				k := c.name + "/" + s.name
				results[k] = append(results[k], r)
				fmt.Fprintf(o.log, "outbox peer round %d %-24s %-26s %8.0f msgs/s p50 %s p95 %s %s\n", round, c.name, s.name, r.rate(), r.p50, r.p95, r.extra)
			}
		}
	}
	fmt.Fprintf(o.out, "\nOutbox relay beside Watermill (watermill-sql v4.1.2 publisher + forwarder, watermill-amqp v3.0.2 with confirms, poll %s): one letter row + one message per transaction, PostgreSQL -> RabbitMQ, 200-byte bodies; lag = write to confirm; median of %d round(s)\n\n", wmPollInterval, o.rounds)
	tw := table(o.out)
	fmt.Fprintf(tw, "cell\tforwarder\tmsgs/s\tinboxkit vs watermill\tlag p50\tlag p95\twrites\t\n")
	for _, c := range cells {
		wm := medianRun(results[c.name+"/"+sides[len(sides)-1].name]).rate()
		for _, s := range sides {
			m := medianRun(results[c.name+"/"+s.name])
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", c.name, s.name, m.rate(), ratio(m.rate(), wm), lagString(m.p50), lagString(m.p95), m.extra)
		}
	}
	return tw.Flush()
}
