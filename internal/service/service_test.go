package service

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ticker is the smallest service: it signals "running" once started and "stopped" on exit.
type ticker struct {
	StartStop
	running TestSignal[struct{}]
}

func (t *ticker) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := t.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		t.running.Signal(struct{}{})
		<-ctx.Done()
	}()
	return nil
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StartIsIdempotentAndStopWaits", func(t *testing.T) {
		t.Parallel()
		s := &ticker{}
		s.running.Init(t)
		require.NoError(t, s.Start(ctx))
		require.NoError(t, s.Start(ctx))
		<-s.Started()
		s.running.WaitOrTimeout(t)
		s.running.RequireEmpty(t) // the second Start started nothing
		s.Stop()
		s.Stop()
	})

	t.Run("RestartAfterStop", func(t *testing.T) {
		t.Parallel()
		s := &ticker{}
		s.running.Init(t)
		for range 3 {
			require.NoError(t, s.Start(ctx))
			s.running.WaitOrTimeout(t)
			s.Stop()
		}
	})

	t.Run("ConcurrentStartStop", func(t *testing.T) {
		t.Parallel()
		s := &ticker{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				require.NoError(t, s.Start(ctx))
				s.Stop()
			})
		}
		wg.Wait()
		s.Stop()
	})

	t.Run("StoppedBeforeStarted", func(t *testing.T) {
		t.Parallel()
		s := &ticker{}
		s.Stop() // no-op
		started := s.Started()
		require.NoError(t, s.Start(ctx))
		<-started // a channel taken before Start closes on that Start
		s.Stop()
	})

	t.Run("ParentContextCancelled", func(t *testing.T) {
		t.Parallel()
		s := &ticker{}
		ctx, cancel := context.WithCancel(ctx)
		require.NoError(t, s.Start(ctx))
		cancel()
		s.Stop() // returns: the goroutine saw the parent end
	})

	t.Run("StartAllStopAll", func(t *testing.T) {
		t.Parallel()
		a, b := &ticker{}, &ticker{}
		require.NoError(t, StartAll(ctx, a, b))
		<-a.Started()
		<-b.Started()
		StopAll(a, b)
	})
}

func TestTestSignalIsNoOpUntilInit(t *testing.T) {
	t.Parallel()
	var s TestSignal[int]
	s.Signal(1) // nothing happens, nothing blocks
	s.Init(t)
	s.Signal(2)
	require.Equal(t, 2, s.WaitOrTimeout(t))
}
