package readme

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// curlBlocks returns the README's fenced blocks marked "sh curl-test", in order.
func curlBlocks(t *testing.T) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "README.md"))
	require.NoError(t, err)
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh curl-test":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	require.Nil(t, cur, "an unterminated curl-test block")
	return blocks
}

// TestReadmeCurlExamples runs the README's agent-protocol walkthrough against a live server
// and checks what it did through the API.
func TestReadmeCurlExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: the README's examples need it (apt-get install curl)")
	}
	blocks := curlBlocks(t)
	require.GreaterOrEqual(t, len(blocks), 8, "the walkthrough's blocks")
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")

	var outputs []string
	for i, b := range blocks {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+b)
		cmd.Env = append(os.Environ(), "STRATA_URL="+s.URL, "KEY="+key)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		require.NoError(t, err, "README curl-test block %d failed:\n%s\nstdout: %s\nstderr: %s", i+1, b, out.String(), errb.String())
		outputs = append(outputs, out.String())
	}
	all := strings.Join(outputs, "\n")
	for _, want := range []string{`"status":"claimed"`, `"fencing_token":1`, `"applied":false`, `"seq":1`,
		`"status":"completed"`, `"version":1`, `"encoding":"o200k_base"`, `Next action: reframe the graded cut to 9:16`,
		`brand/palette = {\"mood\":\"warm\",\"primary\":\"#1A7F8E\"} (user)`, `"name":"get_context"`} {
		require.Contains(t, all, want)
	}

	// What the walkthrough left behind.
	j := s.Do("GET", "/v1/jobs/promo-42", key, nil).Map(t)
	require.Equal(t, "completed", j["status"])
	require.EqualValues(t, 1, j["checkpoint_version"])
	st := s.Do("GET", "/v1/jobs/promo-42/steps/colour", key, nil).Map(t)
	require.Equal(t, "completed", st["status"])
	require.EqualValues(t, 1, st["attempts"])
	var evs struct {
		Items []map[string]any `json:"items"`
	}
	s.Do("GET", "/v1/jobs/promo-42/events", key, nil).JSON(t, &evs)
	require.Len(t, evs.Items, 1)
	ap := s.Do("GET", `/v1/jobs/promo-42/applied?op=video.grade&params=%7B%22lut%22%3A%22warm-teal%22%7D`, key, nil).Map(t)
	require.Equal(t, true, ap["applied"])
}
