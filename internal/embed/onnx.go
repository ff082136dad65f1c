package embed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	gomlxbackends "github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/knights-analytics/hugot"
	"github.com/knights-analytics/hugot/backends"
	"github.com/knights-analytics/hugot/options"
	"github.com/knights-analytics/hugot/pipelines"

	"github.com/strata-mem/strata/internal/strata"
)

// ONNXOptions configure the local ONNX embedder. Zero values take defaults.
type ONNXOptions struct {
	// Dir holds model.onnx and tokenizer.json (STRATA_ONNX_MODEL_DIR), e.g. a copy of
	// sentence-transformers/all-MiniLM-L6-v2's onnx/model.onnx and tokenizer.json.
	Dir string
	// Dims is what every vector must measure (STRATA_EMBEDDING_DIMS); checked at load.
	Dims int
	// Model overrides the model name recorded with each vector (STRATA_EMBEDDING_MODEL).
	// Default: the directory's base name and the first 12 hex digits of model.onnx's
	// SHA-256, e.g. "all-MiniLM-L6-v2@5f6a1c2d9e0b", so swapping the file for another model
	// of the same size is never mistaken for the same embedding space.
	Model string
	// Batch is the most texts run through the network at once (default 32).
	Batch int
	// MaxTokens caps a text's tokens, special tokens included (longer texts are truncated,
	// as sentence-transformers does). Default: tokenizer.json's truncation.max_length, else
	// config.json's max_position_embeddings, else 512.
	MaxTokens int
	// Parallel bounds the forward passes running at once (default GOMAXPROCS).
	Parallel int
}

// ONNX runs a BERT-style sentence-embedding model (all-MiniLM-L6-v2 and the like) in pure
// Go through hugot's Go backend (GoMLX simplego; no cgo, no onnxruntime): WordPiece
// tokenisation from tokenizer.json, the network from model.onnx, mean pooling over the
// attention mask, L2 normalisation. Safe for concurrent use.
type ONNX struct {
	session   *hugot.Session
	pipe      *pipelines.FeatureExtractionPipeline
	model     string
	dims      int
	batch     int
	maxTokens int
	sem       chan struct{}
}

// The Go backend (GoMLX simplego) runs the ops of a lone forward pass on parallel goroutines
// that read its use counters without a lock (a data race the race detector reports in
// gomlx v0.26.0); ops_sequential runs each pass's ops in order instead. Matrix products
// still use every core, and with two or more passes in flight simplego runs them
// sequentially anyway. hugot asks for the backend by the name "go"; this replaces that
// constructor with one adding the option (package init runs after simplego's).
func init() {
	gomlxbackends.Register(simplego.BackendName, func(config string) (gomlxbackends.Backend, error) {
		return simplego.New(config + ",ops_sequential")
	})
}

// tensorsMu serialises hugot's input-tensor construction, which writes a field of the
// shared model on every call (model.FixedCacheSize; hugot v0.6.1). It only copies ids.
var tensorsMu sync.Mutex

// onnxProbe is embedded at load to learn the model's output size.
const onnxProbe = "strata onnx embedder probe"

