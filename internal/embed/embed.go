// Package embed turns text into vectors for semantic memory. One interface, three kinds:
//
//   - lexical (STRATA_EMBEDDER=hash or lexical, the default): hashed word and character
//     n-gram features, signed and L2-normalised. Offline, deterministic, fast. It measures
//     lexical overlap (shared words, shared word pieces), not meaning: "car" and "automobile"
//     are unrelated to it. Good enough for dedup, for recall of memories phrased like the
//     query, and for tests; use a real model for meaning.
//   - openai (STRATA_EMBEDDER=openai): any OpenAI-compatible /v1/embeddings endpoint
//     (OpenAI, Azure, Ollama, vLLM, TEI) through go-openai, with batching, a per-attempt
//     timeout, retries with backoff on 429/5xx, and a dimension check.
//   - onnx (STRATA_EMBEDDER=onnx): a local BERT-style sentence-embedding model
//     (all-MiniLM-L6-v2 and the like) from STRATA_ONNX_MODEL_DIR (model.onnx +
//     tokenizer.json), run in pure Go by hugot's Go backend: mean pooling, L2 normalisation,
//     batching, an output-size check at load.
//
// The service layer calls an Embedder; the semantic store never does.
package embed

import (
	"context"
	"math"
)

// Embedder turns texts into vectors of Dims() floats, one per text, in order.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Name is the embedder kind: "lexical", "onnx" or "openai".
	Name() string
	// Model names the model (or feature scheme) that produced the vectors.
	Model() string
	// Dims is the length of every vector.
	Dims() int
}

// Normalize scales v to unit length in place (a zero vector stays zero) and returns it.
func Normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// Cosine is the cosine similarity of a and b (0 when either is zero).
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
