package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// lines is an io.Writer tests read whole lines from while a command runs.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lines) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.Write(p) }

func (l *lines) wait(t *testing.T, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // kept: reads a running command's output
		l.mu.Lock()
		s := strings.TrimSpace(l.buf.String())
		l.mu.Unlock()
		var ls []string
		if s != "" {
			ls = strings.Split(s, "\n")
		}
		if len(ls) >= n {
			return ls
		}
		require.True(t, time.Now().Before(deadline), "got %d of %d lines: %q", len(ls), n, s)
	}
}

func failAStep(t *testing.T, s *apptest.Server, key, job string) {
	t.Helper()
	require.Less(t, s.Do("PUT", "/v1/jobs/"+job, key, map[string]any{"goal": "g"}).Status, 300)
	r := s.Do("POST", "/v1/jobs/"+job+"/steps/a/start", key, map[string]any{"owner": "w"})
	require.Equal(t, 200, r.Status, string(r.Body))
	r = s.Do("POST", "/v1/jobs/"+job+"/steps/a/fail", key, map[string]any{"fencing_token": r.Map(t)["fencing_token"],
		"error": "e", "disposition": "retryable"})
	require.Equal(t, 200, r.Status, string(r.Body))
}

// TestEventsTail prints one line per event, filtered, and resumes after the last one when
// the stream is cut (a proxy drops the first connection after its first event).
func TestEventsTail(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("tail", "agent")
	target, _ := url.Parse(s.URL)
	var conns atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conns.Add(1) == 1 { // the first stream: pass its first event through, then cut it
			resp, err := http.DefaultTransport.RoundTrip(cloneTo(r, target))
			if err != nil {
				w.WriteHeader(502)
				return
			}
			defer resp.Body.Close()
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			buf := make([]byte, 1)
			var seen strings.Builder
			for !strings.Contains(seen.String(), "\ndata: ") || !strings.HasSuffix(seen.String(), "\n\n") {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
				seen.Write(buf)
				_, _ = w.Write(buf)
			}
			w.(http.Flusher).Flush()
			return // the connection ends here
		}
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	failAStep(t, s, agent, "tail-1")
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/tail-1/complete", agent, map[string]any{"status": "completed"}).Status)
	failAStep(t, s, agent, "tail-2")

	ctx, cancel := context.WithCancel(context.Background())
	out, errs := &lines{}, &lines{}
	done := make(chan int)
	env := map[string]string{"STRATA_URL": proxy.URL, "STRATA_API_KEY": agent}
	go func() {
		done <- Main(ctx, []string{"events", "tail", "--type", "step.failed"}, func(k string) string { return env[k] }, out, errs)
	}()
	got := out.wait(t, 2)
	require.Contains(t, got[0], "step.failed")
	require.Contains(t, got[0], "job=tail-1")
	require.Contains(t, got[1], "job=tail-2")
	errs.mu.Lock()
	require.Contains(t, errs.buf.String(), "resuming after")
	errs.mu.Unlock()
	failAStep(t, s, agent, "tail-3") // live, after the reconnect
	got = out.wait(t, 3)
	require.Contains(t, got[2], "job=tail-3")
	require.Len(t, got, 3) // no duplicate, and job.completed filtered out
	cancel()
	require.Zero(t, <-done)
	require.GreaterOrEqual(t, conns.Load(), int32(2))
}

func cloneTo(r *http.Request, target *url.URL) *http.Request {
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host, r2.RequestURI = target.Scheme, target.Host, target.Host, ""
	r2.Body = io.NopCloser(strings.NewReader(""))
	return r2
}
