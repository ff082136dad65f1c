package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/httpapi"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/redisconn"
	"github.com/strata-mem/strata/internal/testenv"
)

// deadServer is a server whose Postgres and Redis are both unreachable.
func deadServer(t *testing.T, logs io.Writer) (*httpapi.Server, string) {
	t.Helper()
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	port := testenv.FreePort(t)
	pool, err := pg.NewPool(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/strata?sslmode=disable&connect_timeout=1", port), pg.PoolOptions{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rdb, err := redisconn.New(fmt.Sprintf("redis://127.0.0.1:%d/0", port), 0)
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	cfg.AdminKey = "sk_admin_" + testenv.RandomID(16)
	s, err := app.NewServer(cfg, slog.New(slog.NewJSONHandler(logs, nil)), pool, rdb)
	require.NoError(t, err)
	return s, cfg.AdminKey
}

func TestStoreOutageIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	s, admin := deadServer(t, io.Discard)

	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, 503, w.Code)
	require.NotEmpty(t, w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), `"postgres":{"ok":false`)

	// A request that reaches Postgres (creating a key with the root key) → 503 problem.
	w = httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/admin/keys", bytes.NewBufferString(`{"role":"agent"}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	s.ServeHTTP(w, req)
	require.Equal(t, 503, w.Code, w.Body.String())
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	require.NotEmpty(t, w.Header().Get("Retry-After"))

	// Authentication of a non-root key needs Postgres too → 503, not 401 or 500.
	w = httptest.NewRecorder()
	req = httptest.NewRequest("GET", "/v1/admin/keys", nil)
	req.Header.Set("Authorization", "Bearer sk_someone")
	s.ServeHTTP(w, req)
	require.Equal(t, 503, w.Code, w.Body.String())
}

func TestPanicIs500ProblemWithoutInternals(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s, _ := deadServer(t, &logs)
	s.Router().Get("/boom", func(http.ResponseWriter, *http.Request) { panic("secret internal detail") })

	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/boom", nil)
	req.Header.Set("X-Request-Id", "req-panic-1")
	s.ServeHTTP(w, req)
	require.Equal(t, 500, w.Code)
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	require.Equal(t, "req-panic-1", w.Header().Get("X-Request-Id"))
	require.NotContains(t, w.Body.String(), "secret internal detail")
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	require.EqualValues(t, 500, m["status"])
	require.Contains(t, logs.String(), "secret internal detail", "the log keeps what the client must not see")
	require.Contains(t, logs.String(), "req-panic-1")
}
