package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/internal/failpoint"
	"github.com/inboxkit/inboxkit/outbox"
)

// roleEnv names the role a process of the outbox scenario plays: the rig
// starts its own binary (built with -tags failpoints) with it set to
// "sender" or "receiver".
const roleEnv = "INBOXTORTURE_ROLE"

// command is one command of the outbox scenario: the sender writes it as a
// business row and an outbox message to dest; the receiver writes it again.
type command struct {
	ID   string `json:"id"`
	Key  string `json:"key"`
	Seq  int    `json:"seq"`
	Dest string `json:"dest"`
}

// The scenario's own tables, created by the rig after inboxctl migrate.
const agentDDL = `
CREATE TABLE torture_sent (
	command_id VARCHAR(120) PRIMARY KEY,
	cmd_key    VARCHAR(200) NOT NULL,
	seq        INTEGER NOT NULL,
	message_id VARCHAR(120) NOT NULL,
	created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE torture_received (
	id         BIGSERIAL PRIMARY KEY,
	command_id VARCHAR(120) NOT NULL,
	cmd_key    VARCHAR(200) NOT NULL,
	seq        INTEGER NOT NULL,
	event_id   VARCHAR(120) NOT NULL,
	created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

// agentMain runs one process of the outbox scenario: sender or receiver.
func agentMain(role string, args []string, stderr io.Writer) int {
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fs := flag.NewFlagSet("inboxtorture "+role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("db", "", "PostgreSQL URL of the run's database")
	listen := fs.String("listen", "", "sender: address to serve POST /command on")
	brokerURL := fs.String("broker", "", "receiver: broker URL")
	queue := fs.String("queue", "", "receiver: queue (partition) to consume")
	dlqName := fs.String("dlq", "", "receiver: dead-letter queue")
	jsAckWait := fs.Duration("jetstream-ack-wait", 0, "receiver on JetStream: open the durable with MaxAckPending 1 and this AckWait (0: as brokerurl opens it, MaxAckPending at least 1000, AckWait 30s)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("pgx", *dbURL)
	if err != nil {
		logger.Error("open database", "error", err.Error())
		return 2
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	switch role {
	case "sender":
		err = runSender(ctx, db, *listen, logger)
	case "receiver":
		err = runReceiver(ctx, db, *brokerURL, *queue, *dlqName, *jsAckWait, logger)
	default:
		err = fmt.Errorf("%s=%q: use sender or receiver", roleEnv, role)
	}
	if err != nil {
		logger.Error(role+" ended", "error", err.Error())
		return 1
	}
	return 0
}

// runSender serves POST /command: in one transaction it inserts the
// command's business row and, only when that row is new, the outbox
// message. The sender deduplicates producer retries by its own table: a
// command id seen before adds nothing and answers "duplicate".
func runSender(ctx context.Context, db *sql.DB, listen string, logger *slog.Logger) error {
	ob, err := outbox.New(db, inbox.Postgres, outbox.Config{})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /command", func(w http.ResponseWriter, r *http.Request) {
		var c command
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.ID == "" || c.Key == "" || c.Dest == "" {
			http.Error(w, "body: a JSON command with id, key, seq and dest", http.StatusBadRequest)
			return
		}
		isNew, err := send(r.Context(), db, ob, c)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if isNew {
			_, _ = io.WriteString(w, "new")
		} else {
			_, _ = io.WriteString(w, "duplicate")
		}
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("sender started", "listen", ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func send(ctx context.Context, db *sql.DB, ob *outbox.Store, c command) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	body, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	// The message id is chosen here so that the business row names it;
	// the outbox refuses nothing for a new command.
	var msgID string
	if err := tx.QueryRowContext(ctx, `SELECT gen_random_uuid()::text`).Scan(&msgID); err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO torture_sent (command_id, cmd_key, seq, message_id) VALUES ($1, $2, $3, $4) ON CONFLICT (command_id) DO NOTHING`,
		c.ID, c.Key, c.Seq, msgID)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err // a producer retry of a command already written
	}
	if _, err := ob.Add(ctx, tx, outbox.Message{ID: msgID, Destination: c.Dest, Key: c.Key,
		Headers: map[string]string{"commandId": c.ID}, Body: body}); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// runReceiver consumes one partition queue with the inbox, concurrency 1
// and prefetch 1 (so that a key's messages are handled in their queue
// order), and writes a row per command in the inbox transaction. On
// JetStream prefetch 1 is not enough: brokerurl gives a durable
// MaxAckPending 1000 (shared by its processes), so the deliveries a killed
// receiver held come back after AckWait, behind later ones; jsAckWait > 0
// opens the durable with MaxAckPending 1 instead.
func runReceiver(ctx context.Context, db *sql.DB, brokerURL, queue, dlqName string, jsAckWait time.Duration, logger *slog.Logger) error {
	st, err := inbox.New(db, inbox.Postgres, inbox.Config{})
	if err != nil {
		return err
	}
	b, err := brokerurl.Open(brokerURL, brokerurl.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer b.Close()
	pub, err := b.Publisher(ctx)
	if err != nil {
		return err
	}
	name := "receiver-" + queue
	if jsAckWait > 0 {
		b.AckWait, b.MaxAckPending = jsAckWait, 1
	}
	src, err := b.Source(ctx, queue, name, 1)
	if err != nil {
		return err
	}
	h := func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
		var c command
		if err := json.Unmarshal(m.Body, &c); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO torture_received (command_id, cmd_key, seq, event_id) VALUES ($1, $2, $3, $4)`, c.ID, c.Key, c.Seq, m.ID)
		failpoint.Hit(failpoint.MidHandler) // the row written, not committed; no-op unless -tags failpoints
		return err
	}
	cons, err := consumer.New(consumer.Config{Name: name, Source: src, Store: st, Handler: h, DeadLetter: pub, DeadLetterQueue: dlqName,
		Concurrency: 1, Logger: logger, SummaryInterval: -1})
	if err != nil {
		src.Close()
		return err
	}
	logger.Info("receiver started", "queue", queue)
	return cons.Run(ctx)
}
