package main

import (
	"bufio"
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

// TestSIGTERMDrains runs the real binary and sends it SIGTERM while a slow request and an
// event stream are open. Before, the listener closed at once (a load balancer saw refused
// connections, never a failing /readyz), the stream was cut by the request timeout and, at
// shutdown, held the drain for the whole STRATA_SHUTDOWN_TIMEOUT. Now: /readyz answers 503
// at once and through STRATA_SHUTDOWN_DELAY while /healthz, requests and the stream are
// served; then the stream gets a retry hint and ends, the listener closes, the slow request
// completes with its normal answer and the process exits 0 long before the timeout.
func TestSIGTERMDrains(t *testing.T) {
	const (
		delay           = 2 * time.Second
		requestTimeout  = 5 * time.Second
		shutdownTimeout = 20 * time.Second
	)
	bin := buildServer(t)
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	port := testenv.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	admin := "sk_admin_" + testenv.RandomID(16)
	logPath := filepath.Join(t.TempDir(), "server.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisServerURL(t),
		"STRATA_REDIS_PREFIX="+prefix, fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port),
		"STRATA_ADMIN_KEY="+admin, "STRATA_LOG_LEVEL=info", "STRATA_DB_MAX_CONNS=8",
		"STRATA_SHUTDOWN_DELAY="+delay.String(), "STRATA_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(),
		"STRATA_REQUEST_TIMEOUT="+requestTimeout.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan struct{}) // closed once the process has exited, with its error in exitErr
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("server log:\n%s", b)
		}
	})

	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, key string, body any) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	must := func(want int, method, path, key string, body any) []byte {
		t.Helper()
		status, b, err := do(method, path, key, body)
		require.NoError(t, err, "%s %s", method, path)
		require.Equal(t, want, status, "%s %s: %s", method, path, b)
		return b
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) { // kept: polls a child process's start
		if status, _, err := do("GET", "/readyz", "", nil); err == nil && status == 200 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the server never became ready")
	}
	var created struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(must(201, "POST", "/v1/admin/keys", admin, map[string]any{"org_id": "drain", "role": "admin"}), &created))
	key := created.Key
	must(201, "PUT", "/v1/jobs/slow", key, map[string]any{"goal": "held by a row lock"})

	// The event stream: every line with the time it arrived.
	type line struct {
		at   time.Time
		text string
	}
	var mu sync.Mutex
	var lines []line
	ended := make(chan time.Time, 1)
	sreq, _ := http.NewRequest("GET", base+"/v1/events/stream", nil)
	sreq.Header.Set("Authorization", "Bearer "+key)
	sresp, err := (&http.Client{}).Do(sreq)
	require.NoError(t, err)
	require.Equal(t, 200, sresp.StatusCode)
	opened := time.Now()
	go func() {
		defer sresp.Body.Close()
		sc := bufio.NewScanner(sresp.Body)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, line{time.Now(), sc.Text()})
			mu.Unlock()
		}
		ended <- time.Now()
	}()
	got := func(text string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l.text, text) {
				return true
			}
		}
		return false
	}
	waitEvent := func(text string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !got(text); time.Sleep(10 * time.Millisecond) { // kept: polls what the stream reader collected
			select {
			case <-ended:
				t.Fatalf("the stream ended before it delivered %q", text)
			default:
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the stream did not deliver %q; it sent %v", text, lines)
			}
		}
	}

	// The stream outlives the request timeout: an event written after it is delivered.
	time.Sleep(time.Until(opened.Add(requestTimeout + 500*time.Millisecond))) // kept: the stream must be older than the request timeout
	must(201, "PUT", "/v1/jobs/after-timeout", key, map[string]any{"goal": "written when the stream is older than the request timeout"})
	must(200, "POST", "/v1/jobs/after-timeout/complete", key, map[string]any{}) // emits job.completed
	waitEvent(`"job_id":"after-timeout"`)

	// A slow request: its update of the job waits for the test's row lock.
	owner := testenv.OwnerConn(t, dsn)
	ctx := context.Background()
	tx, err := owner.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var locked string
	require.NoError(t, tx.QueryRow(ctx, `SELECT set_config('app.org_id', 'drain', true)`).Scan(&locked))
	require.NoError(t, tx.QueryRow(ctx, `SELECT job_id FROM jobs WHERE org_id = 'drain' AND job_id = 'slow' FOR UPDATE`).Scan(&locked))
	type answer struct {
		status int
		body   []byte
		err    error
	}
	slow := make(chan answer, 1)
	go func() {
		status, b, err := do("PUT", "/v1/jobs/slow", key, map[string]any{"goal": "the slow request's answer"})
		slow <- answer{status, b, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // kept: waits for the request to reach the lock
		var waiting int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the slow request never waited for the lock")
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	term := time.Now()

	// /readyz answers 503 at once, while the rest is served.
	var ready int
	var readyBody []byte
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) { // kept: the signal reaches the process asynchronously
		ready, readyBody, err = do("GET", "/readyz", "", nil)
		require.NoError(t, err, "/readyz must answer during the delay, not refuse the connection")
		if ready == 503 {
			break
		}
		require.True(t, time.Now().Before(deadline), "/readyz still answered %d a second after SIGTERM", ready)
	}
	t.Logf("/readyz answered 503 %v after SIGTERM: %s", time.Since(term).Round(time.Millisecond), bytes.TrimSpace(readyBody))
	require.Contains(t, string(readyBody), `"status":"draining"`)
	must(200, "GET", "/healthz", "", nil)
	must(200, "GET", "/v1/jobs/after-timeout", key, nil)
	must(201, "PUT", "/v1/jobs/during-delay", key, map[string]any{"goal": "written while draining"})
	must(200, "POST", "/v1/jobs/during-delay/complete", key, map[string]any{})
	waitEvent(`"job_id":"during-delay"`)
	require.Contains(t, string(must(200, "GET", "/metrics", "", nil)), "strata_draining 1")
	inDelay := time.Since(term)
	require.Less(t, inDelay, delay, "the checks of the delay took longer than the delay; the test cannot tell")

	// The drain: the stream gets a retry hint and ends, promptly.
	var endedAt time.Time
	select {
	case endedAt = <-ended:
	case <-time.After(delay + 10*time.Second):
		t.Fatalf("the event stream was still open %v after SIGTERM", delay+10*time.Second)
	}
	sinceTerm := endedAt.Sub(term)
	t.Logf("the event stream ended %v after SIGTERM (%v after the delay)", sinceTerm.Round(time.Millisecond),
		(sinceTerm - delay).Round(time.Millisecond))
	require.GreaterOrEqual(t, sinceTerm, delay, "the stream ended during the delay, while the replica still serves")
	require.Less(t, sinceTerm, delay+1500*time.Millisecond, "the stream did not end promptly when the drain began")
	mu.Lock()
	var tailLines []string
	for _, l := range lines {
		if l.text != "" {
			tailLines = append(tailLines, l.text)
		}
	}
	mu.Unlock()
	require.GreaterOrEqual(t, len(tailLines), 2)
	require.Equal(t, "retry: 1000", tailLines[len(tailLines)-1], "the stream's last word is a retry hint")
	require.Contains(t, tailLines[len(tailLines)-2], "shutting down")

	// The listener is closed while the slow request still runs.
	_, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	require.Error(t, err, "the listener still accepts connections after the delay")
	select {
	case <-exited:
		t.Fatal("the process exited before its in-flight request completed")
	default:
	}

	// The slow request completes with its normal answer; then the process exits 0.
	require.NoError(t, tx.Commit(ctx))
	a := <-slow
	require.NoError(t, a.err)
	require.Equal(t, 200, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "the slow request's answer")
	select {
	case <-exited:
		require.NoError(t, exitErr, "the process must exit 0")
	case <-time.After(shutdownTimeout):
		t.Fatalf("the process had not exited %v after SIGTERM", time.Since(term))
	}
	took := time.Since(term)
	t.Logf("the process exited 0 %v after SIGTERM (delay %v, timeout %v)", took.Round(time.Millisecond), delay, shutdownTimeout)
	require.Less(t, took, delay+5*time.Second, "the shutdown took nearly its timeout")

	logs, err := os.ReadFile(logPath)
	require.NoError(t, err)
	for _, phase := range []string{"draining started", "listener closed", "shutdown: drained", "background workers stopped", "stopped; exiting"} {
		require.Contains(t, string(logs), phase)
	}
}

// buildServer builds this command into the test's temporary directory.
func buildServer(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "strata-server")
	out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}
