package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

type stateResp struct {
	SessionID  string         `json:"session_id"`
	UserID     string         `json:"user_id"`
	AgentID    string         `json:"agent_id"`
	State      map[string]any `json:"state"`
	Version    int64          `json:"version"`
	TTLSeconds int64          `json:"ttl_seconds"`
	ExpiresAt  time.Time      `json:"expires_at"`
	Restored   bool           `json:"restored"`
}

type turnResp struct {
	Seq      int64          `json:"seq"`
	Role     string         `json:"role"`
	Content  string         `json:"content"`
	Metadata map[string]any `json:"metadata"`
}

type turnsResp struct {
	Items      []turnResp `json:"items"`
	NextCursor string     `json:"next_cursor"`
	Restored   bool       `json:"restored"`
}

func decodeState(t *testing.T, r *apptest.Response) stateResp {
	t.Helper()
	var st stateResp
	r.JSON(t, &st)
	return st
}

func decodeTurns(t *testing.T, r *apptest.Response) turnsResp {
	t.Helper()
	var b turnsResp
	r.JSON(t, &b)
	return b
}

// flushPrefix emulates FLUSHALL for this server: it deletes every key under its prefix
// (other tests share the Redis, so a real FLUSHALL is not an option).
func flushPrefix(t *testing.T, prefix string) {
	t.Helper()
	ctx := context.Background()
	c := testenv.RedisClient(t)
	keys, err := testenv.RedisKeys(ctx, c, prefix+"*")
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, testenv.RedisDel(ctx, c, keys))
}

func TestWorkingStateLifecycle(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/s-1/state"

	require.Equal(t, 404, s.Do("GET", path, key, nil).Status)

	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"step": "cut", "n": json.Number("12345678901234567890")},
		"user_id": "u1", "agent_id": "a1"})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	require.Contains(t, string(r.Body), "12345678901234567890", "numbers are kept exactly")
	var st stateResp
	st = decodeState(t, r)
	require.Equal(t, int64(1), st.Version)
	require.Equal(t, "u1", st.UserID)
	require.Equal(t, "a1", st.AgentID)
	require.False(t, st.Restored)
	require.EqualValues(t, 86400, st.TTLSeconds)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), st.ExpiresAt, time.Minute)

	// Update: 200, version 2; a stale If-Match is refused and changes nothing.
	r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"step": "colour"}}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"step": "lost"}}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"step": "lost"}}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, string(r.Body))
	r = s.Do("GET", path, key, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	st = decodeState(t, r)
	require.Equal(t, map[string]any{"step": "colour"}, st.State)

	// The user set by the first write is fixed.
	r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{}, "user_id": "u2"})
	require.Equal(t, 409, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "user_id")

	// Delete removes it; a second delete is 404; the tombstone takes the next version (3)
	// and a recreated session continues from it, so the old ETag cannot match.
	require.Equal(t, 409, s.Do("DELETE", path, key, nil, "If-Match", `"1"`).Status)
	require.Equal(t, 204, s.Do("DELETE", path, key, nil, "If-Match", `"2"`).Status)
	require.Equal(t, 404, s.Do("GET", path, key, nil).Status)
	require.Equal(t, 404, s.Do("DELETE", path, key, nil).Status)
	r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"fresh": true}, "user_id": "u2"})
	require.Equal(t, 201, r.Status, string(r.Body))
	st = decodeState(t, r)
	require.Equal(t, int64(4), st.Version)
	require.Equal(t, "u2", st.UserID)

	// The durable copy is in Postgres.
	db := testenv.OwnerConn(t, s.DBURL)
	var v int64
	var doc string
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT version, state::text FROM working_sessions WHERE org_id = 'acme' AND session_id = 's-1'`).Scan(&v, &doc))
	require.Equal(t, int64(4), v)
	require.JSONEq(t, `{"fresh": true}`, doc)
}

func TestWorkingMergePatch(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/mp/state"

	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{
		"a": 1, "b": map[string]any{"x": 1, "y": 2}, "list": []any{1, 2}, "drop": "me"}})
	require.Equal(t, 201, r.Status, string(r.Body))

	// RFC 7386: null deletes, objects merge recursively, arrays and scalars replace.
	r = s.Do("PATCH", path, key, `{"state": {"drop": null, "b": {"y": null, "z": 3}, "list": [9], "c": "new"}}`,
		"Content-Type", "application/merge-patch+json", "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	var st stateResp
	st = decodeState(t, r)
	require.Equal(t, int64(2), st.Version)
	require.Equal(t, map[string]any{"a": 1.0, "b": map[string]any{"x": 1.0, "z": 3.0}, "list": []any{9.0}, "c": "new"}, st.State)

	// application/json is accepted too; PATCH creates a session that has no state yet.
	r = s.Do("PATCH", "/v1/sessions/mp2/state", key, map[string]any{"state": map[string]any{"k": "v", "gone": nil}})
	require.Equal(t, 201, r.Status, string(r.Body))
	st = decodeState(t, r)
	require.Equal(t, map[string]any{"k": "v"}, st.State)

	// Replacing the document with a non-object is refused.
	r = s.Do("PATCH", path, key, `{"state": null}`, "Content-Type", "application/merge-patch+json")
	require.Equal(t, 422, r.Status, string(r.Body))
}

// TestWorkingConcurrentIncrements: 50 writers each increment a counter N times with
// read → PATCH + If-Match → retry on 409. The compare-and-set must not lose one.
func TestWorkingConcurrentIncrements(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/race/state"
	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"counter": 0}}).Status)

	const writers, n = 50, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				for attempt := 0; ; attempt++ {
					if attempt > 500 {
						errs <- fmt.Errorf("writer gave up")
						return
					}
					r := s.Do("GET", path, key, nil)
					if r.Status != 200 {
						errs <- fmt.Errorf("GET %d %s", r.Status, r.Body)
						return
					}
					var st stateResp
					if err := json.Unmarshal(r.Body, &st); err != nil {
						errs <- err
						return
					}
					c := st.State["counter"].(float64)
					r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"counter": c + 1}},
						"If-Match", r.Header.Get("ETag"))
					if r.Status == 200 {
						break
					}
					if r.Status != 409 {
						errs <- fmt.Errorf("PATCH %d %s", r.Status, r.Body)
						return
					}
					mu.Lock()
					conflicts++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var st stateResp
	st = decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, float64(writers*n), st.State["counter"])
	require.Equal(t, int64(writers*n+1), st.Version)
	t.Logf("%d increments, %d conflicts retried", writers*n, conflicts)

	// The durable copy has the same version.
	var v int64
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT version FROM working_sessions WHERE session_id = 'race'`).Scan(&v))
	require.Equal(t, st.Version, v)
}

