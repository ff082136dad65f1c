package graph

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them (a pool not closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
