package extraction_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestExtractionSurvivesSIGKILLMidApply runs the real server binary with background
// extraction, SIGKILLs it while it applies a decision set (STRATA_EXTRACTION_APPLY_PAUSE
// widens the window inside the one transaction), and checks that nothing of the set is
// left — no memory, preference, provenance, cursor move — then that after a restart the same
// turns are extracted exactly once.
func TestExtractionSurvivesSIGKILLMidApply(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	ctx := context.Background()
	const facts = 12
	called := make(chan struct{}, 64)
	llm := llmtest.New(t, func(p llmtest.Prompt) string {
		var ds []llmtest.D
		for i := range facts {
			ds = append(ds, llmtest.D{Op: "ADD", Kind: "fact", Text: fmt.Sprintf("Project Nimbus reel %d is graded with LUT %d", i, i*7),
				Turns: []int64{1}})
		}
		ds = append(ds, llmtest.D{Op: "ADD", Kind: "preference", Key: "export_resolution", Text: "4K", Turns: []int64{2}})
		return llmtest.Answer(ds...)
	})
	llm.OnCall = func(llmtest.Prompt) { called <- struct{}{} }

	bin := buildServer(t)
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	admin := "sk_admin_" + testenv.RandomID(16)
	env := append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisURL(), "STRATA_REDIS_PREFIX="+prefix,
		fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port), "STRATA_ADMIN_KEY="+admin, "STRATA_LOG_LEVEL=warn",
		"STRATA_SHUTDOWN_TIMEOUT=2s", "STRATA_SHUTDOWN_DELAY=0", "STRATA_LLM_MODEL=fake-model", "OPENAI_BASE_URL="+llm.BaseURL(),
		"STRATA_EXTRACTION_POLL=100ms", "STRATA_EXTRACTION_APPLY_PAUSE=200ms")
	logPath := filepath.Join(t.TempDir(), "server.log")
	var cmd *exec.Cmd
	start := func() {
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		defer logf.Close()
		cmd = exec.Command(bin)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
		require.NoError(t, cmd.Start())
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // kept: polls a real child server process (kill -9 harness)
			if resp, err := http.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
		}
		b, _ := os.ReadFile(logPath)
		t.Fatalf("server did not start:\n%s", b)
	}
	t.Cleanup(func() {
		if cmd != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("server log:\n%s", b)
		}
	})
	do := func(method, path, key string, body any) (int, map[string]any) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	key := func(role string) string {
		st, k := do("POST", "/v1/admin/keys", admin, map[string]any{"org_id": "acme", "role": role})
		require.Equal(t, 201, st)
		return k["key"].(string)
	}
	owner := testenv.OwnerConn(t, dsn)
	counts := func() [4]int64 {
		var c [4]int64
		require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM memories WHERE org_id = 'acme'),
			(SELECT count(*) FROM kv_entries WHERE org_id = 'acme'), (SELECT count(*) FROM extraction_provenance WHERE org_id = 'acme'),
			(SELECT coalesce(max(extracted_seq), 0) FROM extraction_state WHERE org_id = 'acme')`).Scan(&c[0], &c[1], &c[2], &c[3]))
		return c
	}

	start()
	adm, agent := key("admin"), key("agent")
	st, _ := do("PUT", "/v1/admin/policies", adm, map[string]any{"extraction": map[string]any{"enabled": true, "debounce": "0s"}})
	require.Contains(t, []int{200, 201}, st)
	st, _ = do("POST", "/v1/sessions/nimbus/messages", agent, map[string]any{"user_id": "ana", "agent_id": "colourist",
		"messages": []map[string]any{{"role": "user", "content": "Here are the grades for the Nimbus reels."}, {"role": "user", "content": "Export in 4K."}}})
	require.Equal(t, 201, st)
	select {
	case <-called:
	case <-time.After(60 * time.Second):
		t.Fatal("the background extraction never called the model")
	}
	// The model answered; the apply transaction takes (facts+1) × 200 ms. Kill inside it.
	time.Sleep(1200 * time.Millisecond) // kept: lands the SIGKILL inside the apply transaction's window
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Equal(t, [4]int64{0, 0, 0, 0}, counts(), "nothing of the decision set is left after the kill")

	// Restart: the turns are still waiting and are extracted exactly once.
	start()
	st, res := do("POST", "/v1/memories/extract", agent, map[string]any{"session_id": "nimbus"})
	require.Equal(t, 200, st, "%v", res)
	require.Equal(t, [4]int64{facts, 1, facts + 1, 2}, counts())
	st, res = do("POST", "/v1/memories/extract", agent, map[string]any{"session_id": "nimbus"})
	require.Equal(t, 200, st, "%v", res)
	require.Empty(t, res["decisions"])
	require.Equal(t, [4]int64{facts, 1, facts + 1, 2}, counts(), "never extracted twice")
}

func buildServer(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	require.NoError(t, err)
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(t.TempDir(), "strata-server")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/server")
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
	return bin
}
