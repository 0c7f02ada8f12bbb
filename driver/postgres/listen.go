package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen LISTENs on channel through a connection of its own to dsn (a
// PostgreSQL URL or keyword/value string) and returns a channel that
// receives after every notification, and after every (re)connect, since
// notifications sent while no connection listened are lost. Receives are
// coalesced: at most one waits. A lost connection is dialled again after a
// pause that doubles up to 30s, with a warning on logger (nil: none). When
// ctx is done the connection is closed and the channel too.
//
// An outbox relay wakes on it (outbox.RelayConfig.Wake, channel
// outbox.Store.NotifyChannel), so that a message leaves right after its
// transaction's commit instead of at the relay's next poll.
func Listen(ctx context.Context, dsn, channel string, logger *slog.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		pause := 250 * time.Millisecond
		for ctx.Err() == nil {
			err := listen(ctx, dsn, channel, wake)
			if ctx.Err() != nil {
				return
			}
			if logger != nil {
				logger.Warn("postgres: LISTEN connection lost; dialling again", "channel", channel, "in", pause.String(), "error", err.Error())
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, 30*time.Second)
		}
	}()
	return out
}

func listen(ctx context.Context, dsn, channel string, wake func()) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	wake() // anything committed while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
