package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/demo"
)

// TestMain lets the test binary stand in for `strata demo worker`: the demo re-executes it
// with STRATA_DEMO_WORKER=1 and SIGKILLs it mid-way, as it does the real binary.
func TestMain(m *testing.M) {
	if os.Getenv(demo.EnvWorker) == "1" {
		os.Exit(Main(context.Background(), []string{"demo", "worker"}, os.Getenv, os.Stdout, os.Stderr))
	}
	// STRATA_CLI_TEST_MAIN=1: the test binary is `strata` itself, with its real stdout and
	// stderr (tests run it with both on pipes, as `strata demo | cat` does).
	if os.Getenv(envTestMain) == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	workerCommand = func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
	os.Exit(m.Run())
}

// TestDemoCrashesResumesExactlyOnce runs `strata demo` against a real server: its worker
// process is killed with SIGKILL mid-way, a new one resumes from Strata, and the timeline
// (read back from Strata) shows every step done exactly once and the colour profile
// computed once and re-used.
func TestDemoCrashesResumesExactlyOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}

	code, out, errs := run(t, env, "demo", "--job", "demo-1", "--out", t.TempDir(), "-o", "json")
	require.Zero(t, code, errs)
	var rep demo.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 2, rep.Runs)
	require.Equal(t, 1, rep.Kills)
	require.Equal(t, demo.DefaultCrashAt, rep.KilledAt)
	require.True(t, rep.ExactlyOnce(), "%+v", rep)
	require.Len(t, rep.Steps, 9)
	for _, st := range rep.Steps {
		require.Equal(t, "completed", st.Status, st.Step)
		require.Equal(t, 1, st.SideEffects, "%s: one side effect", st.Step)
		require.Equal(t, 1, st.Attempts, "%s: the restarted worker is the same agent and gets its claim back", st.Step)
	}
	byStep := map[string]demo.StepReport{}
	for _, st := range rep.Steps {
		byStep[st.Step] = st
	}
	require.Equal(t, 1, byStep["cut"].CompletedIn)
	require.Equal(t, []int{2}, byStep["colour"].ReusedIn, "run 2 re-used the settled profile")
	require.Equal(t, 2, byStep["reframe-reels"].CompletedIn, "the killed step was completed by run 2 without a second render")
	require.Equal(t, 2, byStep["export"].CompletedIn)
	require.Equal(t, 1, rep.ProfileComputed)
	require.Equal(t, 7, rep.ProfileUsedBy)
	actions := map[string][]string{}
	for _, l := range rep.Lines {
		actions[fmt.Sprintf("%d/%s", l.Run, l.Step)] = append(actions[fmt.Sprintf("%d/%s", l.Run, l.Step)], l.Action)
	}
	require.Equal(t, []string{"claimed", "computed", "rendered", "completed"}, actions["1/colour"])
	require.Equal(t, []string{"reused"}, actions["2/colour"])
	require.Equal(t, []string{"claimed", "rendered", "crashpoint"}, actions["1/reframe-reels"])
	require.Equal(t, []string{"claimed", "already_applied", "completed"}, actions["2/reframe-reels"])

	// The human timeline, as the README shows it.
	code, out, errs = run(t, env, "demo", "--job", "demo-2", "--out", t.TempDir())
	require.Zero(t, code, errs)
	for _, want := range []string{"run 1: worker pid", "kill -9", "run 2: worker pid", "re-used, not recomputed",
		"render already in the log", "OK: 2 runs, 1 kill -9; every step done exactly once (9 side effects for 9 steps)"} {
		require.Contains(t, out, want)
	}
	require.Contains(t, errs, "strata jobs resume demo-2")

	// The job is there to explore with the other commands.
	code, out, _ = run(t, env, "jobs", "steps", "demo-1")
	require.Zero(t, code)
	require.Equal(t, 10, strings.Count(out, "\n"), out)

	// A completed job has no next action: its last checkpoint's is not offered as one.
	code, out, errs = run(t, env, "context", "--job", "demo-1", "--user", "demo-user", "--kv", "brand")
	require.Zero(t, code, errs)
	require.Contains(t, out, "## Job demo-1 (completed)")
	require.Contains(t, out, "Next action: none, the job is completed.")
	require.NotContains(t, out, "complete it")
	require.NotContains(t, out, "mark the job completed")
	code, out, errs = run(t, env, "jobs", "resume", "demo-1")
	require.Zero(t, code, errs)
	require.Contains(t, out, "Next action: none, the job is completed")
}

// `strata demo; strata demo`: each run is a job of its own, so the second succeeds too.
func TestDemoTwiceInARow(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}
	jobs := map[string]bool{}
	for range 2 {
		code, out, errs := run(t, env, "demo", "--out", t.TempDir(), "-o", "json")
		require.Zero(t, code, errs)
		var rep demo.Report
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		require.True(t, rep.ExactlyOnce(), "%+v", rep)
		require.Regexp(t, `^media-demo-\d{8}-\d{6}-[0-9a-f]{8}$`, rep.Job)
		jobs[rep.Job] = true
	}
	require.Len(t, jobs, 2, "each run its own job")
}

