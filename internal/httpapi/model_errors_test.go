package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// hostileModel answers every chat completion with status and an error body whose message
// quotes the prompt back, as real providers do ("Your messages: …").
const echoMark = "ECHOMARK patient Jane Roe has HIV"

func hostileModel(t *testing.T, status *atomic.Int32, html *atomic.Bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if html.Load() {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html><body>"+echoMark+"</body></html>")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		_, _ = fmt.Fprintf(w, `{"error":{"message":"This model's context was exceeded. Your messages: goal %s","type":"invalid_request_error","code":"context_length_exceeded"}}`, echoMark)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestModelErrorBodiesNotLoggedOrStored is issue 57 finding 4: a model that answers an
// error quoting the turns back. The job summary and the rolling summary fall back to the
// extractive text; their log lines and the stored fallback reason say the status and the
// provider's error type/code, never the message.
func TestModelErrorBodiesNotLoggedOrStored(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(400)
	var html atomic.Bool
	m := hostileModel(t, &status, &html)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"),
		apptest.Env("OPENAI_BASE_URL", m.URL+"/v1"), apptest.Env("STRATA_TURN_BUFFER", "5"),
		apptest.Env("STRATA_SUMMARY_EVERY", "3"), apptest.Env("STRATA_SUMMARY_POLL", "100ms"))
	key := s.NewKey("acme", "agent")

	need(t, s.Do("PUT", "/v1/jobs/j1", key, map[string]any{"goal": "Cut the film", "user_id": "sam"}), 200, 201)
	need(t, s.Do("POST", "/v1/jobs/j1/events", key, []map[string]any{{"op": "video.trim", "params": map[string]any{"in": 1}, "user_id": "sam"}}), 201, 200)
	need(t, s.Do("POST", "/v1/jobs/j1/complete", key, map[string]any{"status": "completed"}), 200)

	var msgs []map[string]any
	for i := 1; i <= 12; i++ {
		msgs = append(msgs, map[string]any{"role": []string{"user", "assistant"}[i%2], "content": fmt.Sprintf("Turn %d: export in 4K.", i)})
	}
	need(t, s.Do("POST", "/v1/sessions/s1/messages", key, map[string]any{"messages": msgs, "user_id": "sam", "agent_id": "ed"}), 201)
	sum := waitStatus(t, s, key, "/v1/sessions/s1/summary", func(m map[string]any) bool { return m["fallback"] != nil })
	require.NotContains(t, fmt.Sprint(sum["fallback"]), "ECHOMARK", "the stored reason quotes the model's message")
	require.Contains(t, fmt.Sprint(sum["fallback"]), "HTTP 400")
	require.Eventually(t, func() bool { return strings.Contains(s.Logs(), "LLM summary failed") }, 30*time.Second, 50*time.Millisecond)
	require.NotContains(t, s.Logs(), "ECHOMARK", "no model error message in the log")
	require.Contains(t, s.Logs(), "context_length_exceeded", "the provider's error code is kept")
}

// TestModelFailuresAre502 is issue 57 finding 5: a model that answers HTTP 500, 400 or HTML
// makes extraction (and /mem0 add with infer, and POST /v1/memories with graph: true)
// answer 502 naming what happened, not a generic 500; no text of the answer.
func TestModelFailuresAre502(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	var html atomic.Bool
	m := hostileModel(t, &status, &html)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", m.URL+"/v1"))
	key := s.NewKey("acme", "agent")
	msgs := []map[string]any{{"role": "user", "content": "I edit wedding films. Export in 4K please."}}
	for _, st := range []int{500, 400} {
		status.Store(int32(st))
		r := s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "kim"})
		requireProblem(t, r, 502, "")
		require.Contains(t, string(r.Body), fmt.Sprintf("the model answered HTTP %d", st))
		require.NotContains(t, string(r.Body), "ECHOMARK")
		r = s.Do("POST", "/mem0/v1/memories/", key, map[string]any{"messages": msgs, "user_id": "kim", "infer": true})
		require.Equal(t, 502, r.Status, "%s", r.Body)
		require.NotContains(t, string(r.Body), "ECHOMARK")
		r = s.Do("POST", "/v1/memories", key, map[string]any{"text": "Kim exports in 4K", "user_id": "kim", "graph": true})
		require.Equal(t, 502, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), fmt.Sprintf("the model answered HTTP %d", st))
	}
	html.Store(true)
	r := s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "kim"})
	requireProblem(t, r, 502, "")
	require.Contains(t, string(r.Body), "not valid JSON")
	require.NotContains(t, string(r.Body), "ECHOMARK")
	require.NotContains(t, s.Logs(), "ECHOMARK")
}

// TestEmbedderErrorBodiesNotLogged is issue 57 finding 4 for the embedder: a 4xx/5xx answer
// whose body quotes the texts back. A refused request is a 502 saying the status, a
// server that stays down a 503 + Retry-After; neither the answer nor the log holds the body.
func TestEmbedderErrorBodiesNotLogged(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(400)
	var html atomic.Bool
	m := hostileModel(t, &status, &html)
	s := apptest.Start(t, apptest.Env("STRATA_EMBEDDER", "openai"), apptest.Env("OPENAI_BASE_URL", m.URL+"/v1"),
		apptest.Env("STRATA_EMBEDDING_MODEL", "m"))
	key := s.NewKey("acme", "agent")
	r := s.Do("POST", "/v1/memories", key, map[string]any{"text": "Jane's diagnosis", "user_id": "jane"})
	require.Equal(t, 502, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "the embedder answered HTTP 400 (invalid_request_error, context_length_exceeded)")
	status.Store(500)
	r = s.Do("POST", "/v1/memories", key, map[string]any{"text": "Jane's diagnosis", "user_id": "jane"})
	require.Equal(t, 503, r.Status, "%s", r.Body)
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Eventually(t, func() bool { return strings.Contains(s.Logs(), "HTTP 500") }, 10*time.Second, 50*time.Millisecond)
	require.NotContains(t, s.Logs(), "ECHOMARK", "no embedder answer body in the log")
	require.NotContains(t, string(r.Body), "ECHOMARK")
}
