package gdpr_test

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

	"github.com/strata-mem/strata/internal/testenv"
)

// TestGDPRErasureSurvivesSIGKILL runs the real server binary, starts an erasure of a subject
// with thousands of rows, SIGKILLs the server in the middle of it (twice), restarts it, and
// checks that the erasure completes with exact counts (every row erased exactly once) and a
// clean verification, and that the other subject is untouched.
func TestGDPRErasureSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	ctx := context.Background()
	bin := buildServer(t)
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	admin := "sk_admin_" + testenv.RandomID(16)
	env := append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisServerURL(t), "STRATA_REDIS_PREFIX="+prefix,
		fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port), "STRATA_ADMIN_KEY="+admin, "STRATA_LOG_LEVEL=warn",
		"STRATA_SHUTDOWN_TIMEOUT=2s", "STRATA_SHUTDOWN_DELAY=0", "STRATA_ERASURE_BATCH=50", "STRATA_ERASURE_PAUSE=15ms", "STRATA_ERASURE_LEASE=2s")
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
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
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

	t.Logf("%v built", time.Now().Format("15:04:05.000"))
	start()
	st, k := do("POST", "/v1/admin/keys", admin, map[string]any{"org_id": "acme", "role": "compliance"})
	require.Equal(t, 201, st)
	comp := k["key"].(string)
	owner := testenv.OwnerConn(t, dsn)
	const events = 6000
	for _, u := range []string{"doomed", "keeper"} {
		for _, q := range []string{
			`INSERT INTO jobs (org_id, job_id, user_id, progress_at, created_at, updated_at) VALUES ('acme', 'job-'||$1, $1, now(), now(), now())`,
			`INSERT INTO episodic_jobs (org_id, job_id, last_seq) VALUES ('acme', 'job-'||$1, ` + fmt.Sprint(events) + `)`,
			`INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint, user_id)
				SELECT 'acme', 'job-'||$1, g, 'edit', jsonb_build_object('n', g, 'who', $1::text), sha256(g::text::bytea), $1
				FROM generate_series(1, ` + fmt.Sprint(events) + `) g`,
			`INSERT INTO kv_versions (org_id, namespace, key, level, scope_id, version, op, value, user_id, written_at)
				SELECT 'acme', 'ns', 'k' || g, 'user', $1, 1, 'put', to_jsonb($1::text), $1, now() FROM generate_series(1, 500) g`,
		} {
			_, err := owner.Exec(ctx, q, u)
			require.NoError(t, err, q)
		}
	}
	st, er := do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": "doomed"})
	require.Equal(t, 202, st, "%v", er)
	id := er["id"].(string)
	progress := func() (string, float64, map[string]any) {
		var status string
		var n float64
		var raw []byte
		require.NoError(t, owner.QueryRow(ctx, `SELECT status, coalesce((progress->>'episodic.events_deleted')::float8, 0), progress
			FROM gdpr_erasures WHERE id = $1`, id).Scan(&status, &n, &raw))
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return status, n, m
	}
	for kills, at := 0, float64(events)/4; kills < 2; kills, at = kills+1, at+float64(events)/4 {
		require.Eventually(t, func() bool { _, n, _ := progress(); return n >= at }, 60*time.Second, 5*time.Millisecond)
		kill()
		status, n, _ := progress()
		require.Equal(t, "running", status)
		require.Less(t, n, float64(events), "killed mid-erasure")
		t.Logf("%v SIGKILL %d with %v of %d events erased", time.Now().Format("15:04:05.000"), kills+1, n, events)
		start()
		t.Logf("%v restarted", time.Now().Format("15:04:05.000"))
	}
	require.Eventually(t, func() bool { s, _, _ := progress(); return s == "completed" }, 90*time.Second, 50*time.Millisecond)
	t.Logf("%v completed", time.Now().Format("15:04:05.000"))
	st, done := do("GET", "/v1/gdpr/erasures/"+id, comp, nil)
	require.Equal(t, 200, st)
	counts := done["counts"].(map[string]any)
	require.EqualValues(t, events, counts["episodic"].(map[string]any)["events_deleted"], "every event erased exactly once: %v", counts)
	require.EqualValues(t, 500, counts["keyvalue"].(map[string]any)["versions"])
	require.EqualValues(t, 1, counts["jobs"].(map[string]any)["jobs"])
	require.GreaterOrEqual(t, done["attempts"], float64(3), "taken on by a worker after each restart")
	require.Equal(t, true, done["verification"].(map[string]any)["clean"], "%v", done["verification"])
	var left, kept int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM episodic_events WHERE user_id = 'doomed')
		+ (SELECT count(*) FROM kv_versions WHERE user_id = 'doomed') + (SELECT count(*) FROM jobs WHERE user_id = 'doomed')`).Scan(&left))
	require.Zero(t, left)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM episodic_events WHERE user_id = 'keeper'`).Scan(&kept))
	require.EqualValues(t, events, kept)
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
