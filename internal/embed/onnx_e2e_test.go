package embed_test

import (
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"testing"

	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/testenv"
)

// The real server with STRATA_EMBEDDER=onnx: memories are embedded by the model in
// STRATA_ONNX_MODEL_DIR, recorded with its name and size, and found by the vector leg.
func TestEmbedONNXServerWritesAndSearchesMemories(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("testdata/tiny-bert")
	require.NoError(t, err)
	s := apptest.Start(t,
		apptest.Env("STRATA_EMBEDDER", "onnx"),
		apptest.Env("STRATA_ONNX_MODEL_DIR", dir),
		apptest.Env("STRATA_EMBEDDING_DIMS", "32"),
		// The random fixture model puts unrelated texts close together; only exact
		// duplicates may merge here.
		apptest.Env("STRATA_DEDUP_THRESHOLD", "0.99999"))
	key := s.NewKey("acme", "agent")

	local, err := embed.NewONNX(embed.ONNXOptions{Dir: dir, Dims: 32})
	require.NoError(t, err)
	defer local.Close()

	texts := []string{
		"The user prefers dark mode in the editor.",
		"Invoice 4471 was paid by bank transfer on friday.",
		"Deploy the server only after the tests run green.",
	}
	ids := make([]string, len(texts))
	for i, text := range texts {
		r := s.Do("POST", "/v1/memories", key, map[string]any{"text": text, "user_id": "u1"})
		require.Equal(t, 201, r.Status, string(r.Body))
		var m struct {
			ID        string `json:"id"`
			Embedding struct {
				Embedder, Model string
				Dims            int
			} `json:"embedding"`
		}
		r.JSON(t, &m)
		require.Equal(t, "onnx", m.Embedding.Embedder)
		require.Equal(t, local.Model(), m.Embedding.Model)
		require.Equal(t, 32, m.Embedding.Dims)
		ids[i] = m.ID
	}

	// The stored vector is the model's embedding of the text.
	want, err := local.Embed(context.Background(), texts)
	require.NoError(t, err)
	conn := testenv.OwnerConn(t, s.DBURL)
	for i, id := range ids {
		var v pgvector.Vector
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT embedding FROM memories WHERE id = $1`, id).Scan(&v))
		require.Len(t, v.Slice(), 32)
		for d := range want[i] {
			require.InDelta(t, want[i][d], v.Slice()[d], 2e-5, "memory %d component %d", i, d)
		}
	}

	type hit struct {
		Memory struct {
			ID string `json:"id"`
		} `json:"memory"`
		Score struct {
			VectorRank       int     `json:"vector_rank"`
			VectorSimilarity float64 `json:"vector_similarity"`
			TextRank         int     `json:"text_rank"`
		} `json:"score"`
	}
	search := func(query string) []hit {
		r := s.Do("POST", "/v1/memories/search", key, map[string]any{"query": query, "user_id": "u1"})
		require.Equal(t, 200, r.Status, string(r.Body))
		var out struct{ Items []hit }
		r.JSON(t, &out)
		return out.Items
	}

	// A memory's own text finds it first, at cosine 1 in the vector leg.
	items := search(texts[1])
	require.NotEmpty(t, items)
	require.Equal(t, ids[1], items[0].Memory.ID)
	require.Equal(t, 1, items[0].Score.VectorRank)
	require.InDelta(t, 1.0, items[0].Score.VectorSimilarity, 1e-4)

	// A query sharing no word with any memory: only the vector leg answers, ranking the
	// memories by the model's cosine similarity.
	q := "qqq xyzzy"
	qv, err := local.Embed(context.Background(), []string{q})
	require.NoError(t, err)
	order := []int{0, 1, 2}
	sort.Slice(order, func(a, b int) bool { return embed.Cosine(qv[0], want[order[a]]) > embed.Cosine(qv[0], want[order[b]]) })
	items = search(q)
	require.Len(t, items, 3)
	for rank, it := range items {
		require.Zero(t, it.Score.TextRank)
		require.Equal(t, rank+1, it.Score.VectorRank)
		require.Equal(t, ids[order[rank]], it.Memory.ID, "rank %d", rank+1)
		require.InDelta(t, embed.Cosine(qv[0], want[order[rank]]), it.Score.VectorSimilarity, 1e-4)
	}
}

// A model whose output size is not STRATA_EMBEDDING_DIMS stops the server at start, saying
// both numbers.
func TestEmbedONNXServerRefusesToStartOnDimensionMismatch(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("testdata/tiny-bert")
	require.NoError(t, err)
	_, prefix := testenv.Redis(t)
	env := map[string]string{
		"STRATA_DATABASE_URL":   testenv.DatabaseURL(t),
		"STRATA_REDIS_URL":      testenv.RedisURL(),
		"STRATA_REDIS_PREFIX":   prefix,
		"STRATA_HTTP_ADDR":      "127.0.0.1:0",
		"STRATA_ADMIN_KEY":      "sk_admin_" + testenv.RandomID(16),
		"STRATA_LOG_LEVEL":      "warn",
		"STRATA_EMBEDDER":       "onnx",
		"STRATA_ONNX_MODEL_DIR": dir,
		"STRATA_EMBEDDING_DIMS": "384",
	}
	var stdout, stderr bytes.Buffer
	err = app.Run(context.Background(), []string{"server"}, func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorContains(t, err, "produces 32 dimensions but STRATA_EMBEDDING_DIMS is 384")
	require.NotContains(t, stdout.String(), "Strata listening")

	env["STRATA_ONNX_MODEL_DIR"] = t.TempDir()
	err = app.Run(context.Background(), []string{"server"}, func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorContains(t, err, "lacks [model.onnx tokenizer.json]")
}