func TestWorkingFlushRecovery(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_TURN_BUFFER", "3"))
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/fr/state"
	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"a": 1}, "user_id": "u1"}).Status)
	require.Equal(t, 200, s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": 2}}).Status)
	for i := 1; i <= 5; i++ {
		r := s.Do("POST", "/v1/sessions/fr/messages", key, map[string]any{"role": "user", "content": fmt.Sprintf("m%d", i)})
		require.Equal(t, 201, r.Status, string(r.Body))
	}

	flushPrefix(t, s.Prefix)

	r := s.Do("GET", path, key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var st stateResp
	st = decodeState(t, r)
	require.True(t, st.Restored)
	require.Equal(t, int64(2), st.Version)
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	require.Equal(t, map[string]any{"a": 1.0, "b": 2.0}, st.State)
	require.Equal(t, "u1", st.UserID)

	var buf turnsResp
	buf = decodeTurns(t, s.Do("GET", "/v1/sessions/fr/messages", key, nil))
	require.True(t, buf.Restored)
	require.Len(t, buf.Items, 3)
	require.Equal(t, []int64{3, 4, 5}, []int64{buf.Items[0].Seq, buf.Items[1].Seq, buf.Items[2].Seq})
	require.Equal(t, "m5", buf.Items[2].Content)

	// Versions and seqs continue; the next write clears restored.
	r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"c": 3}}, "If-Match", `"2"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	st = decodeState(t, r)
	require.Equal(t, int64(3), st.Version)
	require.False(t, st.Restored)
	r = s.Do("POST", "/v1/sessions/fr/messages", key, map[string]any{"role": "assistant", "content": "m6"})
	require.Equal(t, 201, r.Status, string(r.Body))
	var tr turnResp
	r.JSON(t, &tr)
	require.Equal(t, int64(6), tr.Seq)

	// The user index was rebuilt by the restore.
	c := testenv.RedisClient(t)
	members, err := c.SMembers(context.Background(), s.Prefix+"ws:user:{acme/u1}").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"fr"}, members)
}

func TestWorkingMessages(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_TURN_BUFFER", "4"))
	key := s.NewKey("acme", "agent")
	mp := "/v1/sessions/chat/messages"
	for i := 1; i <= 10; i++ {
		r := s.Do("POST", mp, key, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d", i),
			"metadata": map[string]any{"i": i}, "user_id": "u9"})
		require.Equal(t, 201, r.Status, string(r.Body))
		var tr turnResp
		r.JSON(t, &tr)
		require.Equal(t, int64(i), tr.Seq)
	}
	var buf turnsResp
	buf = decodeTurns(t, s.Do("GET", mp, key, nil))
	require.Len(t, buf.Items, 4)
	require.Equal(t, int64(7), buf.Items[0].Seq)
	require.Equal(t, "turn 10", buf.Items[3].Content)
	require.Equal(t, 10.0, buf.Items[3].Metadata["i"])

	// The durable log has every turn exactly once, and pages by after_seq.
	var page turnsResp
	page = decodeTurns(t, s.Do("GET", mp+"?after_seq=0&limit=6", key, nil))
	require.Len(t, page.Items, 6)
	require.Equal(t, "6", page.NextCursor)
	page = decodeTurns(t, s.Do("GET", mp+"?after_seq=6&limit=6", key, nil))
	require.Len(t, page.Items, 4)
	require.Empty(t, page.NextCursor)
	var n, distinct int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT seq) FROM working_turns WHERE session_id = 'chat' AND user_id = 'u9'`).Scan(&n, &distinct))
	require.Equal(t, 10, n)
	require.Equal(t, 10, distinct)

	// The Redis list is trimmed to the buffer size after each commit.
	c := testenv.RedisClient(t)
	l, err := c.LLen(context.Background(), s.Prefix+"ws:{acme/chat}:t").Result()
	require.NoError(t, err)
	require.Equal(t, int64(4), l)

	// Bad turns.
	require.Equal(t, 422, s.Do("POST", mp, key, map[string]any{"role": "wizard", "content": "x"}).Status)
	require.Equal(t, 422, s.Do("POST", mp, key, map[string]any{"role": "user", "content": "a\u0000b"}).Status)
	require.Equal(t, 422, s.Do("POST", mp, key, map[string]any{"role": "user", "content": "x", "metadata": []int{1}}).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/nope/messages", key, nil).Status)
}

func TestWorkingTenantIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	a := s.NewKey("org-a", "agent")
	b := s.NewKey("org-b", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/sessions/shared/state", a, map[string]any{"state": map[string]any{"secret": 1}}).Status)
	require.Equal(t, 201, s.Do("POST", "/v1/sessions/shared/messages", a, map[string]any{"role": "user", "content": "hi"}).Status)

	require.Equal(t, 404, s.Do("GET", "/v1/sessions/shared/state", b, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/shared/messages", b, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/shared/messages?after_seq=0", b, nil).Status)
	require.Equal(t, 404, s.Do("DELETE", "/v1/sessions/shared/state", b, nil).Status)
	// Org B's own session of the same id is separate; A's is untouched.
	r := s.Do("PUT", "/v1/sessions/shared/state", b, map[string]any{"state": map[string]any{"mine": 2}})
	require.Equal(t, 201, r.Status, string(r.Body))
	var st stateResp
	st = decodeState(t, s.Do("GET", "/v1/sessions/shared/state", a, nil))
	require.Equal(t, map[string]any{"secret": 1.0}, st.State)

	// Ids that contain the separator of the other part do not collide: org "x:y" session
	// "z" vs org "x" session "y:z".
	k1 := s.NewKey("x:y", "agent")
	k2 := s.NewKey("x", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/sessions/z/state", k1, map[string]any{"state": map[string]any{"o": 1}}).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/y:z/state", k2, nil).Status)

	// A compliance key may not use working memory.
	require.Equal(t, 403, s.Do("GET", "/v1/sessions/shared/state", s.NewKey("org-a", "compliance"), nil).Status)
}

