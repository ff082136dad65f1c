package embed

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/answercap"
	"github.com/strata-mem/strata/internal/strata"
)

// TestEmbedOpenAIRefusesAHugeAnswer (issue 57): an embeddings server that streams 50 MB
// for a batch of two 8-dimension vectors. The embedder reads a bounded part, fails with an
// error naming the size limit (no content), and does not retry it.
func TestEmbedOpenAIRefusesAHugeAnswer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		write := func(s string) bool {
			n, err := w.Write([]byte(s))
			written.Add(int64(n))
			w.(http.Flusher).Flush()
			return err == nil
		}
		if !write(`{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":[`) {
			return
		}
		chunk := strings.Repeat("0.125,", 32<<10/6)
		for sent := 0; sent < 50<<20; sent += len(chunk) {
			if !write(chunk) {
				return
			}
		}
		write(`0]}]}`)
	}))
	t.Cleanup(srv.Close)
	e, err := NewOpenAI(OpenAIOptions{BaseURL: srv.URL + "/v1", Model: "m", Dims: 8, Backoff: time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	_, err = e.Embed(context.Background(), []string{"a", "b"})
	var tl *answercap.TooLargeError
	require.ErrorAs(t, err, &tl)
	var ue *strata.UnavailableError
	require.ErrorAs(t, err, &ue, "still the embedder's failure for the caller")
	require.Equal(t, answercap.ForEmbeddings(2, 8), tl.Limit)
	require.Contains(t, err.Error(), "embeddings answer")
	require.NotContains(t, err.Error(), "0.125")
	require.EqualValues(t, 1, calls.Load(), "an answer refused for its size is not retried")
	require.Less(t, time.Since(start), 10*time.Second)
	require.Less(t, written.Load(), int64(8<<20), "the client stopped reading early (kernel buffers aside)")

	// A declared length beyond the limit is refused before its body is read.
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "104857600")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"object":"list"`))
	}))
	t.Cleanup(big.Close)
	e, err = NewOpenAI(OpenAIOptions{BaseURL: big.URL + "/v1", Model: "m", Dims: 8, Backoff: time.Millisecond})
	require.NoError(t, err)
	_, err = e.Embed(context.Background(), []string{"a"})
	require.True(t, errors.As(err, &tl) && tl.Known && tl.Size == 100<<20, "%v", err)
}
