package queue_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/testenv"
)

// syncBuffer is a log sink read while River writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLoggerDropsBelowItsLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	server := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := queue.Logger(server, nil).With("component", "river").WithGroup("g")
	l.Info("job counts")
	l.Warn("lost its leadership", "k", 1)
	require.NotContains(t, buf.String(), "job counts")
	require.Contains(t, buf.String(), "lost its leadership")
	require.Contains(t, buf.String(), "component=river g.k=1")
	require.False(t, l.Enabled(context.Background(), slog.LevelInfo))

	buf.Reset()
	debug := queue.Logger(server, slog.LevelDebug)
	debug.Debug("below the server's own level")
	debug.Info("at the server's level")
	require.NotContains(t, buf.String(), "below the server's own level", "the server's level applies on top")
	require.Contains(t, buf.String(), "at the server's level")
}

// River logs "Producer job counts" at INFO every 5 s while jobs run: a client made with
// queue.New's default level does not pass it on, one at INFO does.
func TestRiverJobCountsQuietByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := func(level slog.Leveler) (*queue.Client, *syncBuffer) {
		pool, _ := testenv.Pool(t)
		var buf syncBuffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		workers := river.NewWorkers()
		river.AddWorker(workers, &orgWorker{})
		c, err := queue.New(pool, log, queue.Config{Workers: workers, LogLevel: level})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = queue.Stop(context.Background(), c) })
		_, err = c.Insert(ctx, orgArgs{Org: "o"}, nil)
		require.NoError(t, err)
		return c, &buf
	}
	_, quiet := start(nil)
	_, loud := start(slog.LevelInfo)
	require.Eventually(t, func() bool { return strings.Contains(loud.String(), "Producer job counts") },
		20*time.Second, 100*time.Millisecond, "at INFO River reports its job counts")
	// kept: the quiet client's producer ticks on the same 5 s period, started within
	// milliseconds of the loud one's; a second more covers the skew before asserting absence.
	time.Sleep(time.Second)
	require.NotContains(t, quiet.String(), "Producer job counts", quiet.String())
	require.NotContains(t, quiet.String(), `"level":"INFO"`)
}
