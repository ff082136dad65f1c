package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/embed"
)

// The embedder is built from the configuration here (moved from internal/embed, which no
// longer reads config.Config).
func TestNewEmbedderBuildsEachKindAndRefusesUnknown(t *testing.T) {
	t.Parallel()
	const tinyBERT = "../embed/testdata/tiny-bert"
	o, err := newEmbedder(config.Config{Embedder: "onnx", ONNXModelDir: tinyBERT, EmbeddingDims: 32}, nil)
	require.NoError(t, err)
	require.Equal(t, "onnx", o.Name())
	require.NoError(t, o.(*embed.ONNX).Close())
	_, err = newEmbedder(config.Config{Embedder: "nope", EmbeddingDims: 384}, nil)
	require.Error(t, err)
	e, err := newEmbedder(config.Config{Embedder: "hash", EmbeddingDims: 64}, nil)
	require.NoError(t, err)
	require.Equal(t, 64, e.Dims())
	require.Equal(t, "lexical", e.Name())

	// Through the configuration, as the server starts it.
	_, err = newEmbedder(config.Config{Embedder: "onnx", ONNXModelDir: tinyBERT, EmbeddingDims: 384}, nil)
	require.ErrorContains(t, err, "STRATA_EMBEDDING_DIMS is 384")
	_, err = newEmbedder(config.Config{Embedder: "onnx", EmbeddingDims: 32}, nil)
	require.ErrorContains(t, err, "STRATA_ONNX_MODEL_DIR is required")
}
