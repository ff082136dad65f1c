package gdpr_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them (a service not stopped,
// a pool or client not closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
