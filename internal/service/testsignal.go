package service

import (
	"testing"
	"time"
)

// testSignalTimeout bounds a test's wait for a signal: long enough for a loaded 2-core
// machine under -race, short enough that a missing signal fails the test, not the suite.
const testSignalTimeout = 10 * time.Second

// TestSignal is a point of interest a service reports ("chained", "swept", "flushed",
// "listening"). It does nothing until a test calls Init, so production pays one nil check.
// A test calls Init before starting the service and then WaitOrTimeout instead of sleeping.
// The zero value is ready to use.
type TestSignal[T any] struct {
	ch chan T
}

// testSignalBuffer: signals fired while no test waits are kept up to this many; more are
// dropped (a service never blocks on its test signal).
const testSignalBuffer = 1000

// Init turns the signal on. Call it before the service may fire it (before Start).
func (s *TestSignal[T]) Init(tb testing.TB) {
	tb.Helper()
	s.ch = make(chan T, testSignalBuffer)
}

// Signal reports val to a test that initialized the signal; otherwise it does nothing.
// It never blocks.
func (s *TestSignal[T]) Signal(val T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- val:
	default:
	}
}

// WaitOrTimeout returns the next signalled value, failing the test if none comes within
// the timeout.
func (s *TestSignal[T]) WaitOrTimeout(tb testing.TB) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatal("test signal not initialized: call Init before starting the service")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(testSignalTimeout):
		tb.Fatalf("test signal not received within %s", testSignalTimeout)
		panic("unreachable")
	}
}

// RequireEmpty fails the test if a signal was fired and not yet waited for.
func (s *TestSignal[T]) RequireEmpty(tb testing.TB) {
	tb.Helper()
	select {
	case v := <-s.ch:
		tb.Fatalf("unexpected test signal %v", v)
	default:
	}
}