func TestAgentCommands(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errs := run(t, env, args...)
		require.Zero(t, code, "%v: %s", args, errs)
		return out
	}

	ok("jobs", "create", "j1", "--goal", "promo", "--owner", "bot", "--user", "u1")
	out := ok("jobs", "list")
	require.Contains(t, out, "j1")
	require.Contains(t, out, "running")

	// Work on it through the client; read it with the CLI.
	s.Do("POST", "/v1/jobs/j1/steps/cut/start", env["STRATA_API_KEY"], map[string]any{"owner": "bot"})
	for i := 1; i <= 3; i++ {
		r := s.Do("POST", "/v1/jobs/j1/events", env["STRATA_API_KEY"], map[string]any{"op": "note", "params": map[string]any{"i": i}})
		require.Equal(t, 201, r.Status)
	}
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j1/checkpoint", env["STRATA_API_KEY"], map[string]any{"next_action": "grade it", "current_step": "cut"}, "If-Match", `"0"`).Status)
	out = ok("jobs", "resume", "j1")
	require.Contains(t, out, "Next action: grade it")
	require.Contains(t, out, "in flight (live, bot)")
	out = ok("jobs", "events", "j1", "--all")
	require.Equal(t, 4, strings.Count(out, "\n"), out)
	out = ok("jobs", "events", "j1", "--after-seq", "2", "-o", "json")
	var evs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &evs))
	require.Len(t, evs, 1)
	out = ok("jobs", "steps", "j1")
	require.Contains(t, out, "running (live)")
	require.Contains(t, ok("jobs", "checkpoints", "j1"), "grade it")
	out = ok("jobs", "fork", "j1", "--version", "1", "--new-job", "j1-alt")
	require.Contains(t, out, "j1-alt")
	code, _, errs := run(t, env, "jobs", "fork", "j1")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "strata jobs checkpoints j1")
	require.Contains(t, ok("jobs", "complete", "j1-alt", "--outcome", "published"), "completed")

	ok("sessions", "set", "s1", `{"draft": 1, "tone": "bold"}`, "--user", "u1")
	out = ok("sessions", "set", "s1", `{"tone": null}`, "--patch")
	require.Contains(t, out, `{"draft":1}`)
	ok("sessions", "add-message", "s1", "shorter please")
	require.Contains(t, ok("sessions", "messages", "s1"), "shorter please")
	require.Contains(t, ok("sessions", "get", "s1"), `{"draft":1}`)

	out = ok("memories", "add", "u1 likes warm teal grading", "--user", "u1", "--importance", "0.9")
	require.Contains(t, out, "created")
	require.Contains(t, ok("memories", "add", "u1 likes warm teal grading", "--user", "u1"), "deduplicated")
	out = ok("memories", "search", "teal", "--user", "u1", "-o", "json")
	var found struct {
		Items []struct {
			Memory struct {
				ID   string `json:"id"`
				Text string `json:"text"`
			} `json:"memory"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &found))
	// The search ranks every memory u1 can see: the two adds are one memory, and the job
	// memory of the fork completed above (the consolidation worker writes it from the
	// outbox, in its own time) may be there too. So the count is of the added text.
	var teal []string
	for _, it := range found.Items {
		if it.Memory.Text == "u1 likes warm teal grading" {
			teal = append(teal, it.Memory.ID)
		}
	}
	require.Len(t, teal, 1, "%s", out)
	require.Contains(t, ok("memories", "get", teal[0]), "warm teal")

	ok("kv", "set", "preferences", "tone", "playful", "--user", "u1")
	ok("kv", "set", "preferences", "tone", `"bold"`, "--session", "s1")
	out = ok("kv", "get", "preferences", "tone", "--user", "u1", "--session", "s1")
	require.Contains(t, out, "session")
	require.Contains(t, out, `"bold"`)
	require.Contains(t, ok("kv", "list", "preferences", "--user", "u1", "--resolve"), "playful")
	require.Contains(t, ok("kv", "history", "preferences", "tone", "--user", "u1"), "put")
	code, _, errs = run(t, env, "kv", "set", "preferences", "tone", "x", "--user", "u1", "--if-match", "9")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "read it again and retry")

	out = ok("context", "--job", "j1", "--user", "u1", "--session", "s1", "--query", "grading", "--max-tokens", "800")
	require.Contains(t, out, "## Job j1 (running)")
	require.Contains(t, out, "u1 likes warm teal grading")
	require.Contains(t, out, "of 800 tokens (gpt-4o, o200k_base)")
	require.Contains(t, out, "similar_jobs")
	require.Contains(t, ok("tools"), "get_context")
	ok("memories", "forget", teal[0])
	ok("sessions", "delete", "s1")

	code, _, errs = run(t, env, "jobs", "resume", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "nothing with that id exists")
	code, out, _ = run(t, env, "__complete", "jobs", "resume", "")
	require.Zero(t, code)
	require.Contains(t, out, "j1\trunning promo", "job ids complete from the server")
}
