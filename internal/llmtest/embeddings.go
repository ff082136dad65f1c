package llmtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/strata-mem/strata/internal/embed"
)

// Embeddings is a fake OpenAI-compatible embeddings server (POST /v1/embeddings, the real
// wire format: "input" a string or an array of strings; "data" items with "index" and
// "embedding"; "usage"), answering Strata's lexical vectors of dims. Any client of the
// OpenAI API can use it (Strata's openai embedder, the openai npm package inside mem0ai),
// so benchmarks that compare memory services make every side pay the same embedding cost.
type Embeddings struct {
	*httptest.Server
	calls atomic.Int64
}

// NewEmbeddings starts one for the test (closed at its cleanup).
func NewEmbeddings(t testing.TB, dims int) *Embeddings {
	e := &Embeddings{}
	lex := embed.NewLexical(dims)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			http.Error(w, "no route "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var req struct {
			Input json.RawMessage `json:"input"`
			Model string          `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		var inputs []string
		if err := json.Unmarshal(req.Input, &inputs); err != nil {
			var one string
			if err := json.Unmarshal(req.Input, &one); err != nil {
				writeError(w, http.StatusBadRequest, "input must be a string or an array of strings")
				return
			}
			inputs = []string{one}
		}
		data := make([]map[string]any, len(inputs))
		for i, in := range inputs {
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": lex.One(in)}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model,
			"usage": map[string]int{"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})
	}))
	t.Cleanup(e.Server.Close)
	return e
}

// BaseURL is what OpenAI clients take as their base URL (…/v1).
func (e *Embeddings) BaseURL() string { return e.Server.URL + "/v1" }

// Calls is how many requests it has answered.
func (e *Embeddings) Calls() int64 { return e.calls.Load() }

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}
