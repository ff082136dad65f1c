package service

import (
	"context"
	"sync"
)

// Service is what a background service offers: Start launches its goroutine and returns
// (an error only if it could not start), Stop cancels it and waits until it has returned.
// Both are idempotent and safe for concurrent use; a stopped service may be started again.
type Service interface {
	Start(ctx context.Context) error
	Stop()
	Started() <-chan struct{}
}

// StartStop is embedded in a service to give it Start/Stop semantics. The service's Start
// calls StartInit and, if told to start, launches its goroutine, which closes started once
// it is running and calls stopped (deferred) when it returns:
//
//	func (c *Chainer) Start(ctx context.Context) error {
//		ctx, shouldStart, started, stopped := c.StartInit(ctx)
//		if !shouldStart {
//			return nil
//		}
//		go func() {
//			started()
//			defer stopped()
//			... loop until <-ctx.Done() ...
//		}()
//		return nil
//	}
type StartStop struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	started chan struct{}
	stopped chan struct{}
}

// StartInit prepares a start. shouldStart is false if the service is already running (the
// call is then a no-op). Otherwise ctx is a context cancelled by Stop; started must be called
// once the service's goroutine runs, and stopped exactly once when it returns.
func (s *StartStop) StartInit(ctx context.Context) (_ context.Context, shouldStart bool, started, stopped func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return ctx, false, func() {}, func() {}
	}
	ctx, s.cancel = context.WithCancel(ctx)
	startedCh, stoppedCh := s.startedChanLocked(), make(chan struct{})
	s.stopped = stoppedCh
	var once sync.Once
	return ctx, true, func() { once.Do(func() { close(startedCh) }) }, func() {
		once.Do(func() { close(startedCh) }) // a goroutine that failed before started()
		close(stoppedCh)
	}
}

func (s *StartStop) startedChanLocked() chan struct{} {
	if s.started == nil {
		s.started = make(chan struct{})
	}
	return s.started
}

// Started returns a channel closed once the current (or next) run of the service has
// started. Tests use it to know a service is up before acting on it.
func (s *StartStop) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedChanLocked()
}

// Stop cancels the service and waits until its goroutine has returned. It is a no-op if the
// service is not running, and safe to call from several goroutines at once: each returns
// after the goroutine has stopped.
func (s *StartStop) Stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	if cancel != nil {
		s.cancel = nil
		s.started = nil // the next Start gets a fresh channel
	}
	s.mu.Unlock()
	if cancel == nil {
		if stopped != nil {
			<-stopped // a concurrent Stop is in progress: wait for it too
		}
		return
	}
	cancel()
	<-stopped
}

// StartAll starts services in order; if one fails, those already started are stopped (in
// reverse order) and its error is returned.
func StartAll(ctx context.Context, services ...Service) error {
	for i, svc := range services {
		if err := svc.Start(ctx); err != nil {
			StopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services in reverse order (the last started stops first).
func StopAll(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
	}
}
