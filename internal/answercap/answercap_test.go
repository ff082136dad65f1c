package answercap

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLimits(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, Floor, ForTokens(0), "a floor for small max_tokens")
	require.EqualValues(t, 10_000*BytesPerToken+16<<10, ForTokens(10_000))
	require.Greater(t, ForEmbeddings(96, 1536), int64(96*1536*20), "room for every float as JSON text")
}

func TestClientCapsTheBody(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 10_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // chunked: no Content-Length
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c := Client(nil)
	get := func(limit int64) (string, error) {
		req, _ := http.NewRequestWithContext(WithLimit(context.Background(), limit, "model answer"), "GET", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	got, err := get(10_000)
	require.NoError(t, err, "exactly the limit is fine")
	require.Equal(t, body, got)
	got, err = get(9_999)
	var tl *TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Len(t, got, 9_999, "never more than the limit reaches the reader")
	require.Equal(t, "the model answer is larger than 9999 bytes (at least 10000 read); Strata reads at most 9999 bytes of it (refused)", err.Error())
	require.Same(t, Client(c).Transport, c.Transport, "wrapping twice is wrapping once")
}
