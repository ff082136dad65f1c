package langgraphtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

var installOnce sync.Once

// clientDir is clients/langgraph-js with its npm dependencies installed.
func clientDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "clients", "langgraph-js")
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not on PATH: the LangGraph tests need Node 20+ and npm (clients/langgraph-js)", bin)
		}
	}
	out, err := exec.Command("node", "-e", "process.stdout.write(process.versions.node)").Output()
	require.NoError(t, err)
	var major int
	_, _ = fmt.Sscanf(string(out), "%d", &major)
	if major < 20 {
		t.Fatalf("node %s is too old: the LangGraph tests need Node 20+", out)
	}
	var installErr error
	installOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "vitest")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			installErr = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, b)
		}
	})
	require.NoError(t, installErr)
	return dir
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func TestLangGraphConformance(t *testing.T) {
	t.Parallel()
	dir := clientDir(t)
	s := apptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report := filepath.Join(t.TempDir(), "vitest.json")
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "vitest"), "run",
		"--reporter=default", "--reporter=json", "--outputFile.json="+report)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_ADMIN_KEY="+s.AdminKey, "NO_COLOR=1", "CI=true")
	out, err := cmd.CombinedOutput()
	clean := ansi.ReplaceAllString(string(out), "")
	if err != nil {
		t.Fatalf("LangGraph conformance suite failed (%v):\n%s", err, tail([]byte(clean), 20000))
	}
	// Count per suite: validate() registers under "StrataSaver", the opt-in delta-channel
	// checks under "StrataSaver (opt-in)".
	var rep struct {
		TestResults []struct {
			AssertionResults []struct {
				AncestorTitles []string `json:"ancestorTitles"`
				Status         string   `json:"status"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	b, err := os.ReadFile(report)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	type tally struct{ passed, total int }
	by := map[string]*tally{}
	for _, f := range rep.TestResults {
		for _, a := range f.AssertionResults {
			suite := "?"
			if len(a.AncestorTitles) > 0 {
				suite = a.AncestorTitles[0]
			}
			if by[suite] == nil {
				by[suite] = &tally{}
			}
			by[suite].total++
			if a.Status == "passed" {
				by[suite].passed++
			}
		}
	}
	v, opt := by["StrataSaver"], by["StrataSaver (opt-in)"]
	require.NotNil(t, v, "no validate() results in:\n%s", tail([]byte(clean), 4000))
	require.NotNil(t, opt)
	require.Equal(t, v.total, v.passed, "not every conformance check passed:\n%s", tail([]byte(clean), 4000))
	require.Equal(t, opt.total, opt.passed)
	require.GreaterOrEqual(t, v.total, 718, "the suite ran fewer checks than PostgresSaver passes (718)")
	t.Logf("LangGraph conformance: validate() %d/%d passed; deltaChannelHistory (opt-in) %d/%d passed",
		v.passed, v.total, opt.passed, opt.total)
}

// graphRun is one run of scripts/crash.ts.
type graphRun struct {
	out    string
	killed bool
}

// runGraph runs the crash graph. With hangIn set it waits for the node's ENTER line and then
// SIGKILLs the process from here.
func runGraph(t *testing.T, dir string, env []string, hangIn string, args ...string) graphRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--import", "tsx", "scripts/crash.ts"}, args...)
	if hangIn != "" {
		argv = append(argv, "--hang-in", hangIn)
	}
	cmd := exec.CommandContext(ctx, "node", argv...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if hangIn != "" && strings.HasPrefix(line, "ENTER "+hangIn+" ") {
			require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)) // the process and any child

		}
	}
	err = cmd.Wait()
	r := graphRun{out: out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ((ws.Signaled() && ws.Signal() == syscall.SIGKILL) || ws.ExitStatus() == 137) {
			r.killed = true
			return r
		}
	}
	require.NoError(t, err, "graph run failed:\n%s\n%s", r.out, tail(stderr.Bytes(), 4000))
	return r
}

func ledger(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Fields(string(b))
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

const final = `FINAL ["n1","n2","n3","n4","n5"]`

func TestLangGraphCrashResume(t *testing.T) {
	t.Parallel()
	dir := clientDir(t)
	s := apptest.Start(t)
	key := s.NewKey("lg-crash", "agent")
	env := append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+key)
	tmp := t.TempDir()

	t.Run("sync", func(t *testing.T) {
		thread, led := "crash-sync", filepath.Join(tmp, "ledger-sync")
		args := []string{"--thread", thread, "--durability", "sync", "--ledger", led}
		// SIGKILLed from here while it is inside n3.
		r := runGraph(t, dir, env, "n3", args...)
		require.True(t, r.killed, "the graph was not killed:\n%s", r.out)
		require.Equal(t, []string{"n1", "n2", "n3"}, ledger(t, led))

		// Strata already shows the thread as a job whose latest checkpoint is after n2.
		res := s.Do("GET", "/v1/jobs/"+thread+"/resume", key, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		view := res.Map(t)
		require.Equal(t, "running", view["job"].(map[string]any)["status"])
		require.Equal(t, "langgraph step 2", view["checkpoint"].(map[string]any)["current_step"], string(res.Body))

		r = runGraph(t, dir, env, "", args...)
		require.False(t, r.killed)
		require.Contains(t, r.out, `RESUMED ["n1","n2"]`)
		require.Contains(t, r.out, final)
		// n1 and n2 completed before the kill and never ran again; n3 (cut short) ran again.
		require.Equal(t, []string{"n1", "n2", "n3", "n3", "n4", "n5"}, ledger(t, led))
	})

	t.Run("async", func(t *testing.T) {
		thread, led := "crash-async", filepath.Join(tmp, "ledger-async")
		args := []string{"--thread", thread, "--durability", "async", "--ledger", led}
		// Killed at the very start of n3 (the process SIGKILLs itself: an exact moment).
		r := runGraph(t, dir, env, "", append(args, "--kill-in", "n3")...)
		require.True(t, r.killed, "the graph was not killed:\n%s", r.out)
		r = runGraph(t, dir, env, "", args...)
		require.Contains(t, r.out, final, "async still ends with the right state")
		l := ledger(t, led)
		rerun := count(l, "n1") - 1 + count(l, "n2") - 1
		t.Logf("durability async: killed in n3, the resumed run re-ran %d of the 2 completed nodes (ledger %v)", rerun, l)
	})
}
