package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestReadinessReportsEachStore(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedis(t)
	s := apptest.Start(t, apptest.Env("STRATA_REDIS_URL", rp.URL))

	r := s.Do("GET", "/readyz", "", nil)
	require.Equal(t, 200, r.Status)
	var ready struct {
		Status string `json:"status"`
		Checks map[string]struct {
			OK bool `json:"ok"`
		} `json:"checks"`
	}
	r.JSON(t, &ready)
	require.Equal(t, "ready", ready.Status)
	require.True(t, ready.Checks["postgres"].OK && ready.Checks["pgvector"].OK && ready.Checks["redis"].OK)

	rp.Stop()
	r = s.Do("GET", "/readyz", "", nil)
	r.JSON(t, &ready)
	require.Equal(t, 200, r.Status, "Redis alone down keeps the replica in rotation")
	require.Equal(t, "degraded", ready.Status)
	require.False(t, ready.Checks["redis"].OK)
	require.True(t, ready.Checks["postgres"].OK)

	rp.Start()
	r = s.Do("GET", "/readyz", "", nil)
	r.JSON(t, &ready)
	require.Equal(t, "ready", ready.Status, "recovers by itself when Redis returns")
	require.Equal(t, 200, s.Do("GET", "/healthz", "", nil).Status)
}

func TestRequestIDMetricsAndOpenAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)

	r := s.Do("GET", "/v1/admin/keys", s.AdminKey, nil, "X-Request-Id", "trace-abc-123")
	require.Equal(t, "trace-abc-123", r.Header.Get("X-Request-Id"))
	require.NotEmpty(t, s.Do("GET", "/v1/admin/keys", s.AdminKey, nil).Header.Get("X-Request-Id"))

	m := s.Do("GET", "/metrics", "", nil)
	require.Equal(t, 200, m.Status)
	require.Contains(t, string(m.Body), `strata_http_requests_total{method="GET",route="/v1/admin/keys",status="200"}`)
	require.Contains(t, string(m.Body), `strata_http_request_duration_seconds_bucket`)
	require.Contains(t, string(m.Body), `strata_pg_pool_connections{state="max"}`)

	o := s.Do("GET", "/openapi.json", "", nil)
	require.Equal(t, 200, o.Status)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	o.JSON(t, &doc)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	op := doc.Paths["/v1/admin/keys"]["post"]
	require.NotNil(t, op)
	for _, code := range []string{`"401"`, `"403"`, `"409"`, `"413"`, `"415"`, `"422"`, `"503"`} {
		require.Contains(t, string(op), code, "error responses are documented")
	}
}

// TestOpenAPICoversEveryRoute walks the router: every /v1 route must be in /openapi.json.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	s := newTestServer(t)
	doc := s.OpenAPI()
	var missing []string
	err := chi.Walk(s.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/v1/") {
			return nil
		}
		p, ok := doc.Paths[route]
		var op *huma.Operation
		if ok {
			op = map[string]*huma.Operation{"GET": p.Get, "POST": p.Post, "PUT": p.Put, "PATCH": p.Patch, "DELETE": p.Delete}[method]
		}
		if op == nil {
			missing = append(missing, method+" "+route)
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, missing, "routes missing from the OpenAPI document")
}

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_RATE_LIMIT", "0.5"), apptest.Env("STRATA_RATE_BURST", "3"))
	a := s.NewKey("acme", "admin")
	b := s.NewKey("acme", "admin")
	codes := map[int]int{}
	var last *apptest.Response
	for i := 0; i < 6; i++ {
		last = s.Do("GET", "/v1/admin/keys", a, nil)
		codes[last.Status]++
	}
	require.Equal(t, 3, codes[200], "the burst passes")
	require.Equal(t, 3, codes[429])
	require.Equal(t, "application/problem+json", last.Header.Get("Content-Type"))
	require.NotEmpty(t, last.Header.Get("Retry-After"))
	require.Equal(t, 200, s.Do("GET", "/v1/admin/keys", b, nil).Status, "limits are per key")
}
