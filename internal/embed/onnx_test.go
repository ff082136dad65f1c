package embed

//go:generate go run ./internal/genmodel/gen testdata/tiny-bert

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed/internal/genmodel"
	"github.com/strata-mem/strata/internal/strata"
)

// tinyBERT is the generated fixture: a one-layer BERT-shaped encoder with random weights
// (hidden size genmodel.Tiny.Hidden), model.onnx + tokenizer.json.
const tinyBERT = "testdata/tiny-bert"

func loadTiny(t *testing.T, o ONNXOptions) *ONNX {
	t.Helper()
	if o.Dir == "" {
		o.Dir = tinyBERT
	}
	if o.Dims == 0 {
		o.Dims = genmodel.Tiny.Hidden
	}
	e, err := NewONNX(o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

func embedAll(t *testing.T, e Embedder, texts ...string) [][]float32 {
	t.Helper()
	vs, err := e.Embed(context.Background(), texts)
	require.NoError(t, err)
	require.Len(t, vs, len(texts))
	return vs
}

func requireClose(t *testing.T, want, got []float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		require.InDelta(t, want[i], got[i], 2e-5, "%s: component %d", msg, i)
	}
}

var onnxTexts = []string{
	"User prefers dark mode in the editor.",
	"The invoice was paid by bank transfer on friday",
	"deploy the server after the tests run",
	"hello",
	"", // empty: [CLS] [SEP] still embeds
	"Überraschung! naïve café, 東京 and emoji 🚀 — unknown words become word pieces or [UNK]",
	strings.Repeat("remember the meeting notes ", 8), // > 32 tokens: pads batch companions to a bigger bucket
}

// The committed fixture is exactly what the generator writes, and small.
func TestEmbedONNXFixtureIsGenerated(t *testing.T) {
	t.Parallel()
	files, err := genmodel.Tiny.Files()
	require.NoError(t, err)
	require.Len(t, files, 2)
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(tinyBERT, name))
		require.NoError(t, err)
		require.True(t, string(want) == string(got), "%s differs from the generator's output: run go generate ./internal/embed/", name)
		require.Less(t, len(got), 1<<20, name)
	}
}

func TestEmbedONNXLoadsAndEmbedsDeterministically(t *testing.T) {
	t.Parallel()
	e := loadTiny(t, ONNXOptions{})
	require.Equal(t, "onnx", e.Name())
	require.Equal(t, genmodel.Tiny.Hidden, e.Dims())
	require.Regexp(t, regexp.MustCompile(`^tiny-bert@[0-9a-f]{12}$`), e.Model())
	require.Equal(t, genmodel.Tiny.Truncate, e.MaxTokens(), "from tokenizer.json's truncation")

	vs := embedAll(t, e, onnxTexts...)
	for i, v := range vs {
		require.Len(t, v, genmodel.Tiny.Hidden)
		var norm float64
		for _, x := range v {
			require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0))
			norm += float64(x) * float64(x)
		}
		require.InDelta(t, 1.0, norm, 1e-5, "text %d is unit length", i)
	}
	// Distinct texts, distinct vectors; the same text, the same vector, call after call and
	// in a second instance of the model.
	for i := range vs {
		for j := i + 1; j < len(vs); j++ {
			require.Less(t, Cosine(vs[i], vs[j]), 0.9999, "texts %d and %d", i, j)
		}
	}
	require.Equal(t, vs, embedAll(t, e, onnxTexts...))
	other := loadTiny(t, ONNXOptions{})
	require.Equal(t, e.Model(), other.Model())
	again := embedAll(t, other, onnxTexts...)
	for i := range vs {
		requireClose(t, vs[i], again[i], fmt.Sprintf("text %d, second instance", i))
	}
	// Case and whitespace go through BERT's normaliser (lower-casing) and pre-tokeniser.
	requireClose(t, vs[0], embedAll(t, e, "  user PREFERS dark mode in the EDITOR . ")[0], "normalised text")

	named := loadTiny(t, ONNXOptions{Model: "my-minilm"})
	require.Equal(t, "my-minilm", named.Model())
}

