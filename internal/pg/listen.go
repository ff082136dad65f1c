package pg

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/service"
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

// ListenLoop is Listen as a background service (service.StartStop): Start launches the
// loop, Stop ends it and waits for its connection to close. Listening fires each time
// LISTEN is in place (first connect and every reconnect).
type ListenLoop struct {
	DSN      string
	Channels []string
	Log      *slog.Logger
	What     string // names the listener in the warning logged when it disconnects
	Listener Listener

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals ListenLoopTestSignals
}

// ListenLoopTestSignals are the LISTEN loop's points of interest for tests.
type ListenLoopTestSignals struct {
	Listening service.TestSignal[struct{}] // LISTEN is in place; notifications now arrive
}

// Start runs the loop until Stop.
func (l *ListenLoop) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := l.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	up := l.Listener.Up
	lst := Listener{Notify: l.Listener.Notify, Up: func(on bool) {
		up(on)
		if on {
			l.TestSignals.Listening.Signal(struct{}{})
		}
	}}
	go func() {
		started()
		defer stopped()
		Listen(ctx, l.DSN, l.Channels, l.Log, l.What, lst, nil)
	}()
	return nil
}
