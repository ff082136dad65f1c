package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

const envTestMain = "STRATA_CLI_TEST_MAIN"

// strataPiped runs the test binary as `strata args...` with stdout and stderr on pipes
// (exec gives a child writing into a bytes.Buffer an os.Pipe), as in `strata demo | cat`
// or a CI log.
func strataPiped(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errb.String()
}

// requirePlain fails on a carriage return or an escape character (every ANSI sequence
// starts with one): what a progress bar leaves behind. On stderr, where progress goes
// (stdout's tables pad their cells), a line padded with spaces fails too.
func requirePlain(t *testing.T, what, s string) {
	t.Helper()
	require.NotContains(t, s, "\r", "%s: a carriage return in %q", what, s)
	require.NotContains(t, s, "\x1b", "%s: an escape sequence in %q", what, s)
	if strings.HasSuffix(what, "stderr") {
		for _, l := range strings.Split(s, "\n") {
			require.False(t, strings.HasSuffix(l, " "), "%s: a padded line %q", what, l)
		}
	}
}

// Progress goes to pipes and buffers as plain lines: the demo and the load test as real
// processes on pipes, the paging and GDPR commands into buffers.
func TestProgressIsPlainLinesOutsideATerminal(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}

	code, out, errs := strataPiped(t, agent, "demo", "--job", "piped-demo", "--out", t.TempDir())
	require.Zero(t, code, errs)
	requirePlain(t, "demo stdout", out)
	requirePlain(t, "demo stderr", errs)
	require.Contains(t, out, "OK: 2 runs, 1 kill -9")
	require.Regexp(t, `^media job: [0-9]/9 \([0-9]+%\)\n`, errs, "the first progress line")
	require.Regexp(t, `media job: 9/9 \(100%\) \(done in [0-9.]+m?s\)\n`, errs, "the last progress line")

	code, out, errs = strataPiped(t, map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.AdminKey},
		"loadtest", "--rate", "50", "--concurrency", "2", "--duration", "2s", "--agents", "1", "--memories", "5")
	require.Zero(t, code, errs)
	requirePlain(t, "loadtest stdout", out)
	requirePlain(t, "loadtest stderr", errs)
	require.Regexp(t, `(?m)^fixed rate [0-9]+ req/s, 0 errors: 2s/2s \(100%\) \(done in`, errs)

	// In-process, into buffers: `jobs events --all` pages with a bar, gdpr export and erase
	// draw theirs unless --no-progress.
	for i := 0; i < 3; i++ {
		require.Equal(t, 201, s.Do("POST", "/v1/jobs/piped-demo/events", agent["STRATA_API_KEY"], map[string]any{"op": "note"}).Status)
	}
	code, out, errs = run(t, agent, "jobs", "events", "piped-demo", "--all")
	require.Zero(t, code, errs)
	requirePlain(t, "events stdout", out)
	requirePlain(t, "events stderr", errs)
	require.Contains(t, errs, "reading events: ")

	comp := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "compliance")}
	code, out, errs = run(t, comp, "gdpr", "export", "demo-user", "-f", filepath.Join(t.TempDir(), "x.ndjson"))
	require.Zero(t, code, errs)
	requirePlain(t, "export stdout", out)
	requirePlain(t, "export stderr", errs)
	require.Regexp(t, `exporting: [0-9.]+ (B|KiB|MiB) \(done in`, errs)
	code, out, errs = run(t, comp, "gdpr", "erase", "demo-user", "--wait")
	require.Zero(t, code, errs)
	requirePlain(t, "erase stdout", out)
	requirePlain(t, "erase stderr", errs)
	require.Regexp(t, `erasing: [a-z_ ]*: ?100% \(done in|erasing: 100% \(done in`, errs)
}
