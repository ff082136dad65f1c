package httpapi_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

type kvEntry struct {
	Namespace string         `json:"namespace"`
	Key       string         `json:"key"`
	Value     any            `json:"value"`
	Version   int64          `json:"version"`
	Level     string         `json:"level"`
	UserID    string         `json:"user_id"`
	AgentID   string         `json:"agent_id"`
	SessionID string         `json:"session_id"`
	Deleted   bool           `json:"deleted"`
	ExpiresAt string         `json:"expires_at"`
	UpdatedAt string         `json:"updated_at"`
	UpdatedBy string         `json:"updated_by"`
	Extra     map[string]any `json:"-"`
}

func kvDecode(t *testing.T, r *apptest.Response) kvEntry {
	t.Helper()
	var e kvEntry
	r.JSON(t, &e)
	return e
}

func TestKVHTTPResolveVersionsHistory(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")

	put := func(path string, body map[string]any, hdr ...string) *apptest.Response {
		t.Helper()
		return s.Do("PUT", path, key, body, hdr...)
	}
	r := put("/v1/kv/brand/colour", map[string]any{"value": "grey"})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	e := kvDecode(t, r)
	require.Equal(t, "org", e.Level)
	require.NotEmpty(t, e.UpdatedBy)
	require.Equal(t, 201, put("/v1/kv/brand/colour", map[string]any{"value": map[string]any{"hex": "#f00"}, "user_id": "u1"}).Status)
	require.Equal(t, 201, put("/v1/kv/brand/colour", map[string]any{"value": "agent", "agent_id": "a1"}).Status)
	r = put("/v1/kv/brand/colour", map[string]any{"value": "session", "user_id": "u1", "agent_id": "a1", "session_id": "s1", "ttl_seconds": 3600})
	require.Equal(t, 201, r.Status, string(r.Body))
	e = kvDecode(t, r)
	require.Equal(t, "session", e.Level)
	require.Equal(t, "u1", e.UserID)
	require.NotEmpty(t, e.ExpiresAt)

	get := func(q string) *apptest.Response { t.Helper(); return s.Do("GET", "/v1/kv/brand/colour?"+q, key, nil) }
	for _, c := range []struct{ q, level string }{
		{"user_id=u1&agent_id=a1&session_id=s1", "session"},
		{"user_id=u1&agent_id=a1&session_id=s2", "agent"},
		{"user_id=u1&agent_id=a2", "user"},
		{"user_id=u2", "org"},
		{"", "org"},
		{"user_id=u1&agent_id=a1&exact=true", "agent"},
	} {
		for i := 0; i < 2; i++ { // uncached, then cached: same answer
			r = get(c.q)
			require.Equal(t, 200, r.Status, "%s: %s", c.q, r.Body)
			require.Equal(t, c.level, kvDecode(t, r).Level, c.q)
			require.Equal(t, `"1"`, r.Header.Get("ETag"))
		}
	}
	require.Equal(t, 404, get("user_id=u1&agent_id=a2&exact=true").Status)
	require.Equal(t, 404, s.Do("GET", "/v1/kv/brand/nothing", key, nil).Status)

	// Versions: If-Match, stale → 409 with nothing written.
	r = put("/v1/kv/brand/colour", map[string]any{"value": "blue", "user_id": "u1"}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = put("/v1/kv/brand/colour", map[string]any{"value": "green", "user_id": "u1"}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	require.Empty(t, r.Header.Get("ETag"))
	r = get("user_id=u1")
	require.Equal(t, "blue", kvDecode(t, r).Value)
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	require.Equal(t, 409, put("/v1/kv/brand/colour", map[string]any{"value": 1}, "If-None-Match", "*").Status)
	require.Equal(t, 400, put("/v1/kv/brand/colour", map[string]any{"value": 1}, "If-Match", "nonsense").Status)

	// Restore version 1 of the user entry: a new write.
	r = s.Do("POST", "/v1/kv/brand/colour/restore", key, map[string]any{"version": 1, "user_id": "u1"}, "If-Match", `"2"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	e = kvDecode(t, r)
	require.EqualValues(t, 3, e.Version)
	require.Equal(t, map[string]any{"hex": "#f00"}, e.Value)
	require.Equal(t, map[string]any{"hex": "#f00"}, kvDecode(t, get("user_id=u1")).Value)
	require.Equal(t, 422, s.Do("POST", "/v1/kv/brand/colour/restore", key, map[string]any{"version": 9, "user_id": "u1"}).Status)

	// Delete the user entry: resolution falls through to the org level at once.
	require.Equal(t, 409, s.Do("DELETE", "/v1/kv/brand/colour?user_id=u1", key, nil, "If-Match", `"2"`).Status)
	r = s.Do("DELETE", "/v1/kv/brand/colour?user_id=u1", key, nil, "If-Match", `"3"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.True(t, kvDecode(t, r).Deleted)
	require.Equal(t, "org", kvDecode(t, get("user_id=u1&agent_id=a2")).Level)
	require.Equal(t, 404, s.Do("DELETE", "/v1/kv/brand/colour?user_id=u1", key, nil).Status)

	// History, newest first, paged.
	r = s.Do("GET", "/v1/kv/brand/colour/history?user_id=u1&limit=2", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var hist struct {
		Items []struct {
			Version      int64  `json:"version"`
			Op           string `json:"op"`
			WrittenBy    string `json:"written_by"`
			WrittenAt    string `json:"written_at"`
			RestoredFrom int64  `json:"restored_from"`
		} `json:"items"`
		NextCursor string `json:"next_cursor"`
	}
	r.JSON(t, &hist)
	require.Len(t, hist.Items, 2)
	require.Equal(t, "delete", hist.Items[0].Op)
	require.Equal(t, "restore", hist.Items[1].Op)
	require.EqualValues(t, 1, hist.Items[1].RestoredFrom)
	require.Equal(t, e.UpdatedBy, hist.Items[0].WrittenBy)
	require.NotEmpty(t, hist.Items[0].WrittenAt)
	r = s.Do("GET", "/v1/kv/brand/colour/history?user_id=u1&limit=2&cursor="+hist.NextCursor, key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	hist.Items, hist.NextCursor = nil, ""
	r.JSON(t, &hist)
	require.Len(t, hist.Items, 2)
	require.Equal(t, []int64{2, 1}, []int64{hist.Items[0].Version, hist.Items[1].Version})
	require.Empty(t, hist.NextCursor)
	require.Equal(t, 404, s.Do("GET", "/v1/kv/brand/colour/history?user_id=nobody", key, nil).Status)
}

func TestKVHTTPListAndBatchGet(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	for i := 0; i < 5; i++ {
		r := s.Do("PUT", fmt.Sprintf("/v1/kv/prefs/k%d", i), key, map[string]any{"value": i})
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/prefs/k1", key, map[string]any{"value": "mine", "user_id": "u1"}).Status)
	// A key may be called batch-get: the batch route is POST-only.
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/prefs/batch-get", key, map[string]any{"value": "odd name"}).Status)
	r := s.Do("GET", "/v1/kv/prefs/batch-get", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, "odd name", kvDecode(t, r).Value)

	// Paging the org level.
	var keys []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		r := s.Do("GET", "/v1/kv/prefs?limit=2&cursor="+cursor, key, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		var l struct {
			Items      []kvEntry `json:"items"`
			NextCursor string    `json:"next_cursor"`
		}
		r.JSON(t, &l)
		for _, it := range l.Items {
			keys = append(keys, it.Key)
			require.Equal(t, "org", it.Level)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	require.Equal(t, []string{"batch-get", "k0", "k1", "k2", "k3", "k4"}, keys)

	// One level only vs resolved.
	r = s.Do("GET", "/v1/kv/prefs?user_id=u1", key, nil)
	var l struct {
		Items []kvEntry `json:"items"`
	}
	r.JSON(t, &l)
	require.Len(t, l.Items, 1)
	r = s.Do("GET", "/v1/kv/prefs?user_id=u1&resolve=true", key, nil)
	r.JSON(t, &l)
	require.Len(t, l.Items, 6)
	require.Equal(t, "user", l.Items[2].Level)
	require.Equal(t, "mine", l.Items[2].Value)

	r = s.Do("POST", "/v1/kv/prefs/batch-get", key, map[string]any{"keys": []string{"k1", "zz", "k2"}, "user_id": "u1"})
	require.Equal(t, 200, r.Status, string(r.Body))
	var b struct {
		Items   []kvEntry `json:"items"`
		Missing []string  `json:"missing"`
	}
	r.JSON(t, &b)
	require.Len(t, b.Items, 2)
	require.Equal(t, "mine", b.Items[0].Value)
	require.Equal(t, "user", b.Items[0].Level)
	require.EqualValues(t, 2, b.Items[1].Value)
	require.Equal(t, []string{"zz"}, b.Missing)
	require.Equal(t, 422, s.Do("POST", "/v1/kv/prefs/batch-get", key, map[string]any{"keys": []string{"bad key"}}).Status)
	require.Equal(t, 422, s.Do("POST", "/v1/kv/prefs/batch-get", key, map[string]any{"keys": []string{}}).Status)
}

func TestKVHTTPBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_KV_MAX_VALUE_BYTES", "1024"))
	key := s.NewKey("acme", "agent")
	for _, c := range []struct {
		path   string
		body   any
		status int
		field  string
	}{
		{"/v1/kv/bad%20ns/k", map[string]any{"value": 1}, 422, "path.namespace"},
		{"/v1/kv/ns/" + strings.Repeat("k", 201), map[string]any{"value": 1}, 422, "path.key"},
		{"/v1/kv/ns/k%00", map[string]any{"value": 1}, 422, "path.key"},
		{"/v1/kv/ns/k", map[string]any{"value": strings.Repeat("x", 2000)}, 413, "body.value"},
		{"/v1/kv/ns/k", `{"value": "a\u0000b"}`, 422, "body.value"},
		{"/v1/kv/ns/k", map[string]any{"value": nil}, 422, "body.value"},
		{"/v1/kv/ns/k", map[string]any{}, 422, "body.value"}, // a missing property is located at itself
		{"/v1/kv/ns/k", map[string]any{"value": 1, "user_id": "no spaces"}, 422, "body.user_id"},
		{"/v1/kv/ns/k", map[string]any{"value": 1, "ttl_seconds": 0}, 422, "body.ttl_seconds"},
	} {
		r := s.Do("PUT", c.path, key, c.body)
		require.Equal(t, c.status, r.Status, "%s %v: %s", c.path, c.body, r.Body)
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
		require.Contains(t, string(r.Body), `"location":"`+c.field, "%s %v: %s", c.path, c.body, r.Body)
	}
	require.Equal(t, 422, s.Do("GET", "/v1/kv/ns/k?user_id=a%20b", key, nil).Status)
	require.Equal(t, 422, s.Do("GET", "/v1/kv/ns/k/history?cursor=x", key, nil).Status)

	own := testenv.OwnerConn(t, s.DBURL)
	var n int
	require.NoError(t, own.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM kv_entries) + (SELECT count(*) FROM kv_versions)`).Scan(&n))
	require.Zero(t, n)
}

func TestKVHTTPTenantIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	a, b := s.NewKey("acme", "agent"), s.NewKey("globex", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/ns/k", a, map[string]any{"value": "acme's", "user_id": "u1"}).Status)
	require.Equal(t, 200, s.Do("GET", "/v1/kv/ns/k?user_id=u1", a, nil).Status) // cached for acme
	require.Equal(t, 404, s.Do("GET", "/v1/kv/ns/k?user_id=u1", b, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/kv/ns/k/history?user_id=u1", b, nil).Status)
	require.Equal(t, 404, s.Do("DELETE", "/v1/kv/ns/k?user_id=u1", b, nil).Status)
	r := s.Do("GET", "/v1/kv/ns?user_id=u1", b, nil)
	require.Equal(t, 200, r.Status)
	require.JSONEq(t, `{"items":[]}`, string(r.Body))
	r = s.Do("POST", "/v1/kv/ns/batch-get", b, map[string]any{"keys": []string{"k"}, "user_id": "u1"})
	require.JSONEq(t, `{"items":[],"missing":["k"]}`, string(r.Body))
	// globex's own write is independent.
	r = s.Do("PUT", "/v1/kv/ns/k", b, map[string]any{"value": "globex's", "user_id": "u1"}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status)
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/ns/k", b, map[string]any{"value": "globex's", "user_id": "u1"}).Status)
	require.Equal(t, "acme's", kvDecode(t, s.Do("GET", "/v1/kv/ns/k?user_id=u1", a, nil)).Value)
	// A compliance key may not use the data plane.
	c := s.NewKey("acme", "compliance")
	require.Equal(t, 403, s.Do("GET", "/v1/kv/ns/k", c, nil).Status)
}

func TestKVHTTPIdempotentPut(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	body := map[string]any{"value": map[string]any{"a": 1}, "user_id": "u1"}
	r1 := s.Do("PUT", "/v1/kv/ns/k", key, body, "Idempotency-Key", "put-1")
	require.Equal(t, 201, r1.Status, string(r1.Body))
	r2 := s.Do("PUT", "/v1/kv/ns/k", key, body, "Idempotency-Key", "put-1")
	require.Equal(t, 201, r2.Status)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(r1.Body), string(r2.Body))
	require.Equal(t, `"1"`, r2.Header.Get("ETag"))
	r := s.Do("PUT", "/v1/kv/ns/k", key, map[string]any{"value": 2, "user_id": "u1"}, "Idempotency-Key", "put-1")
	require.Equal(t, 422, r.Status)
	r = s.Do("GET", "/v1/kv/ns/k/history?user_id=u1", key, nil)
	var h struct {
		Items []any `json:"items"`
	}
	r.JSON(t, &h)
	require.Len(t, h.Items, 1, "the replay wrote nothing")
}

// Two replicas share Postgres and Redis: a write acknowledged by one is what the other
// reads next, although the other had the old value cached.
func TestKVHTTPNoStaleReadAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := apptest.Start(t)
	b := apptest.Start(t, apptest.Env("STRATA_DATABASE_URL", a.DBURL), apptest.Env("STRATA_REDIS_PREFIX", a.Prefix))
	key := a.NewKey("acme", "agent")
	require.Equal(t, 201, a.Do("PUT", "/v1/kv/ns/k", key, map[string]any{"value": 0, "agent_id": "x"}).Status)
	for i := 1; i <= 20; i++ {
		require.EqualValues(t, i-1, kvDecode(t, b.Do("GET", "/v1/kv/ns/k?agent_id=x&session_id=s", key, nil)).Value)
		r := a.Do("PUT", "/v1/kv/ns/k", key, map[string]any{"value": i, "agent_id": "x"}, "If-Match", etagOf(int64(i)))
		require.Equal(t, 200, r.Status, string(r.Body))
		require.EqualValues(t, i, kvDecode(t, b.Do("GET", "/v1/kv/ns/k?agent_id=x&session_id=s", key, nil)).Value)
	}
}

func etagOf(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// With Redis unreachable the service stays in rotation ("degraded") and key-value reads
// and writes work from Postgres.
func TestKVHTTPRedisDownDegraded(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close()) // nothing listens there now
	s := apptest.Start(t, apptest.Env("STRATA_REDIS_URL", fmt.Sprintf("redis://127.0.0.1:%d/0", port)))
	r := s.Do("GET", "/readyz", "", nil)
	require.Equal(t, 200, r.Status)
	m := r.Map(t)
	require.Equal(t, "degraded", m["status"])
	require.Equal(t, false, m["checks"].(map[string]any)["redis"].(map[string]any)["ok"])

	key := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/ns/k", key, map[string]any{"value": 1, "user_id": "u1"}).Status)
	require.Equal(t, 200, s.Do("PUT", "/v1/kv/ns/k", key, map[string]any{"value": 2, "user_id": "u1"}, "If-Match", `"1"`).Status)
	r = s.Do("GET", "/v1/kv/ns/k?user_id=u1&agent_id=a", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.EqualValues(t, 2, kvDecode(t, r).Value)
	r = s.Do("POST", "/v1/kv/ns/batch-get", key, map[string]any{"keys": []string{"k"}, "user_id": "u1"})
	require.Equal(t, 200, r.Status, string(r.Body))
}