func TestWorkingBadInput(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_MAX_STATE_BYTES", "1024"))
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/bad/state"
	detail := func(r *apptest.Response) string { return string(r.Body) }

	for _, body := range []string{`{"state": [1,2]}`, `{"state": "x"}`, `{"state": 5}`, `{"state": null}`, `{}`} {
		r := s.Do("PUT", path, key, body)
		require.Equal(t, 422, r.Status, body+" → "+detail(r))
		require.Contains(t, detail(r), "state", body)
	}
	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"big": strings.Repeat("x", 2000)}})
	require.Equal(t, 413, r.Status, detail(r))
	require.Contains(t, detail(r), "body.state")
	r = s.Do("PUT", path, key, `{"state": {"k": "a\u0000b"}}`)
	require.Equal(t, 422, r.Status, detail(r))
	require.Contains(t, detail(r), "body.state")
	r = s.Do("PUT", path, key, `{"state": {"k\u0000": 1}}`)
	require.Equal(t, 422, r.Status, detail(r))
	require.Equal(t, 422, s.Do("PUT", "/v1/sessions/bad%20id/state", key, map[string]any{"state": map[string]any{}}).Status)
	require.Equal(t, 422, s.Do("GET", "/v1/sessions/"+strings.Repeat("x", 201)+"/state", key, nil).Status)
	require.Equal(t, 422, s.Do("PUT", path, key, map[string]any{"state": map[string]any{}, "user_id": "a b"}).Status)
	require.Equal(t, 422, s.Do("PUT", path, key, map[string]any{"state": map[string]any{}, "ttl_seconds": 0.5}).Status)
	require.Equal(t, 400, s.Do("PUT", path, key, map[string]any{"state": map[string]any{}}, "If-Match", "nope").Status)
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	require.Equal(t, 400, s.Do("PUT", path, key, `{"state": `+deep+`}`).Status, "nesting beyond STRATA_MAX_JSON_DEPTH is refused before parsing")
	// A patch that grows the document past the cap is refused and changes nothing.
	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"a": strings.Repeat("x", 600)}}).Status)
	r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": strings.Repeat("y", 600)}})
	require.Equal(t, 413, r.Status, detail(r))
	var st stateResp
	st = decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, int64(1), st.Version)
	// Nothing of the refused writes reached Postgres.
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*) FROM working_sessions`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestWorkingIdempotentPut(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/idem/state"
	body := map[string]any{"state": map[string]any{"x": 1}}
	r1 := s.Do("PUT", path, key, body, "Idempotency-Key", "k-1")
	require.Equal(t, 201, r1.Status, string(r1.Body))
	r2 := s.Do("PUT", path, key, body, "Idempotency-Key", "k-1")
	require.Equal(t, 201, r2.Status)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.Equal(t, r1.Header.Get("ETag"), r2.Header.Get("ETag"))
	require.JSONEq(t, string(r1.Body), string(r2.Body))
	var st stateResp
	st = decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, int64(1), st.Version, "the replay did not write again")
	// The same key with another body is refused.
	require.Equal(t, 422, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"x": 2}}, "Idempotency-Key", "k-1").Status)
	// Messages too.
	m1 := s.Do("POST", "/v1/sessions/idem/messages", key, map[string]any{"role": "user", "content": "once"}, "Idempotency-Key", "m-1")
	require.Equal(t, 201, m1.Status, string(m1.Body))
	m2 := s.Do("POST", "/v1/sessions/idem/messages", key, map[string]any{"role": "user", "content": "once"}, "Idempotency-Key", "m-1")
	require.JSONEq(t, string(m1.Body), string(m2.Body))
	var buf turnsResp
	buf = decodeTurns(t, s.Do("GET", "/v1/sessions/idem/messages", key, nil))
	require.Len(t, buf.Items, 1)
}

func TestWorkingTTLExpiry(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	path := "/v1/sessions/short/state"
	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"x": 1}, "ttl_seconds": 2})
	require.Equal(t, 201, r.Status, string(r.Body))
	var st stateResp
	st = decodeState(t, r)
	require.EqualValues(t, 2, st.TTLSeconds)
	require.WithinDuration(t, time.Now().Add(2*time.Second), st.ExpiresAt, 500*time.Millisecond)
	written := time.Now()

	// A read slides the TTL: at 1 s it pushes expiry to ~3 s, so the session is alive at 2.4 s.
	time.Sleep(time.Second) // kept: real Redis TTL sliding is what is tested
	r = s.Do("GET", path, key, nil)
	require.Equal(t, 200, r.Status)
	st = decodeState(t, r)
	require.WithinDuration(t, time.Now().Add(2*time.Second), st.ExpiresAt, 500*time.Millisecond)
	time.Sleep(time.Until(written.Add(2400 * time.Millisecond))) // kept: real Redis TTL expiry
	require.Equal(t, 200, s.Do("GET", path, key, nil).Status, "the read slid the TTL")

	// Left alone, Redis expires the keys; the durable copy has expired too, so nothing is
	// restored.
	time.Sleep(2500 * time.Millisecond) // kept: real Redis TTL expiry
	r = s.Do("GET", path, key, nil)
	require.Equal(t, 404, r.Status, string(r.Body))
	// A new incarnation continues the version numbering.
	r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"y": 1}})
	require.Equal(t, 201, r.Status, string(r.Body))
	st = decodeState(t, r)
	require.Equal(t, int64(2), st.Version)
	require.EqualValues(t, 86400, st.TTLSeconds)
}
