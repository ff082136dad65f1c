package pg

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Listener is what Listen reports to: up(true) once LISTEN is in place on a connection (and
// caches that rely on the notifications may switch on), notify for each notification,
// up(false) when the connection is lost (they must switch off until the next up(true)).
type Listener struct {
	Up     func(bool)
	Notify func(channel, payload string)
}

// Listen keeps a connection of its own LISTENing on channels until ctx ends, reconnecting
// with backoff, and reports to l. ready (may be nil) is closed once the first LISTEN
// succeeded. what names the listener in the warning logged when it disconnects.
func Listen(ctx context.Context, dsn string, channels []string, log *slog.Logger, what string, l Listener, ready chan<- struct{}) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, dsn)
		for i := 0; err == nil && i < len(channels); i++ {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channels[i]}.Sanitize())
		}
		if err == nil {
			l.Up(true)
			if ready != nil {
				close(ready)
				ready = nil
			}
			backoff = 100 * time.Millisecond
			for {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(ctx); err != nil {
					break
				}
				l.Notify(n.Channel, n.Payload)
			}
		}
		l.Up(false)
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn(what+" listener disconnected; its cache is off until it reconnects", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
