// Package typescripttest runs the TypeScript client's vitest suite (clients/typescript)
// against a live server, so `make test` (go test ./...) covers it: typed errors, job.step
// (stored results, lease loss, manual review, retryable failures, retries through an outage
// with one Idempotency-Key), job.once, and a worker SIGKILLed at chosen points of a 10-step job.
package typescripttest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// The tests the suite must have run and passed (a renamed or skipped test fails here).
var want = []string{
	"reads config from STRATA_URL / STRATA_API_KEY",
	"turns problems into typed errors naming the fields",
	"job and step methods speak the documented shapes",
	"returns a completed step's stored result without running it again",
	"aborts the signal when the lease is lost and refuses the stale token",
	"stops for a human on manualReview and runs again once cleared",
	"fails a step as retryable and the next call retries it",
	"retries through a server outage with the same Idempotency-Key",
	"honours Retry-After within the backoff bound and gives up after maxRetries",
	"skips an op the log already shows applied",
	"SIGKILLed workers: every side effect exactly once, no completed step re-run",
}

func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/typescript")
	s := apptest.Start(t)
	agent := s.NewKey("ts-client", "agent")
	admin := s.NewKey("ts-client", "admin") // clears a manual-review step
	start := time.Now()
	results, clean := testenv.Vitest(t, dir, 3*time.Minute,
		"STRATA_URL="+s.URL, "STRATA_API_KEY="+agent, "STRATA_ADMIN_KEY="+admin)
	status := map[string]string{}
	for _, r := range results {
		status[r.Title] = r.Status
	}
	for _, name := range want {
		require.Equal(t, "passed", status[name], "%q did not pass:\n%s", name, testenv.Tail(clean, 4000))
	}
	for line := range strings.SplitSeq(clean, "\n") {
		if strings.Contains(line, "crash test:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	t.Logf("TypeScript client: %d tests passed in %s", len(status), time.Since(start).Round(time.Millisecond))
}