// A text's vector does not depend on what it is batched with: the batch is padded (to the
// longest text, then to a bucket size) and the attention mask keeps padding out of both
// the attention and the mean pooling.
func TestEmbedONNXBatchEqualsSingle(t *testing.T) {
	t.Parallel()
	e := loadTiny(t, ONNXOptions{Batch: 4}) // 7 texts: batches of 4 and 3
	batched := embedAll(t, e, onnxTexts...)
	for i, text := range onnxTexts {
		requireClose(t, embedAll(t, e, text)[0], batched[i], fmt.Sprintf("text %d alone vs in a batch", i))
	}
	// In another order and with other companions.
	rev := embedAll(t, e, onnxTexts[6], onnxTexts[3], onnxTexts[0])
	requireClose(t, batched[6], rev[0], "long text")
	requireClose(t, batched[3], rev[1], "short text after a long one")
	requireClose(t, batched[0], rev[2], "first text last")
}

// Texts longer than the model's window are truncated (keeping [SEP]), not refused: two
// texts that differ only past the window embed the same.
func TestEmbedONNXTruncatesLongTexts(t *testing.T) {
	t.Parallel()
	e := loadTiny(t, ONNXOptions{})
	prefix := strings.Repeat("the user likes coffee in the morning and tea at night . ", 10) // ~120 tokens
	vs := embedAll(t, e, prefix+"alpha", prefix+"something else entirely, much longer than one word", "the user likes coffee")
	requireClose(t, vs[0], vs[1], "difference past the window")
	require.Less(t, Cosine(vs[0], vs[2]), 0.9999)

	// A smaller budget than the tokenizer's own truncation.
	short := loadTiny(t, ONNXOptions{MaxTokens: 8})
	ws := embedAll(t, short, "one two three four five six seven eight nine", "one two three four five six seven ten eleven")
	requireClose(t, ws[0], ws[1], "difference past 8 tokens")
}

func TestEmbedONNXDimensionMismatchFailsAtLoad(t *testing.T) {
	t.Parallel()
	_, err := NewONNX(ONNXOptions{Dir: tinyBERT, Dims: 384})
	require.ErrorContains(t, err, "produces 32 dimensions but STRATA_EMBEDDING_DIMS is 384: set it to 32")
}

func TestEmbedONNXMissingOrBrokenFilesFailAtLoad(t *testing.T) {
	t.Parallel()
	fixture := func(t *testing.T, files map[string][]byte) string {
		dir := t.TempDir()
		for name, b := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		}
		return dir
	}
	model, err := os.ReadFile(filepath.Join(tinyBERT, "model.onnx"))
	require.NoError(t, err)
	tok, err := os.ReadFile(filepath.Join(tinyBERT, "tokenizer.json"))
	require.NoError(t, err)

	cases := []struct {
		name string
		dir  string
		want string
	}{
		{"no dir configured", "", "STRATA_ONNX_MODEL_DIR is required"},
		{"dir does not exist", filepath.Join(t.TempDir(), "nope"), "no such file or directory"},
		{"dir is a file", filepath.Join(tinyBERT, "model.onnx"), "is not a directory"},
		{"empty dir", fixture(t, nil), "lacks [model.onnx tokenizer.json]"},
		{"no tokenizer", fixture(t, map[string][]byte{"model.onnx": model}), "lacks [tokenizer.json]"},
		{"no model", fixture(t, map[string][]byte{"tokenizer.json": tok}), "lacks [model.onnx]"},
		{"model is not ONNX", fixture(t, map[string][]byte{"model.onnx": []byte("this is not a protobuf \x00\xff\xff"), "tokenizer.json": tok}), "loading the model failed"},
		{"tokenizer is not JSON", fixture(t, map[string][]byte{"model.onnx": model, "tokenizer.json": []byte("{nope")}), "tokenizer.json"},
		{"tokenizer without a model", fixture(t, map[string][]byte{"model.onnx": model, "tokenizer.json": []byte(`{"version":"1.0"}`)}), "loading the model failed"},
	}
	for _, c := range cases {
		_, err := NewONNX(ONNXOptions{Dir: c.dir, Dims: genmodel.Tiny.Hidden})
		require.ErrorContains(t, err, c.want, c.name)
		if c.dir != "" {
			require.ErrorContains(t, err, c.dir, "%s: the error names the directory", c.name)
		}
	}
}