// NewONNX loads the model in o.Dir and checks that it produces o.Dims-long vectors. Every
// failure names the directory and what is wrong with it.
func NewONNX(o ONNXOptions) (e *ONNX, err error) {
	if o.Dir == "" {
		return nil, errors.New("STRATA_ONNX_MODEL_DIR is required when STRATA_EMBEDDER=onnx")
	}
	if o.Dims <= 0 {
		return nil, errors.New("STRATA_EMBEDDING_DIMS must be positive")
	}
	if st, err := os.Stat(o.Dir); err != nil {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: %w", o.Dir, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s is not a directory", o.Dir)
	}
	var missing []string
	for _, f := range []string{"model.onnx", "tokenizer.json"} {
		if st, err := os.Stat(filepath.Join(o.Dir, f)); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s lacks %v: it must hold the model's model.onnx and tokenizer.json (for all-MiniLM-L6-v2: onnx/model.onnx and tokenizer.json of sentence-transformers/all-MiniLM-L6-v2, copied into one directory)",
			o.Dir, missing)
	}
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.MaxTokens <= 0 {
		if o.MaxTokens, err = defaultMaxTokens(o.Dir); err != nil {
			return nil, err
		}
	}
	if o.Model == "" {
		sum, err := fileSHA256(filepath.Join(o.Dir, "model.onnx"))
		if err != nil {
			return nil, err
		}
		abs, _ := filepath.Abs(o.Dir)
		o.Model = filepath.Base(abs) + "@" + sum[:12]
	}

	// Pad batches and sequences to a few bucket sizes so the compiled graphs (one per input
	// shape) stay few: without buckets the Go backend caches one per distinct shape, forever.
	session, err := hugot.NewGoSession(
		options.WithGoMLXBatchBuckets(batchBuckets(o.Batch)),
		options.WithGoMLXSequenceBuckets(sequenceBuckets(o.MaxTokens)),
	)
	if err != nil {
		return nil, fmt.Errorf("onnx embedder: %w", err)
	}
	defer func() {
		// hugot and its tokenizer panic on some malformed files; report those as load errors.
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: loading the model failed: %v", o.Dir, r)
		}
		if err != nil {
			_ = session.Destroy()
		}
	}()
	e = &ONNX{session: session, model: o.Model, dims: o.Dims, batch: o.Batch, maxTokens: o.MaxTokens,
		sem: make(chan struct{}, o.Parallel)}
	cfg := hugot.FeatureExtractionConfig{ModelPath: o.Dir, OnnxFilename: "model.onnx", Name: "strata-embedder"}
	e.pipe, err = hugot.NewPipeline(session, cfg)
	if err != nil {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: loading the model failed: %w", o.Dir, err)
	}
	if e.pipe.Model.Tokenizer == nil || e.pipe.Model.Tokenizer.GoTokenizer == nil {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: tokenizer.json did not load", o.Dir)
	}
	// BERT exports may also output pooler_output (and not always last): the token states
	// are what gets mean-pooled. Without last_hidden_state, the first output is used (a
	// [batch, hidden] output is taken as already pooled).
	if i := slices.IndexFunc(e.pipe.Model.OutputsMeta, func(o backends.InputOutputInfo) bool { return o.Name == "last_hidden_state" }); i >= 0 {
		e.pipe.Output, e.pipe.OutputIndex = e.pipe.Model.OutputsMeta[i], i
	}
	for _, in := range e.pipe.Model.InputsMeta {
		switch in.Name {
		case "input_ids", "attention_mask", "token_type_ids":
		default:
			// Includes position_ids: hugot fills it 1-based (for decoders), BERT counts from 0.
			return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: model.onnx takes an input %q; supported are BERT-style text encoders taking input_ids, attention_mask and optionally token_type_ids", o.Dir, in.Name)
		}
	}
	vs, err := e.run([]string{onnxProbe})
	if err != nil {
		return nil, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: test embedding failed: %w", o.Dir, err)
	}
	if got := len(vs[0]); got != o.Dims {
		return nil, fmt.Errorf("model %s in %s produces %d dimensions but STRATA_EMBEDDING_DIMS is %d: set it to %d (a new dimension means re-embedding, see docs/semantic.md)",
			o.Model, o.Dir, got, o.Dims, got)
	}
	return e, nil
}

// Close releases the model. The embedder must not be used afterwards.
func (e *ONNX) Close() error { return e.session.Destroy() }

// Name implements Embedder.
func (e *ONNX) Name() string { return "onnx" }

// Model implements Embedder.
func (e *ONNX) Model() string { return e.model }

// Dims implements Embedder.
func (e *ONNX) Dims() int { return e.dims }

// MaxTokens is the token budget of one text; longer texts are truncated.
func (e *ONNX) MaxTokens() int { return e.maxTokens }

// Embed implements Embedder: batches of Batch texts, each one forward pass; at most
// Parallel passes run at once (callers beyond that wait, or give up with their context).
// A failure is an UnavailableError for store "embedder" (503 + Retry-After to the client).
func (e *ONNX) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.batch {
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		vs, err := e.run(texts[start:min(start+e.batch, len(texts))])
		<-e.sem
		if err != nil {
			return nil, &strata.UnavailableError{Store: "embedder", Err: fmt.Errorf("embedding with %s: %w", e.model, err)}
		}
		out = append(out, vs...)
	}
	return out, nil
}

