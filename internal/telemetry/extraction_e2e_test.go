package telemetry_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
)

// TestExtractionJobTraced: a conversation turn is extracted in the background by River jobs
// with the model and the embedder over HTTP (fakes of the OpenAI API). Over OTLP arrive: the
// per-session extraction job as a consumer span linked to the request that appended the turn
// (the caller's trace) and to the dispatch run that queued the job,
// the model call as a client span under the job, and every model and embedding request
// carrying the traceparent of an exported client span — and no span holds the user id or
// the turn's words.
func TestExtractionJobTraced(t *testing.T) {
	rc, otlp := startReceiver(t)

	const user = "user-9d2f61c0"
	const turn = "I restore vintage gramophones in Ljubljana"
	llm := llmtest.New(t, func(p llmtest.Prompt) string {
		var ds []llmtest.D
		for _, tn := range p.Doc.Turns {
			if strings.Contains(tn.Content, "gramophones") {
				ds = append(ds, llmtest.D{Op: "ADD", Kind: "fact", Text: "User restores vintage gramophones", Turns: []int64{tn.Seq}})
			}
		}
		return llmtest.Answer(ds...)
	})
	emb := llmtest.NewEmbeddings(t, 384)
	var mu sync.Mutex
	type call struct{ path, traceparent string }
	var calls []call
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, call{r.URL.Path, r.Header.Get("traceparent")})
		mu.Unlock()
		if r.URL.Path == "/v1/embeddings" {
			emb.Config.Handler.ServeHTTP(w, r)
			return
		}
		llm.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	s := apptest.Start(t, apptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL),
		apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", front.URL+"/v1"),
		apptest.Env("STRATA_EMBEDDER", "openai"), apptest.Env("STRATA_EMBEDDING_MODEL", "fake-embedding"),
		apptest.Env("STRATA_EXTRACTION_POLL", "100ms"))
	key, admin := s.NewKey("otel-x", "agent"), s.NewKey("otel-x", "admin")
	r := s.Do("PUT", "/v1/admin/policies", admin, map[string]any{"extraction": map[string]any{"enabled": true, "debounce": "0s"}})
	require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
	const turnTrace, callerSpan = "5cf92f3577b34da6a3ce929d0e0e4799", "00f067aa0ba902b8"
	r = s.Do("POST", "/v1/sessions/sess-x/messages", key, map[string]any{"role": "user", "content": turn,
		"user_id": user, "agent_id": "a1"}, "traceparent", "00-"+turnTrace+"-"+callerSpan+"-01")
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Eventually(t, func() bool {
		r := s.Do("GET", "/v1/sessions/sess-x/extraction", key, nil)
		return r.Status == 200 && r.Map(t)["extracted_seq"] == float64(1)
	}, 60*time.Second, 50*time.Millisecond, "extraction did not run")
	s.Stop()

	spans := rc.all()
	byID := index(spans)
	var appendSpan *tracepb.Span // the request that appended the turn
	for _, sp := range spans {
		if hexID(sp.GetTraceId()) == turnTrace && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			appendSpan = sp
		}
	}
	require.NotNil(t, appendSpan, "no server span for the append")
	require.Equal(t, "POST /v1/sessions/{session}/messages", appendSpan.GetName())
	var job *tracepb.Span
	for _, sp := range spans {
		if sp.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || sp.GetName() != "river.work extract_session" {
			continue
		}
		var toRequest, toDispatch bool
		for _, l := range sp.GetLinks() {
			d, ok := byID[hexID(l.GetSpanId())]
			if !ok {
				continue
			}
			toRequest = toRequest || d == appendSpan
			for root := d; root != nil; root = byID[hexID(root.GetParentSpanId())] {
				toDispatch = toDispatch || root.GetName() == "river.work extraction_dispatch"
			}
		}
		if toRequest {
			require.True(t, toDispatch, "the extraction job is not linked to the dispatch run that inserted it")
			require.Nil(t, job, "two extraction jobs linked to the append")
			job = sp
		}
	}
	require.NotNil(t, job, "no extraction job span linked to the request that appended the turn")
	require.NotEqual(t, turnTrace, hexID(job.GetTraceId()), "a job is a trace of its own, linked")
	var model *tracepb.Span
	for _, sp := range spans {
		if sp.GetKind() == tracepb.Span_SPAN_KIND_CLIENT && strings.HasPrefix(sp.GetName(), "HTTP POST") && descends(byID, sp, job) {
			model = sp
		}
	}
	require.NotNil(t, model, "no model call under the extraction job")

	mu.Lock()
	defer mu.Unlock()
	var chat, embeddings int
	for _, c := range calls {
		parts := strings.Split(c.traceparent, "-")
		require.Len(t, parts, 4, "%s went out without a traceparent", c.path)
		out, ok := byID[parts[2]]
		require.True(t, ok, "%s: its traceparent names no exported span", c.path)
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, out.GetKind())
		if strings.HasSuffix(c.path, "/chat/completions") {
			chat++
			require.True(t, descends(byID, out, job), "the model call is not under the job")
		} else {
			embeddings++
		}
	}
	require.Positive(t, chat)
	require.Positive(t, embeddings)

	rc.mu.Lock()
	texts := everything(spans, rc.resources)
	rc.mu.Unlock()
	for _, s := range texts {
		require.NotContains(t, s, user)
		for _, word := range []string{"gramophone", "Ljubljana", "vintage"} {
			require.NotContains(t, s, word)
		}
	}
}