func TestEmbedONNXConcurrentCallsMatchSequential(t *testing.T) {
	t.Parallel()
	e := loadTiny(t, ONNXOptions{Batch: 3, Parallel: 2})
	want := embedAll(t, e, onnxTexts...)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for round := range 3 {
				// Each goroutine embeds a rotation of the texts, so batches differ.
				k := (g + round) % len(onnxTexts)
				texts := append(append([]string{}, onnxTexts[k:]...), onnxTexts[:k]...)
				vs, err := e.Embed(context.Background(), texts)
				if err != nil {
					errs <- err
					return
				}
				for i, v := range vs {
					w := want[(i+k)%len(onnxTexts)]
					for d := range w {
						if math.Abs(float64(w[d]-v[d])) > 2e-5 {
							errs <- fmt.Errorf("goroutine %d: text %d differs at %d: %v vs %v", g, (i+k)%len(onnxTexts), d, v[d], w[d])
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// Callers beyond Parallel wait for a slot, and give up with their context.
func TestEmbedONNXWaitsForASlotUntilCancelled(t *testing.T) {
	t.Parallel()
	e := loadTiny(t, ONNXOptions{Parallel: 1})
	e.sem <- struct{}{} // the only slot is busy
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Embed(ctx, []string{"x"})
	require.ErrorIs(t, err, context.Canceled)
	<-e.sem
	require.Len(t, embedAll(t, e, "x")[0], genmodel.Tiny.Hidden)

	// A failing forward pass is an UnavailableError for the embedder (503 to the client).
	broken := loadTiny(t, ONNXOptions{})
	broken.pipe.Model.InputsMeta = append(broken.pipe.Model.InputsMeta, broken.pipe.Model.InputsMeta[0])
	broken.pipe.Model.InputsMeta[len(broken.pipe.Model.InputsMeta)-1].Name = "pixel_values"
	_, err = broken.Embed(context.Background(), []string{"x"})
	var ue *strata.UnavailableError
	require.True(t, errors.As(err, &ue), "%v", err)
	require.Equal(t, "embedder", ue.Store)
}

func TestEmbedONNXBuckets(t *testing.T) {
	t.Parallel()
	require.Equal(t, []int{1, 2, 4, 8, 16, 32}, batchBuckets(32))
	require.Equal(t, []int{1, 2, 4, 5}, batchBuckets(5))
	require.Equal(t, []int{1}, batchBuckets(1))
	require.Equal(t, []int{16, 32, 64, 128}, sequenceBuckets(128))
	require.Equal(t, []int{16, 32, 64, 128, 256, 512}, sequenceBuckets(512))
	require.Equal(t, []int{8}, sequenceBuckets(8))
}

// BenchmarkEmbedONNXMiniLMShape times the pure-Go runtime on a model of all-MiniLM-L6-v2's
// shape (6 layers, 384 wide, 30522 tokens; random weights, generated into a temporary
// directory): one short text per call, and batches of 8.
//
//	go test -run '^$' -bench EmbedONNXMiniLMShape -benchtime 5x ./internal/embed/
func BenchmarkEmbedONNXMiniLMShape(b *testing.B) {
	dir := b.TempDir()
	require.NoError(b, genmodel.MiniLM.Write(dir))
	e, err := NewONNX(ONNXOptions{Dir: dir, Dims: genmodel.MiniLM.Hidden})
	require.NoError(b, err)
	defer e.Close()
	ctx := context.Background()
	short := "The user prefers dark mode in the editor." // 11 tokens with [CLS] and [SEP]
	var batch []string
	for i := range 8 {
		batch = append(batch, fmt.Sprintf("memory %d: the customer asked to move the meeting to friday morning", i))
	}
	for _, c := range []struct {
		name  string
		texts []string
	}{{"single", []string{short}}, {"batch8", batch}} {
		b.Run(c.name, func(b *testing.B) {
			_, err := e.Embed(ctx, c.texts) // compile this shape once
			require.NoError(b, err)
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.Embed(ctx, c.texts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(c.texts))/b.Elapsed().Seconds(), "texts/s")
		})
	}
}
