package service

import (
	"context"
	"testing"
	"time"
)

func TestEveryCallsUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func(context.Context) { calls <- struct{}{} })
	}()
	<-calls
	<-calls // it keeps calling
	cancel()
	<-done // and returns once ctx ends

	// No interval: it only waits for ctx.
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, 0, func(context.Context) { t.Error("called with no interval") })
	}()
	cancel()
	<-done
}
