// Package typescripttest runs the TypeScript client's vitest suite (clients/typescript)
// against a live server, so `make test` (go test ./...) covers it: typed errors, job.step
// (stored results, lease loss, manual review, retryable failures, retries through an outage
// with one Idempotency-Key), job.once, and a worker SIGKILLed at chosen points of a 10-step job.
package typescripttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// clientDir is clients/typescript with its npm dependencies installed.
func clientDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "clients", "typescript")
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not on PATH: the TypeScript client tests need Node 20+ and npm (clients/typescript)", bin)
		}
	}
	out, err := exec.Command("node", "-e", "process.stdout.write(process.versions.node)").Output()
	require.NoError(t, err)
	var major int
	_, _ = fmt.Sscanf(string(out), "%d", &major)
	if major < 20 {
		t.Fatalf("node %s is too old: the TypeScript client needs Node 20+", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "vitest")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, b)
		}
	}
	return dir
}

func tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

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
	dir := clientDir(t)
	s := apptest.Start(t)
	agent := s.NewKey("ts-client", "agent")
	admin := s.NewKey("ts-client", "admin") // clears a manual-review step
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	report := filepath.Join(t.TempDir(), "vitest.json")
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "vitest"), "run",
		"--reporter=default", "--reporter=json", "--outputFile.json="+report)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+agent, "STRATA_ADMIN_KEY="+admin,
		"NO_COLOR=1", "CI=true")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	clean := ansi.ReplaceAllString(string(out), "")
	if err != nil {
		t.Fatalf("TypeScript client suite failed (%v):\n%s", err, tail(clean, 20000))
	}
	var rep struct {
		TestResults []struct {
			AssertionResults []struct {
				Title  string `json:"title"`
				Status string `json:"status"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	b, err := os.ReadFile(report)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	status := map[string]string{}
	for _, f := range rep.TestResults {
		for _, a := range f.AssertionResults {
			status[a.Title] = a.Status
		}
	}
	for _, name := range want {
		require.Equal(t, "passed", status[name], "%q did not pass:\n%s", name, tail(clean, 4000))
	}
	for line := range strings.SplitSeq(clean, "\n") {
		if strings.Contains(line, "crash test:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	t.Logf("TypeScript client: %d tests passed in %s", len(status), time.Since(start).Round(time.Millisecond))
}
