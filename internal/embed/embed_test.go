package embed

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
)

func TestEmbedLexicalDeterministicAndNormalised(t *testing.T) {
	t.Parallel()
	l := NewLexical(384)
	a := l.One("The user prefers dark mode in the editor")
	b := l.One("The user prefers dark mode in the editor")
	require.Equal(t, a, b)
	require.Len(t, a, 384)
	require.InDelta(t, 1.0, Cosine(a, a), 1e-6)
	var norm float64
	for _, x := range a {
		norm += float64(x) * float64(x)
	}
	require.InDelta(t, 1.0, norm, 1e-5)
	// Pinned values: the scheme must not drift silently (bump LexicalModel if it must).
	require.Equal(t, "strata-lexical-v1", l.Model())
	require.Equal(t, a, NewLexical(384).One("the USER prefers dark-mode, in the editor!"))

	zero := l.One("   ...  ")
	require.Len(t, zero, 384)
	require.Zero(t, Cosine(zero, a))
}

func TestEmbedLexicalSimilarityOrdersByOverlap(t *testing.T) {
	t.Parallel()
	l := NewLexical(384)
	q := l.One("which colour theme does the user prefer")
	near := l.One("the user prefers a dark colour theme")
	far := l.One("invoice 4471 was paid by bank transfer on friday")
	require.Greater(t, Cosine(q, near), Cosine(q, far)+0.2)
	// Word pieces carry morphology: prefer ~ prefers ~ preferred.
	require.Greater(t, Cosine(l.One("preferred"), l.One("prefers")), 0.3)
	// Near-duplicates are very close, so dedup can use a cosine threshold.
	require.Greater(t, Cosine(l.One("User prefers dark mode."), l.One("The user prefers dark mode")), 0.85)
}

// fakeEmbeddings speaks OpenAI's POST /v1/embeddings wire format: {"input": [...],
// "model": ...} → {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],
// "model":...,"usage":{...}}. It answers the data in reverse order, as servers may.
type fakeEmbeddings struct {
	dims     int
	failures atomic.Int32 // the next n requests answer 429 then 503 alternately
	calls    atomic.Int32
	batches  chan int
	lastReq  atomic.Value
}

func (f *fakeEmbeddings) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		http.Error(w, "bad route "+r.Method+" "+r.URL.Path, 404)
		return
	}
	if r.Header.Get("Authorization") != "Bearer test-key" {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error":{"message":"bad key","type":"invalid_request_error"}}`))
		return
	}
	if n := f.failures.Add(-1); n >= 0 {
		w.Header().Set("Content-Type", "application/json")
		if n%2 == 0 {
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"rate limited","type":"rate_limit_error"}}`))
		} else {
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
		}
		return
	}
	var req struct {
		Input      []string `json:"input"`
		Model      string   `json:"model"`
		Dimensions int      `json:"dimensions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.lastReq.Store(req.Model)
	if f.batches != nil {
		f.batches <- len(req.Input)
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	var data []item
	lex := NewLexical(f.dims)
	for i := len(req.Input) - 1; i >= 0; i-- {
		data = append(data, item{"embedding", i, lex.One(req.Input[i])})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list", "data": data, "model": req.Model,
		"usage": map[string]int{"prompt_tokens": 3, "total_tokens": 3},
	})
}

func TestEmbedOpenAIWireFormatBatchingAndOrder(t *testing.T) {
	t.Parallel()
	f := &fakeEmbeddings{dims: 16, batches: make(chan int, 10)}
	srv := httptest.NewServer(f)
	defer srv.Close()
	e, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "nomic-embed-text", Dims: 16, Batch: 2})
	require.NoError(t, err)
	texts := []string{"alpha", "beta", "gamma", "delta", "epsilon"}
	vs, err := e.Embed(context.Background(), texts)
	require.NoError(t, err)
	require.Len(t, vs, 5)
	for i, v := range vs {
		require.Equal(t, NewLexical(16).One(texts[i]), v, "vector %d out of order", i)
	}
	close(f.batches)
	var sizes []int
	for n := range f.batches {
		sizes = append(sizes, n)
	}
	require.Equal(t, []int{2, 2, 1}, sizes)
	require.Equal(t, "nomic-embed-text", f.lastReq.Load())
	require.Equal(t, "openai", e.Name())
	require.Equal(t, "nomic-embed-text", e.Model())
}

func TestEmbedOpenAIRetriesOn429And5xx(t *testing.T) {
	t.Parallel()
	f := &fakeEmbeddings{dims: 8}
	f.failures.Store(3)
	srv := httptest.NewServer(f)
	defer srv.Close()
	e, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "m", Dims: 8, Backoff: time.Millisecond})
	require.NoError(t, err)
	vs, err := e.Embed(context.Background(), []string{"x"})
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.EqualValues(t, 4, f.calls.Load())

	// Past the retry budget: an UnavailableError (503 to the client).
	f.failures.Store(100)
	e2, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "m", Dims: 8, Backoff: time.Millisecond, Retries: 2})
	require.NoError(t, err)
	_, err = e2.Embed(context.Background(), []string{"x"})
	var ue *strata.UnavailableError
	require.True(t, errors.As(err, &ue), "%v", err)
	require.Equal(t, "embedder", ue.Store)
}

func TestEmbedOpenAIDimensionCheckAndAuthError(t *testing.T) {
	t.Parallel()
	f := &fakeEmbeddings{dims: 12}
	srv := httptest.NewServer(f)
	defer srv.Close()
	e, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "m", Dims: 384})
	require.NoError(t, err)
	_, err = e.Embed(context.Background(), []string{"x"})
	require.ErrorContains(t, err, "returned 12 dimensions (model m) but STRATA_EMBEDDING_DIMS is 384")

	before := f.calls.Load()
	bad, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "wrong", Model: "m", Dims: 12})
	require.NoError(t, err)
	_, err = bad.Embed(context.Background(), []string{"x"})
	require.ErrorContains(t, err, "the embedder answered HTTP 401")
	require.NotContains(t, err.Error(), "bad key", "the provider's message is not repeated (issue 57)")
	require.Equal(t, before+1, f.calls.Load(), "a 401 is not retried")

	_, err = NewOpenAI(OpenAIOptions{Dims: 3})
	require.ErrorContains(t, err, "STRATA_EMBEDDING_MODEL")
}