// run tokenises texts and runs one forward pass: mean pooling over the attention mask
// (hugot's feature-extraction post-processing), then L2 normalisation.
func (e *ONNX) run(texts []string) (vs [][]float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("onnx runtime: %v", r)
		}
	}()
	batch := backends.NewBatch(len(texts))
	defer func() { err = errors.Join(err, batch.Destroy()) }()
	if err := e.tokenize(batch, texts); err != nil {
		return nil, err
	}
	tensorsMu.Lock()
	err = backends.CreateInputTensors(batch, e.pipe.Model, e.pipe.Runtime)
	tensorsMu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := e.pipe.Forward(batch); err != nil {
		return nil, err
	}
	res, err := e.pipe.Postprocess(batch)
	if err != nil {
		return nil, err
	}
	if len(res.Embeddings) != len(texts) {
		return nil, fmt.Errorf("model returned %d vectors for %d texts", len(res.Embeddings), len(texts))
	}
	for i, v := range res.Embeddings {
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("model returned a non-finite value for text %d", i)
			}
		}
		res.Embeddings[i] = Normalize(v)
	}
	return res.Embeddings, nil
}

// tokenize fills batch.Input as hugot's own tokenisation does, but returns errors instead
// of exiting the process, drops the tokenizer's fixed padding (the batch is padded to a
// bucket later, under the attention mask) and enforces MaxTokens, keeping the final
// special token ([SEP]) of a truncated text.
func (e *ONNX) tokenize(batch *backends.PipelineBatch, texts []string) error {
	tk := e.pipe.Model.Tokenizer.GoTokenizer.Tokenizer
	batch.Input = make([]backends.TokenizedInput, len(texts))
	batch.MaxSequenceLength = 1
	for i, text := range texts {
		enc, err := tk.EncodeSingle(text, true)
		if err != nil {
			return fmt.Errorf("tokenizing text %d: %w", i, err)
		}
		n := len(enc.Ids)
		for n > 0 && n <= len(enc.AttentionMask) && enc.AttentionMask[n-1] == 0 {
			n--
		}
		if n == 0 {
			return fmt.Errorf("tokenizing text %d: no tokens", i)
		}
		ids, types, mask := enc.Ids[:n:n], fit(enc.TypeIds, n, 0), fit(enc.AttentionMask, n, 1)
		if n > e.maxTokens {
			ids = append(ids[:e.maxTokens-1], ids[n-1])
			types = append(types[:e.maxTokens-1], types[n-1])
			mask = append(mask[:e.maxTokens-1], mask[n-1])
			n = e.maxTokens
		}
		in := backends.TokenizedInput{Raw: text, TokenIDs: make([]uint32, n), TypeIDs: make([]uint32, n),
			AttentionMask: make([]uint32, n)}
		for j := range n {
			in.TokenIDs[j], in.TypeIDs[j], in.AttentionMask[j] = uint32(ids[j]), uint32(types[j]), uint32(mask[j])
			if mask[j] != 0 {
				in.MaxAttentionIndex = j
			}
		}
		batch.Input[i] = in
		batch.MaxSequenceLength = max(batch.MaxSequenceLength, n)
	}
	return nil
}

// fit returns a copy of s cut to n, or extended with def.
func fit(s []int, n, def int) []int {
	out := make([]int, n)
	for i := copy(out, s); i < n; i++ {
		out[i] = def
	}
	return out
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// defaultMaxTokens: tokenizer.json's truncation.max_length, else config.json's
// max_position_embeddings, else BERT's 512.
func defaultMaxTokens(dir string) (int, error) {
	var tok struct {
		Truncation *struct {
			MaxLength int `json:"max_length"`
		} `json:"truncation"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, &tok); err != nil {
		return 0, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: tokenizer.json: %w", dir, err)
	}
	if tok.Truncation != nil && tok.Truncation.MaxLength > 0 {
		return tok.Truncation.MaxLength, nil
	}
	var cfg struct {
		MaxPositionEmbeddings int `json:"max_position_embeddings"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return 0, fmt.Errorf("STRATA_ONNX_MODEL_DIR %s: config.json: %w", dir, err)
		}
		if cfg.MaxPositionEmbeddings > 0 {
			return cfg.MaxPositionEmbeddings, nil
		}
	}
	return 512, nil
}

// batchBuckets: 1, 2, 4, ... up to and including batch.
func batchBuckets(batch int) []int {
	var b []int
	for n := 1; n < batch; n *= 2 {
		b = append(b, n)
	}
	return append(b, batch)
}

// sequenceBuckets: 16, 32, 64, ... up to and including maxTokens.
func sequenceBuckets(maxTokens int) []int {
	var b []int
	for n := 16; n < maxTokens; n *= 2 {
		b = append(b, n)
	}
	return append(b, maxTokens)
}
