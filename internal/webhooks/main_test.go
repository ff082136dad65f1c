package webhooks_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/strata-mem/strata/internal/testenv"
)

// TestMain fails the package's tests if any goroutine outlives them (a server not stopped,
// a client's connection not closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testenv.Exit))
}
