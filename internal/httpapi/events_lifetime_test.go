package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestEventStreamOutlivesRequestAndReadTimeouts: the stream was cut by the request timeout
// (Observe's deadline on its context). With it and the server's ReadTimeout at 1 s (net/http
// clears the read deadline once the handler runs; kept here as a guard), a stream 2.5 s old
// still delivers an event written then; EndStreams ends it with a retry hint.
func TestEventStreamOutlivesRequestAndReadTimeouts(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	pool, _ := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	cfg.RedisPrefix = prefix
	cfg.AdminKey = "sk_admin_" + testenv.RandomID(16)
	cfg.RequestTimeout = time.Second
	s := newServer(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), pool, rdb)
	hs := httptest.NewUnstartedServer(s)
	hs.Config.ReadTimeout = time.Second
	hs.Start()
	t.Cleanup(hs.Close)

	do := func(method, path, key string, body any) (int, []byte) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, hs.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	status, b := do("POST", "/v1/admin/keys", cfg.AdminKey, map[string]any{"org_id": "long", "role": "agent"})
	require.Equal(t, 201, status, "%s", b)
	var k struct{ Key string }
	require.NoError(t, json.Unmarshal(b, &k))

	req, _ := http.NewRequest("GET", hs.URL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+k.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	opened := time.Now()
	var mu sync.Mutex
	var lines []string
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	time.Sleep(time.Until(opened.Add(2500 * time.Millisecond))) // kept: the stream must be older than both timeouts
	select {
	case <-ended:
		t.Fatalf("the stream ended after %v, before the client left", time.Since(opened))
	default:
	}
	status, b = do("PUT", "/v1/jobs/late", k.Key, map[string]any{"goal": "late"})
	require.Equal(t, 201, status, "%s", b)
	status, b = do("POST", "/v1/jobs/late/complete", k.Key, map[string]any{})
	require.Equal(t, 200, status, "%s", b)
	delivered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(lines, "\n"), `"job_id":"late"`)
	}
	require.Eventually(t, delivered, 5*time.Second, 10*time.Millisecond, "the stream did not deliver the late event")

	s.EventBroker.EndStreams()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("EndStreams did not end the stream")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "retry: 1000", lines[len(lines)-2], "%q", lines) // then the blank line ending the block
}
