package openaiagentstest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// chat runs scripts/chat.ts; with hang it SIGKILLs the process once it prints HANGING.
func chat(t *testing.T, dir string, env []string, hang bool, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := append([]string{"--import", "tsx", "scripts/chat.ts"}, args...)
	if hang {
		argv = append(argv, "--hang")
	}
	cmd := exec.CommandContext(ctx, "node", argv...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var replies []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if r, ok := strings.CutPrefix(line, "REPLY "); ok {
			replies = append(replies, r)
		}
		if hang && line == "HANGING" {
			require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
		}
	}
	err = cmd.Wait()
	if hang {
		require.Error(t, err, "the process was to be killed")
	} else {
		require.NoError(t, err, "%s", testenv.Tail(stderr.String(), 4000))
	}
	return replies
}

func TestAgentSessionSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/openai-agents")
	s := apptest.Start(t)
	key := s.NewKey("oa-agents", "agent")
	env := append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+key)

	r := chat(t, dir, env, true, "--session", "chat-1", "--say", "my name is Ada", "--say", "I edit videos", "--say", "use Dutch captions")
	require.Equal(t, []string{`heard: ["my name is Ada"]`, `heard: ["my name is Ada","I edit videos"]`,
		`heard: ["my name is Ada","I edit videos","use Dutch captions"]`}, r)

	// A new process continues the conversation from Strata: the model sees the earlier turns.
	r = chat(t, dir, env, false, "--session", "chat-1", "--say", "what do you know?")
	require.Equal(t, []string{`heard: ["my name is Ada","I edit videos","use Dutch captions","what do you know?"]`}, r)

	// The turns are Strata turns (role + text), so context assembly and extraction see them.
	res := s.Do("GET", "/v1/sessions/chat-1/messages", key, nil)
	require.Equal(t, 200, res.Status, "%s", res.Body)
	items := res.Map(t)["items"].([]any)
	require.Len(t, items, 8) // 4 user + 4 assistant
	require.Equal(t, "user", items[0].(map[string]any)["role"])
	require.Equal(t, "my name is Ada", items[0].(map[string]any)["content"])
	require.Equal(t, "assistant", items[1].(map[string]any)["role"])

	// Another org does not see the session.
	other := s.NewKey("oa-agents-other", "agent")
	otherEnv := append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+other)
	r = chat(t, dir, otherEnv, false, "--session", "chat-1", "--say", "hello")
	require.Equal(t, []string{`heard: ["hello"]`}, r)

	// The SDK's own MemorySession answers the same in one process (the reference behaviour).
	r = chat(t, dir, env, false, "--memory", "--say", "a", "--say", "b")
	require.Equal(t, []string{`heard: ["a"]`, `heard: ["a","b"]`}, r)
}

// TestSessionContract checks getItems(limit), popItem and clearSession against the SDK's
// MemorySession (scripts/contract.ts runs the same calls on both and compares).
func TestSessionContract(t *testing.T) {
	t.Parallel()
	dir := testenv.NodeProject(t, "clients/openai-agents")
	s := apptest.Start(t)
	key := s.NewKey("oa-contract", "agent")
	cmd := exec.Command("node", "--import", "tsx", "scripts/contract.ts")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "CONTRACT OK")
}
