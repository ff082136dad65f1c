package embed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/strata-mem/strata/internal/answercap"
	"github.com/strata-mem/strata/internal/strata"
)

// OpenAIOptions configure the OpenAI-compatible embedder. Zero values take defaults.
type OpenAIOptions struct {
	BaseURL string // e.g. https://api.openai.com/v1, http://localhost:11434/v1 (default OpenAI's)
	APIKey  string // may be empty for local servers
	Model   string // required
	Dims    int    // required: every returned vector must have this length
	// Batch is the most texts sent in one request (default 96).
	Batch int
	// Timeout bounds one HTTP attempt (default 30s).
	Timeout time.Duration
	// Retries is how many times a 429, 5xx or transport failure is retried (default 4).
	Retries int
	// Backoff is the first retry's delay, doubled each time with jitter (default 250ms,
	// at most 8s).
	Backoff time.Duration
	// HTTPClient overrides the transport (tests).
	HTTPClient *http.Client
}

// OpenAI embeds through any server speaking OpenAI's POST /v1/embeddings.
type OpenAI struct {
	c *openai.Client
	o OpenAIOptions
}

// NewOpenAI checks the options and returns the embedder. It does not call the server.
func NewOpenAI(o OpenAIOptions) (*OpenAI, error) {
	if o.Model == "" {
		return nil, errors.New("STRATA_EMBEDDING_MODEL is required when STRATA_EMBEDDER=openai")
	}
	if o.Dims <= 0 {
		return nil, errors.New("STRATA_EMBEDDING_DIMS must be positive")
	}
	if o.Batch <= 0 {
		o.Batch = 96
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 250 * time.Millisecond
	}
	cfg := openai.DefaultConfig(o.APIKey)
	if o.BaseURL != "" {
		cfg.BaseURL = strings.TrimRight(o.BaseURL, "/")
	}
	cfg.HTTPClient = answercap.Client(o.HTTPClient) // answers read up to a limit each batch sets
	return &OpenAI{c: openai.NewClientWithConfig(cfg), o: o}, nil
}

// Name implements Embedder.
func (e *OpenAI) Name() string { return "openai" }

// Model implements Embedder.
func (e *OpenAI) Model() string { return e.o.Model }

// Dims implements Embedder.
func (e *OpenAI) Dims() int { return e.o.Dims }

// Embed implements Embedder: batches of o.Batch texts, each retried on 429/5xx/transport
// errors with exponential backoff and jitter. Every failure (a server that stays down, a
// refused request, a vector of the wrong length — its message names both lengths) says
// what happened, never the answer's body: a server that stays down, rate limits, timeouts
// and transport failures are an UnavailableError for store "embedder" (503 + Retry-After);
// a refused request (4xx) or a malformed answer is an *answercap.ProviderError (502).
func (e *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.o.Batch {
		end := min(start+e.o.Batch, len(texts))
		vs, err := e.batch(ctx, texts[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (e *OpenAI) batch(ctx context.Context, texts []string) ([][]float32, error) {
	req := openai.EmbeddingRequest{Input: texts, Model: openai.EmbeddingModel(e.o.Model)}
	if strings.HasPrefix(e.o.Model, "text-embedding-3") {
		req.Dimensions = e.o.Dims // only these models accept it; others answer their native size
	}
	var lastErr error
	delay := e.o.Backoff
	for attempt := 0; attempt <= e.o.Retries; attempt++ {
		if attempt > 0 {
			d := delay/2 + rand.N(delay/2+1)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d):
			}
			delay = min(delay*2, 8*time.Second)
		}
		actx, cancel := context.WithTimeout(answercap.WithLimit(ctx, answercap.ForEmbeddings(len(texts), e.o.Dims), "embeddings answer"), e.o.Timeout)
		resp, err := e.c.CreateEmbeddings(actx, req)
		cancel()
		if err == nil {
			vs, err := e.check(resp, len(texts))
			if err != nil { // a malformed answer: a 502 naming the rule, not a retry
				return nil, err
			}
			return vs, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryable(err) {
			break
		}
	}
	// What happened (status, provider error type/code), never the answer's body or message:
	// it may quote the texts (issue 57).
	described := answercap.Describe("embedder", lastErr)
	var pe *answercap.ProviderError
	if errors.As(described, &pe) && !pe.Transient() {
		return nil, fmt.Errorf("embedding with %s: %w", e.o.Model, pe) // refused or malformed: 502
	}
	return nil, &strata.UnavailableError{Store: "embedder", Err: fmt.Errorf("embedding with %s: %w", e.o.Model, described)}
}

func (e *OpenAI) check(resp openai.EmbeddingResponse, n int) ([][]float32, error) {
	if len(resp.Data) != n {
		return nil, answercap.Malformed("embedder", "has %d vectors for %d inputs", len(resp.Data), n)
	}
	sort.SliceStable(resp.Data, func(i, j int) bool { return resp.Data[i].Index < resp.Data[j].Index })
	out := make([][]float32, n)
	for i, d := range resp.Data {
		if d.Index != i {
			return nil, answercap.Malformed("embedder", "has index %d at position %d", d.Index, i)
		}
		if len(d.Embedding) != e.o.Dims {
			return nil, answercap.Malformed("embedder", "returned %d dimensions (model %s) but STRATA_EMBEDDING_DIMS is %d: set it to %d (a new dimension means re-embedding, see docs/semantic.md)",
				len(d.Embedding), e.o.Model, e.o.Dims, len(d.Embedding))
		}
		out[i] = d.Embedding
	}
	return out, nil
}

// retryable: rate limits, server errors, timeouts and transport failures; not an answer
// refused for its size (it would be as large again).
func retryable(err error) bool {
	var tl *answercap.TooLargeError
	if errors.As(err, &tl) {
		return false
	}
	var ae *openai.APIError
	if errors.As(err, &ae) {
		return ae.HTTPStatusCode == http.StatusTooManyRequests || ae.HTTPStatusCode >= 500 || ae.HTTPStatusCode == http.StatusRequestTimeout
	}
	var re *openai.RequestError
	if errors.As(err, &re) {
		return re.HTTPStatusCode == http.StatusTooManyRequests || re.HTTPStatusCode >= 500 || re.HTTPStatusCode == http.StatusRequestTimeout || re.HTTPStatusCode == 0
	}
	return true // transport errors, per-attempt deadline
}
