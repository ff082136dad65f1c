package keyvalue

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/strata-mem/strata/internal/testenv"
)

// TestMain fails the package's tests if any goroutine outlives them (a service not stopped,
// a pool or client not closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testenv.Exit)) // Exit stops a shared Redis Cluster (STRATA_TEST_REDIS=cluster)
}
