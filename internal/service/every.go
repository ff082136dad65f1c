package service

import (
	"context"
	"time"
)

// Every calls fn every interval until ctx ends (the loop of a periodic service's goroutine;
// an interval ≤ 0 only waits for ctx).
func Every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	if interval <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}
