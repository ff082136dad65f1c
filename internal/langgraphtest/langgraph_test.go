package langgraphtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestLangGraphConformance(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/langgraph-js")
	s := apptest.Start(t)
	results, clean := testenv.Vitest(t, dir, 5*time.Minute, "STRATA_URL="+s.URL, "STRATA_ADMIN_KEY="+s.AdminKey,
		"STRATA_VITEST_FILES=test/conformance.test.ts")
	// Count per suite: validate() registers under "StrataSaver", the opt-in delta-channel
	// checks under "StrataSaver (opt-in)".
	type tally struct{ passed, total int }
	by := map[string]*tally{}
	for _, r := range results {
		suite := r.Suite
		if suite == "" {
			suite = "?"
		}
		if by[suite] == nil {
			by[suite] = &tally{}
		}
		by[suite].total++
		if r.Status == "passed" {
			by[suite].passed++
		}
	}
	v, opt := by["StrataSaver"], by["StrataSaver (opt-in)"]
	require.NotNil(t, v, "no validate() results in:\n%s", testenv.Tail(clean, 4000))
	require.NotNil(t, opt)
	require.Equal(t, v.total, v.passed, "not every conformance check passed:\n%s", testenv.Tail(clean, 4000))
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
	require.NoError(t, err, "graph run failed:\n%s\n%s", r.out, testenv.Tail(stderr.String(), 4000))
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
	dir := testenv.NodeProject(t, "clients/langgraph-js")
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

// TestLangGraphStore runs the differential suite: the same operations on LangGraph's
// InMemoryStore and on StrataStore, every answer compared (test/store.test.ts says how).
func TestLangGraphStore(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/langgraph-js")
	s := apptest.Start(t)
	results, clean := testenv.Vitest(t, dir, 2*time.Minute, "STRATA_URL="+s.URL, "STRATA_ADMIN_KEY="+s.AdminKey,
		"STRATA_VITEST_FILES=test/store.test.ts")
	require.NotEmpty(t, results, testenv.Tail(clean, 4000))
	for _, r := range results {
		require.Equal(t, "passed", r.Status, "%s: %s", r.Title, testenv.Tail(clean, 4000))
	}
	t.Logf("StrataStore vs InMemoryStore: %d/%d passed", len(results), len(results))
}

// TestLangGraphStoreAcrossRestart runs a real StateGraph whose nodes read and write memories
// through config.store, stops the server, starts another on the same database, and runs the
// graph again (a new process, a new thread): it recalls what the first run remembered.
func TestLangGraphStoreAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/langgraph-js")
	s1 := apptest.Start(t)
	key := s1.NewKey("lg-store", "agent")
	run := func(url string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", append([]string{"--import", "tsx", "scripts/memory-graph.ts"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "STRATA_URL="+url, "STRATA_API_KEY="+key)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := run(s1.URL, "--user", "u1", "--fact", "the client wants captions in Dutch", "--query", "captions")
	require.Contains(t, out, "RECALLED []")
	s1.Stop()

	s2 := apptest.Start(t, apptest.Env("STRATA_DATABASE_URL", s1.DBURL), apptest.Env("STRATA_REDIS_PREFIX", s1.Prefix),
		apptest.Env("STRATA_ADMIN_KEY", s1.AdminKey))
	out = run(s2.URL, "--user", "u1", "--fact", "export at 25 fps", "--query", "which language for captions")
	require.Contains(t, out, `RECALLED ["the client wants captions in Dutch"]`)
	out = run(s2.URL, "--user", "u2", "--fact", "x", "--query", "captions")
	require.Contains(t, out, "RECALLED []", "another user's namespace sees nothing")
}
