package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// watermillInboxDDL is the inbox table a Watermill user writes for the
// same job: the event id and consumer as the primary key.
const watermillInboxDDL = `CREATE TABLE inbox_event_processing (
  event_id       varchar(120) NOT NULL,
  consumer_name  varchar(80)  NOT NULL,
  status         varchar(20)  NOT NULL,
  correlation_id varchar(120),
  processed_at   timestamptz  NOT NULL,
  PRIMARY KEY (event_id, consumer_name))`

const watermillInsertInbox = `INSERT INTO inbox_event_processing (event_id, consumer_name, status, correlation_id, processed_at)
VALUES ($1, 'shipping-letters', 'PROCESSED', $2, now())`

// runWatermill is the consumer a Go user would write with Watermill: a
// router with PoisonQueue, Retry and Recoverer middleware, the AMQP
// durable-queue subscriber (one channel per handler, its default prefetch
// unless set), Handlers router handlers competing on the queue, and pgx's
// pool. Per message: BEGIN, INSERT the inbox row (duplicate key: ROLLBACK
// and ack), INSERT the letter, COMMIT; an error is retried 3 times, then
// the message goes to <queue>.poison.
func runWatermill(ctx context.Context, r e2eRun) (*tally, time.Duration, error) {
	if _, err := r.Schema.DB.ExecContext(ctx, watermillInboxDDL); err != nil {
		return nil, 0, err
	}
	pool, err := pgxpool.New(ctx, r.Schema.DSN+"&pool_max_conns="+strconv.Itoa(r.Handlers+1))
	if err != nil {
		return nil, 0, err
	}
	defer pool.Close()
	logger := watermill.NopLogger{}
	cfg := wmamqp.NewDurableQueueConfig(r.AMQP)
	if r.Prefetch > 0 {
		cfg.Consume.Qos.PrefetchCount = r.Prefetch
	}
	sub, err := wmamqp.NewSubscriber(cfg, logger)
	if err != nil {
		return nil, 0, err
	}
	defer sub.Close()
	pub, err := wmamqp.NewPublisher(wmamqp.NewDurableQueueConfig(r.AMQP), logger)
	if err != nil {
		return nil, 0, err
	}
	defer pub.Close()
	if err := sub.SubscribeInitialize(r.Queue + ".poison"); err != nil {
		return nil, 0, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, 0, err
	}
	poison, err := middleware.PoisonQueue(pub, r.Queue+".poison")
	if err != nil {
		return nil, 0, err
	}
	t := newTally(r.Expect)
	router.AddMiddleware(
		poison,
		middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond, Multiplier: 2}.Middleware,
		middleware.Recoverer,
	)
	handler := func(msg *message.Message) error {
		id := msg.Metadata.Get("eventId")
		if id == "" {
			t.add(&t.other)
			return errors.New("no eventId header")
		}
		inv, err := decodeInvoice(msg.Payload)
		if err != nil {
			t.add(&t.other)
			return err
		}
		ctx := msg.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.add(&t.other)
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
		if _, err := tx.Exec(ctx, watermillInsertInbox, id, msg.Metadata.Get("correlationId")); err != nil {
			var pg *pgconn.PgError
			if errors.As(err, &pg) && pg.Code == "23505" {
				t.add(&t.duplicates)
				return nil
			}
			t.add(&t.other)
			return err
		}
		if _, err := tx.Exec(ctx, insertLetter, id, inv.InvoiceNo, inv.CustomerNo); err != nil {
			t.add(&t.other)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			t.add(&t.other)
			return err
		}
		t.add(&t.processed)
		return nil
	}
	for i := range r.Handlers {
		router.AddConsumerHandler(fmt.Sprintf("shipping-letters-%d", i), r.Queue, sub, handler)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	werr := t.wait(ctx, 30*time.Second)
	elapsed := time.Duration(t.last.Load() - began.UnixNano())
	time.Sleep(200 * time.Millisecond) // the router acknowledges after the handler returns
	stop()
	if err := <-done; err != nil && werr == nil {
		werr = err
	}
	_ = router.Close()
	return t, elapsed, werr
}
